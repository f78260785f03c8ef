"""Shard kinds: what a native shard and data indexed in place register, in one place.

A ``shards`` row is a shardcat shard file (``kind = 'native'``), a
WebDataset tar registered where it lies (``kind = 'tar'``, revision 0004),
or a group of samples of a plain folder of files registered where they lie
(``kind = 'files'``, revision 0010: its URL names the folder and the group,
each entry is a whole file, :mod:`shardcat.format.folder`), or an MDS shard
or LitData chunk registered where it lies (``kind = 'mds'``, ``'litdata'``,
revision 0011: each sample a byte range of the file, each column an entry,
:mod:`shardcat.format.columnar`).
All register the same ``records`` rows (byte range, per-entry offset, size
and CRC32C in ``spans``, a layout); the catalog's side of what differs is
looked up here by the row's kind:

- the ``shards`` columns a summary gives (a tar has no header or footer);
- whether deleting a dataset deletes its files by default (tars are the
  user's: only when asked; a folder's files, MDS shards and LitData chunks
  never: their directory's ``index.json`` names them).

How each kind is read (a whole record decoded, a file checked again) is
the read layer's: :mod:`shardcat.reading.decode` and
:mod:`shardcat.reading.checks`, keyed by the same names.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

from ..errors import FormatError
from ..format.checksums import crc32c
from ..format.spec import NO_SHARD_NUMBER
from .results import Problem

# Tar scanning loads on first use: a native point lookup (and a cold first one) needs none.
if TYPE_CHECKING:
    from ..format import ShardInfo
    from ..format.columnar import ColumnShardInfo
    from ..format.folder import FolderShardInfo
    from ..format.header import Header, Trailer
    from ..format.tar import TarShardInfo

__all__ = [
    "KINDS",
    "RANGES_OF_FILE",
    "Ends",
    "EndsCheck",
    "FileCheck",
    "ShardKind",
    "Summary",
    "kind_of",
    "shard_kind",
    "tar_file_id",
]

# A forward reference (Union, not |): the tar module loads lazily.
Summary = Union["ShardInfo", "TarShardInfo", "FolderShardInfo", "ColumnShardInfo"]
"""What registering a shard takes: a native footer's summary, a tar's scan, a folder group's,
or an MDS shard's or LitData chunk's scan."""

InPlaceInfo = Union["TarShardInfo", "FolderShardInfo", "ColumnShardInfo"]
"""A summary of data indexed where it lies (an :class:`~shardcat.format.info.InPlaceShardInfo`)."""

FileCheck = tuple[Summary | None, list[Problem], int]
"""What reading one file found: its summary (if readable), problems, records checked."""


@dataclass(frozen=True, slots=True)
class Ends:
    """What the quick verify read of a file: its size; a native shard's header and trailer."""

    size: int
    header: Header | None = None
    trailer: Trailer | None = None
    bytes_read: int = 0


EndsCheck = tuple[Ends | None, list[Problem]]
"""What reading one file's ends found (None: unreadable, or a kind whose ends are not read)."""


@dataclass(frozen=True, slots=True)
class ShardKind:
    """The operations that depend on a shard's kind."""

    name: str
    columns: Callable[[Any], dict[str, Any]]
    """``shards`` columns (besides url, state, job) from the summary."""
    owns_files: bool
    """Deleting its dataset deletes the file by default (native shards), else only if asked."""
    from_rows: bool = False
    """It has no footer: its records are read from their catalog rows (tars, folder groups)."""
    is_file: bool = True
    """Its URL is the one file that holds its records (a folder group's names no file): it can
    be copied."""
    deleted_on_request: bool = True
    """Deleting its dataset deletes the file when asked (``delete_tars``): a tar's. A file
    another file names (an MDS shard in its ``index.json``) is never deleted."""

    @property
    def ranges_of_file(self) -> bool:
        """Its records are byte ranges of its one file, placed by their rows (a tar, an MDS
        shard, a LitData chunk): a lookup reads a record's range, as a native one's."""
        return self.from_rows and self.is_file


