"""Typed errors of tar shards and TARIDX files, in shardcat's one exception tree.

Each is a :class:`~shardcat.errors.FormatError`, so it carries ``path`` and
``offset`` and is caught by ``except FormatError`` (and ``except ValueError``)
like every other bad-file error; where the meaning is the same, the
project's narrower class is mixed in (a truncated tar is also a
:class:`~shardcat.errors.TruncatedError`).
"""

from __future__ import annotations

from ...errors import ChecksumError, FormatError, TruncatedError, VersionError

__all__ = [
    "DuplicateMemberError",
    "NotATarError",
    "SplitSampleError",
    "TarChecksumError",
    "TarError",
    "TarMemberNameError",
    "TarNumberError",
    "TarTruncatedError",
    "TaridxBlockError",
    "TaridxCountError",
    "TaridxCrashIdError",
    "TaridxError",
    "TaridxExtensionIdError",
    "TaridxFlagError",
    "TaridxLayoutError",
    "TaridxMagicError",
    "TaridxTruncatedError",
    "TaridxVersionError",
]


# --- tar archives -------------------------------------------------------------


class TarError(FormatError):
    """A tar archive cannot be indexed: it is damaged, or not laid out as WebDataset expects."""


class NotATarError(TarError):
    """The file does not start with a tar header (empty, or another kind of file)."""


class TarChecksumError(TarError, ChecksumError):
    """A member header's checksum field disagrees with the sum of its bytes."""


class TarTruncatedError(TarError, TruncatedError):
    """The archive ends inside a header or a payload, or a size field runs past the end."""


class TarNumberError(TarError):
    """A numeric header field (size, checksum) is not octal or base-256."""


class TarMemberNameError(TarError):
    """A member name is not valid UTF-8, so it cannot become a sample key."""


class SplitSampleError(TarError):
    """The members of one sample are not adjacent in the archive.

    A sample is registered as one byte range; a key whose members are
    interleaved with another sample's cannot be. ``key`` names it,
    ``first_offset`` is where its first run of members starts and ``offset``
    where the stray member's header is.
    """

    def __init__(
        self, message: str, *, key: str, first_offset: int, path: str | None, offset: int
    ) -> None:
        super().__init__(message, path=path, offset=offset)
        self.key = key
        self.first_offset = first_offset


class DuplicateMemberError(TarError):
    """One sample holds two members with the same entry name (``a.jpg`` twice)."""


# --- TARIDX -------------------------------------------------------------------


class TaridxError(FormatError):
    """A ``.taridx`` file is not valid TARIDX, or cannot be written as TARIDX."""


class TaridxMagicError(TaridxError):
    """The file does not start with the ``TARIDX`` magic."""


class TaridxVersionError(TaridxError, VersionError):
    """The file's major version is newer than this reader understands."""


class TaridxTruncatedError(TaridxError, TruncatedError):
    """The file is shorter than its header, its blocks, or a whole number of rows."""


class TaridxLayoutError(TaridxError):
    """``hdr_size``, ``rec_size`` or a block offset is not what the format allows."""


class TaridxCountError(TaridxError):
    """A count in the header (rows, extensions, crash stems, stems) disagrees with the data."""


class TaridxBlockError(TaridxError):
    """The extension or crash-stem block is not valid UTF-8, or repeats a name."""


class TaridxExtensionIdError(TaridxError):
    """A row's ``extid`` is not an index into the extension block."""


class TaridxCrashIdError(TaridxError):
    """A row's ``crashid`` is above the number of crash stems."""


class TaridxFlagError(TaridxError):
    """Flag bit 0 says rows are contiguous by sample, and they are not."""
