"""TARIDX 1.0: iTar's index of tar members, read and written byte for byte.

The layout is declared in :mod:`.spec`; docs/IN-PLACE.md says what of the
specification is implemented. In short: a 64-byte header, the extension
names and the crash stems as newline-joined UTF-8, then one 32-byte row per
member (``fid``, header ``offset``, payload ``size``, ``extid``,
``crashid``, ``keyhash``).

A *stem* names a sample as iTar does: the member name after its last ``/``,
up to the first dot (:func:`~.itar.itar_split`; not WebDataset's key, which
keeps the folders); its ``keyhash`` is xxHash64 of its UTF-8 bytes.
Two stems can share a hash: the first one met (in row order) keeps crash id
0, every other stem with that hash is listed in the crash block and its rows
carry its position there (1, 2, ...) as ``crashid``. ``(keyhash, crashid)``
therefore names a stem exactly, and a lookup hashes the stem, then takes its
crash id from the crash block (0 if it is not listed).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

from ...errors import InvalidKeyError, NewerVersionWarning
from ..checksums import key_hash
from .errors import (
    TaridxBlockError,
    TaridxCountError,
    TaridxCrashIdError,
    TaridxError,
    TaridxExtensionIdError,
    TaridxFlagError,
    TaridxLayoutError,
    TaridxMagicError,
    TaridxTruncatedError,
    TaridxVersionError,
)
from .spec import (
    TARIDX_FLAG_CONTIGUOUS,
    TARIDX_HEADER_DTYPE,
    TARIDX_HEADER_SIZE,
    TARIDX_MAGIC,
    TARIDX_ROW_DTYPE,
    TARIDX_ROW_SIZE,
    TARIDX_VERSION,
)

__all__ = ["SAMPLE_RANGE_DTYPE", "Taridx", "read_taridx", "stem_groups"]

Hasher = Callable[[bytes], int]
"""A stem's UTF-8 bytes -> unsigned 64-bit hash; xxh64 unless a test forces collisions."""

_MAGIC_FIELD = TARIDX_MAGIC.ljust(8, b"\0")

SAMPLE_RANGE_DTYPE = np.dtype(
    [
        ("fid", "<u2"),
        ("keyhash", "<u8"),
        ("crashid", "<u4"),
        ("offset", "<u8"),  # first member's header
        ("length", "<u8"),  # to the end of the last payload
        ("first_row", "<u8"),
        ("row_count", "<u8"),
    ]
)
"""One run of rows of the same stem in the same tar: a sample's byte range."""