def _native_columns(info: ShardInfo) -> dict[str, Any]:
    header = info.header
    user = info.metadata.get("user", {})
    return {
        "kind": "native",
        "shard_number": None
        if header.shard_number == NO_SHARD_NUMBER
        else int(header.shard_number),
        "file_id": info.file_id,
        "format_major": int(header.version[0]),
        "format_minor": int(header.version[1]),
        "flags": int(header.flags),
        "created_at": info.created,  # clamped to a valid date, as every reader reports it
        "alignment": int(header.alignment),
        "compression": header.default_codec.label,
        "header_crc": int(header.crc),
        "record_count": len(info.records),
        "entry_count": len(info.entries),
        "size_bytes": int(info.size),
        "payload_bytes": info.payload_bytes(),
        "data_crc": int(info.data_crc),
        "footer_crc": int(info.footer_crc),
        "user_metadata": user if isinstance(user, dict) else {"value": user},
    }


def tar_file_id(info: InPlaceInfo) -> str:
    """A tar's id: BLAKE2b-128 of its record and entry rows (keys' hashes, offsets, sizes, CRCs).

    A tar has no id of its own; this one changes whenever a payload, a key or
    a member's place changes, so ``verify`` reports a rewritten tar as such.
    """
    import numpy as np

    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(info.records).tobytes())
    h.update(np.ascontiguousarray(info.entries).tobytes())
    return h.hexdigest()


def _in_place_columns(info: InPlaceInfo, kind: str) -> dict[str, Any]:
    """The columns of data indexed where it lies: no header or footer, a CRC per payload."""
    import numpy as np

    crcs = np.ascontiguousarray(info.entries["crc"], dtype="<u4")
    return {
        "kind": kind,
        "shard_number": info.shard_number,
        "file_id": tar_file_id(info),
        "format_major": 0,
        "format_minor": 0,
        "flags": 0,
        "created_at": dt.datetime.now(dt.UTC),  # when it was indexed: it has no writer clock
        "alignment": 1,
        "compression": "none",
        "header_crc": 0,
        "record_count": len(info.records),
        "entry_count": len(info.entries),
        "size_bytes": int(info.size),
        "payload_bytes": info.payload_bytes(),
        "data_crc": crc32c(crcs.tobytes()),
        "footer_crc": 0,
    }


def _tar_columns(info: TarShardInfo) -> dict[str, Any]:
    columns = _in_place_columns(info, "tar")
    columns["user_metadata"] = {
        "tar": {
            "end_offset": int(info.end_offset),
            "member_count": int(info.member_count),
            "skipped": int(info.skipped),
        }
    }
    return columns


def _files_columns(info: FolderShardInfo) -> dict[str, Any]:
    columns = _in_place_columns(info, "files")
    columns["user_metadata"] = {"files": {"folder": info.folder, "count": len(info.entries)}}
    return columns


def _columnar_columns(info: ColumnShardInfo) -> dict[str, Any]:
    columns = _in_place_columns(info, info.kind)
    columns["user_metadata"] = {info.kind: {"first_index": info.first_index}}
    return columns


NATIVE = ShardKind("native", _native_columns, True)
TAR = ShardKind("tar", _tar_columns, False, from_rows=True)
FILES = ShardKind("files", _files_columns, False, from_rows=True, is_file=False)
MDS = ShardKind("mds", _columnar_columns, False, from_rows=True, deleted_on_request=False)
LITDATA = ShardKind("litdata", _columnar_columns, False, from_rows=True, deleted_on_request=False)

KINDS: dict[str, ShardKind] = {k.name: k for k in (NATIVE, TAR, FILES, MDS, LITDATA)}

RANGES_OF_FILE = frozenset(k.name for k in KINDS.values() if k.ranges_of_file)
"""The kinds whose records are byte ranges of their file read from their rows (not native)."""


def shard_kind(name: str) -> ShardKind:
    """The kind of a ``shards`` row.

    Raises
    ------
    FormatError
        The catalog names a kind this shardcat does not know (a newer catalog).
    """
    kind = KINDS.get(name)
    if kind is None:
        raise FormatError(
            f"shard kind {name!r} is unknown to this shardcat (known: {', '.join(KINDS)}); "
            "upgrade shardcat"
        )
    return kind


def kind_of(info: Summary) -> ShardKind:
    """The kind of a summary: a tar scan, a folder group, a columnar file or a native footer."""
    from ..format.columnar import ColumnShardInfo
    from ..format.folder import FolderShardInfo
    from ..format.tar import TarShardInfo

    if isinstance(info, FolderShardInfo):
        return FILES
    if isinstance(info, ColumnShardInfo):
        return KINDS[info.kind]
    return TAR if isinstance(info, TarShardInfo) else NATIVE