@dataclass(frozen=True, slots=True)
class Taridx:
    """The contents of a ``.taridx`` file.

    The header's counts, offsets and flag are not stored: they follow from
    these fields, and :meth:`to_bytes` derives them (the reader checks a
    file's header against the same derivation).
    """

    rows: np.ndarray = field(repr=False)
    """TARIDX_ROW_DTYPE rows, in file order."""
    extensions: tuple[str, ...]
    """Extension id -> name (``"jpg"``, ``"seg.png"``)."""
    crash_stems: tuple[str, ...] = ()
    """Crash id ``k`` (1-based) -> ``crash_stems[k - 1]``."""
    version: tuple[int, int] = TARIDX_VERSION
    """As read from a file (:meth:`to_bytes` always writes 1.0)."""

    @property
    def n_rows(self) -> int:
        return len(self.rows)

    @property
    def n_stems(self) -> int:
        """Distinct stems: distinct ``(keyhash, crashid)`` pairs."""
        return _count_pairs(self.rows)

    @property
    def contiguous(self) -> bool:
        """Whether every stem's rows form one run (header flag bit 0)."""
        return _runs(self.rows) == self.n_stems

    def stem_id(self, stem: str, *, hasher: Hasher = key_hash) -> tuple[int, int]:
        """``(keyhash, crashid)`` of ``stem``: its hash and its crash-block id (0 if canonical)."""
        try:
            crashid = self.crash_stems.index(stem) + 1
        except ValueError:
            crashid = 0
        return hasher(stem.encode("utf-8")), crashid

    def lookup(self, stem: str, *, hasher: Hasher = key_hash) -> np.ndarray:
        """The rows of ``stem`` (a copy, in file order); empty if it is not indexed."""
        h, crashid = self.stem_id(stem, hasher=hasher)
        rows = self.rows
        picked: np.ndarray = rows[(rows["keyhash"] == np.uint64(h)) & (rows["crashid"] == crashid)]
        return picked

    def extension_of(self, rows: np.ndarray) -> list[str]:
        """The extension name of each row."""
        return [self.extensions[i] for i in rows["extid"].tolist()]

    def to_bytes(self) -> bytes:
        """The file, byte for byte: header, extension block, crash block, rows.

        Raises
        ------
        InvalidKeyError
            An extension or crash stem contains a newline (the block separator)
            or is not encodable as UTF-8.
        TaridxError
            A row names an extension or crash id that does not exist, or a
            count does not fit its header field.
        """
        ext_block = _block(self.extensions, "extension")
        crash_block = _block(self.crash_stems, "crash stem")
        rows = np.ascontiguousarray(self.rows, dtype=TARIDX_ROW_DTYPE)
        if len(self.extensions) > 0xFFFF_FFFF or len(self.crash_stems) > 0xFFFF_FFFF:
            raise TaridxError("more than 2**32 - 1 extensions or crash stems")
        offset_arr = TARIDX_HEADER_SIZE + len(ext_block) + len(crash_block)
        _check_ids(rows, len(self.extensions), len(self.crash_stems), path=None, at=offset_arr)
        if len(set(self.extensions)) != len(self.extensions):
            raise TaridxError(f"extensions repeat a name: {list(self.extensions)[:20]}")
        if len(set(self.crash_stems)) != len(self.crash_stems):
            raise TaridxError("crash stems repeat a stem")
        n_stems = _count_pairs(rows)
        header = np.zeros(1, dtype=TARIDX_HEADER_DTYPE)
        header["magic"] = TARIDX_MAGIC
        header["major"], header["minor"] = TARIDX_VERSION
        header["rec_size"] = TARIDX_ROW_SIZE
        header["hdr_size"] = TARIDX_HEADER_SIZE
        header["n_stems"] = n_stems
        header["n_rows"] = len(rows)
        header["n_ext"] = len(self.extensions)
        header["n_crash"] = len(self.crash_stems)
        header["off_crash"] = TARIDX_HEADER_SIZE + len(ext_block)
        header["off_arr"] = TARIDX_HEADER_SIZE + len(ext_block) + len(crash_block)
        header["flags"] = TARIDX_FLAG_CONTIGUOUS if _runs(rows) == n_stems else 0
        return header.tobytes() + ext_block + crash_block + rows.tobytes()

    def write(self, file: BinaryIO) -> int:
        """Write :meth:`to_bytes` to an open binary file; returns the bytes written."""
        data = self.to_bytes()
        file.write(data)
        return len(data)

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, *, path: str | None = None) -> Taridx:
        """Parse and validate a ``.taridx`` file held in memory.

        Every MUST and SHOULD check of the specification's reader section is
        made, plus the consistency of ``n_stems``, of crash ids and of flag
        bit 0 with the rows; reserved bytes and flag bits 1-7 are ignored.

        Raises
        ------
        TaridxTruncatedError
            Shorter than the header, blocks running past the end, or a partial row.
        TaridxMagicError
            Not ``TARIDX``.
        TaridxVersionError
            A major version other than 1 (a newer minor only warns:
            :class:`~shardcat.errors.NewerVersionWarning`).
        TaridxLayoutError
            ``hdr_size`` not 64, ``rec_size`` not 32, ``off_crash < 64`` or
            ``off_arr < off_crash``.
        TaridxCountError
            ``n_rows``, ``n_ext``, ``n_crash`` or ``n_stems`` disagree with the data.
        TaridxBlockError
            A block is not UTF-8, or repeats a name.
        TaridxExtensionIdError, TaridxCrashIdError
            A row names an extension or crash stem that does not exist.
        TaridxFlagError
            Flag bit 0 is set and rows are not contiguous by stem.
        """
        view = memoryview(data).cast("B")
        size = len(view)
        if size < TARIDX_HEADER_SIZE:
            raise TaridxTruncatedError(
                f"a TARIDX file starts with a {TARIDX_HEADER_SIZE}-byte header; "
                f"this one has {size} bytes",
                path=path,
                offset=0,
            )
        if bytes(view[:8]) != _MAGIC_FIELD:
            raise TaridxMagicError(
                f"not a TARIDX file: magic {bytes(view[:8])!r}, expected {_MAGIC_FIELD!r}",
                path=path,
                offset=0,
            )
        h = np.frombuffer(view[:TARIDX_HEADER_SIZE], dtype=TARIDX_HEADER_DTYPE)[0]
        major, minor = int(h["major"]), int(h["minor"])
        if major != TARIDX_VERSION[0]:
            raise TaridxVersionError(
                f"TARIDX version {major}.{minor}; this reader understands major version "
                f"{TARIDX_VERSION[0]} (upgrade shardcat, or re-create the index)",
                path=path,
                offset=8,
            )
        if minor > TARIDX_VERSION[1]:
            warnings.warn(
                f"{path or '<taridx>'}: TARIDX version {major}.{minor} is newer than "
                f"{TARIDX_VERSION[0]}.{TARIDX_VERSION[1]}; reading the fields of 1.0",
                NewerVersionWarning,
                stacklevel=2,
            )
        hdr_size, rec_size = int(h["hdr_size"]), int(h["rec_size"])
        if hdr_size != TARIDX_HEADER_SIZE:
            raise TaridxLayoutError(
                f"hdr_size is {hdr_size}, TARIDX 1.x headers are {TARIDX_HEADER_SIZE} bytes",
                path=path,
                offset=14,
            )
        if rec_size != TARIDX_ROW_SIZE:
            raise TaridxLayoutError(
                f"rec_size is {rec_size}, TARIDX 1.x rows are {TARIDX_ROW_SIZE} bytes",
                path=path,
                offset=12,
            )
        off_crash, off_arr = int(h["off_crash"]), int(h["off_arr"])
        if off_crash < TARIDX_HEADER_SIZE:
            raise TaridxLayoutError(
                f"off_crash is {off_crash}, inside the {TARIDX_HEADER_SIZE}-byte header",
                path=path,
                offset=40,
            )
        if off_arr < off_crash:
            raise TaridxLayoutError(
                f"off_arr ({off_arr}) is before off_crash ({off_crash})", path=path, offset=48
            )
        if off_arr > size:
            raise TaridxTruncatedError(
                f"the row array should start at byte {off_arr}, the file has {size} bytes",
                path=path,
                offset=48,
            )
        row_bytes = size - off_arr
        if row_bytes % TARIDX_ROW_SIZE:
            raise TaridxTruncatedError(
                f"{row_bytes} bytes after off_arr are not a whole number of "
                f"{TARIDX_ROW_SIZE}-byte rows (the file was cut short or extended)",
                path=path,
                offset=off_arr + row_bytes - row_bytes % TARIDX_ROW_SIZE,
            )
        n_rows = row_bytes // TARIDX_ROW_SIZE
        if n_rows != int(h["n_rows"]):
            raise TaridxCountError(
                f"header n_rows is {int(h['n_rows'])}, the file holds {n_rows} rows",
                path=path,
                offset=24,
            )
        extensions = _names(
            view[TARIDX_HEADER_SIZE:off_crash],
            int(h["n_ext"]),
            "extension",
            path,
            TARIDX_HEADER_SIZE,
        )
        if extensions is None or len(extensions) != int(h["n_ext"]):
            raise TaridxCountError(
                f"header n_ext is {int(h['n_ext'])}, the extension block holds "
                f"{_count(view[TARIDX_HEADER_SIZE:off_crash])}",
                path=path,
                offset=32,
            )
        crash = _names(view[off_crash:off_arr], int(h["n_crash"]), "crash stem", path, off_crash)
        if crash is None or len(crash) != int(h["n_crash"]):
            raise TaridxCountError(
                f"header n_crash is {int(h['n_crash'])}, the crash block holds "
                f"{_count(view[off_crash:off_arr])}",
                path=path,
                offset=36,
            )
        for what, names, at in (
            ("extension", extensions, TARIDX_HEADER_SIZE),
            ("crash stem", crash, off_crash),
        ):
            if len(set(names)) != len(names):
                raise TaridxBlockError(f"the {what} block repeats a name", path=path, offset=at)
        rows = np.frombuffer(view[off_arr:], dtype=TARIDX_ROW_DTYPE).copy()
        _check_ids(rows, len(extensions), len(crash), path=path, at=off_arr)
        n_stems = _count_pairs(rows)
        if n_stems != int(h["n_stems"]):
            raise TaridxCountError(
                f"header n_stems is {int(h['n_stems'])}, the rows hold {n_stems} distinct "
                "(keyhash, crashid) stems",
                path=path,
                offset=16,
            )
        if int(h["flags"]) & TARIDX_FLAG_CONTIGUOUS and _runs(rows) != n_stems:
            raise TaridxFlagError(
                "flag bit 0 says rows are contiguous by stem, but some stem's rows are "
                "split; re-write the index (or clear the flag)",
                path=path,
                offset=56,
            )
        return cls(rows, tuple(extensions), tuple(crash), (major, minor))

    def sample_ranges(self) -> np.ndarray:
        """Each run of one stem's rows in one tar, as a byte range (SAMPLE_RANGE_DTYPE).

        The range runs from the first row's header to the end of the last
        row's payload; extension headers (pax, GNU long names) before the first
        member are not in TARIDX, so they are not covered.
        """
        rows = self.rows
        bounds = stem_groups(rows)
        out = np.zeros(len(bounds) - 1, dtype=SAMPLE_RANGE_DTYPE)
        if len(out) == 0:
            return out
        first = bounds[:-1]
        ends = rows["offset"] + np.uint64(512) + rows["size"]
        out["fid"] = rows["fid"][first]
        out["keyhash"] = rows["keyhash"][first]
        out["crashid"] = rows["crashid"][first]
        start = np.minimum.reduceat(rows["offset"], first)
        out["offset"] = start
        out["length"] = np.maximum.reduceat(ends, first) - start
        out["first_row"] = first
        out["row_count"] = np.diff(bounds)
        return out


def stem_groups(rows: np.ndarray) -> np.ndarray:
    """Boundaries of runs of rows sharing ``(fid, keyhash, crashid)``: run ``i`` is ``[b[i], b[i+1])``."""
    n = len(rows)
    if n == 0:
        return np.zeros(1, dtype=np.int64)
    change = (
        (rows["keyhash"][1:] != rows["keyhash"][:-1])
        | (rows["crashid"][1:] != rows["crashid"][:-1])
        | (rows["fid"][1:] != rows["fid"][:-1])
    )
    return np.concatenate(([0], np.flatnonzero(change) + 1, [n])).astype(np.int64)


def read_taridx(source: str | BinaryIO | bytes, *, path: str | None = None) -> Taridx:
    """Read a ``.taridx`` file from a local path, an open binary file or bytes.

    Raises
    ------
    TaridxError
        As :meth:`Taridx.from_bytes`.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Taridx.from_bytes(source, path=path)
    if isinstance(source, str):
        with open(source, "rb") as f:
            return Taridx.from_bytes(f.read(), path=path or source)
    return Taridx.from_bytes(source.read(), path=path or str(getattr(source, "name", "<taridx>")))


# --- helpers --------------------------------------------------------------------


def _block(names: Sequence[str], what: str) -> bytes:
    for name in names:
        if "\n" in name:
            raise InvalidKeyError(
                f"{what} {name!r} contains a newline, which TARIDX uses to separate names"
            )
    try:
        return "\n".join(names).encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidKeyError(f"a {what} is not encodable as UTF-8: {e}") from e


def _names(
    block: memoryview, declared: int, what: str, path: str | None, at: int
) -> list[str] | None:
    """A block's names; ``None`` when the block is empty but the header declares more than one.

    An empty block is zero names when ``declared`` is 0 and one empty name
    when it is 1 (``"\\n".join([""])`` is empty too): the header decides.
    """
    raw = bytes(block)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaridxBlockError(
            f"the {what} block is not valid UTF-8 ({e})", path=path, offset=at + e.start
        ) from e
    if not text:
        if declared == 0:
            return []
        return [""] if declared == 1 else None
    return text.split("\n")


def _count(block: memoryview) -> int:
    return bytes(block).count(b"\n") + 1 if len(block) else 0


def _check_ids(rows: np.ndarray, n_ext: int, n_crash: int, *, path: str | None, at: int) -> None:
    if not len(rows):
        return
    bad = np.flatnonzero(rows["extid"] >= n_ext)
    if len(bad):
        i = int(bad[0])
        raise TaridxExtensionIdError(
            f"row {i} has extid {int(rows['extid'][i])}, there are {n_ext} extensions",
            path=path,
            offset=at + i * TARIDX_ROW_SIZE + 18,
        )
    bad = np.flatnonzero(rows["crashid"] > n_crash)
    if len(bad):
        i = int(bad[0])
        raise TaridxCrashIdError(
            f"row {i} has crashid {int(rows['crashid'][i])}, there are {n_crash} crash stems",
            path=path,
            offset=at + i * TARIDX_ROW_SIZE + 20,
        )


def _sorted_pairs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((rows["crashid"], rows["keyhash"]))
    return rows["keyhash"][order], rows["crashid"][order]


def _count_pairs(rows: np.ndarray) -> int:
    if not len(rows):
        return 0
    h, c = _sorted_pairs(rows)
    return int(np.count_nonzero((h[1:] != h[:-1]) | (c[1:] != c[:-1]))) + 1


def _runs(rows: np.ndarray) -> int:
    """Runs of equal ``(keyhash, crashid)`` in row order (iTar's contiguity test)."""
    if not len(rows):
        return 0
    h, c = rows["keyhash"], rows["crashid"]
    return int(np.count_nonzero((h[1:] != h[:-1]) | (c[1:] != c[:-1]))) + 1
