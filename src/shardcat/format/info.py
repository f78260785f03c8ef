"""ShardInfo: everything a catalog needs to register a shard, from writer or footer."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import FormatError
from .footer import EntrySpec, Footer
from .header import Header

__all__ = ["GROUP_KEY", "InPlaceShardInfo", "RowArrays", "ShardInfo", "group_metadata"]

GROUP_KEY = "column_group"
"""Footer metadata key (among the writer's user metadata): the column group whose entries the shard holds (docs/GROUPS.md).

Absent in a base shard's footer (and in every shard written before groups
existed): such a shard holds samples. A reindex from the shards alone tells
a group's shards by it."""


def group_metadata(metadata: dict[str, Any], group: str | None) -> dict[str, Any]:
    """A job's footer metadata: the user's, plus the group's name for a group's job.

    Raises
    ------
    ValueError
        The user's metadata names :data:`GROUP_KEY` (reserved: a reindex would
        take the shards for a group's).
    """
    if GROUP_KEY in metadata:
        raise ValueError(
            f"shard metadata key {GROUP_KEY!r} is shardcat's (it names the column group a shard "
            "holds entries of): use another key"
        )
    return metadata if group is None else {**metadata, GROUP_KEY: group}


class RowArrays:
    """Accessors over a summary's footer-layout rows, shared by native and tar shards."""

    __slots__ = ()
    records: np.ndarray
    """RECORD_ROW_DTYPE rows: offset, length, key_hash, key_length, entry_count."""
    entries: np.ndarray
    """ENTRY_ROW_DTYPE rows: offset (in record), size, crc, spec; concatenated per record."""

    @property
    def record_count(self) -> int:
        return len(self.records)

    @property
    def offsets(self) -> np.ndarray:
        return self.records["offset"]

    @property
    def lengths(self) -> np.ndarray:
        return self.records["length"]

    @property
    def key_hashes(self) -> np.ndarray:
        return self.records["key_hash"]

    def entry_starts(self) -> np.ndarray:
        """Index of each record's first entry row; one more item than records."""
        starts = np.zeros(len(self.records) + 1, dtype=np.int64)
        np.cumsum(self.records["entry_count"], out=starts[1:])
        return starts

    def payload_bytes(self) -> int:
        return int(self.entries["size"].sum()) if len(self.entries) else 0


@dataclass(frozen=True, slots=True)
class ShardInfo(RowArrays):
    """Summary of one complete shard.

    The writer returns it from ``close()``; a reader builds the same from the
    footer, which is how a catalog is rebuilt from shards alone. Per-record
    columns are numpy arrays so that registering millions of rows stays fast.
    """

    path: str
    header: Header
    size: int
    data_crc: int
    footer_crc: int
    metadata: dict[str, Any]
    keys: list[str]
    records: np.ndarray = field(repr=False)
    """RECORD_ROW_DTYPE rows: offset, length, key_hash, key_length, entry_count."""
    entries: np.ndarray = field(repr=False)
    """ENTRY_ROW_DTYPE rows: offset (in record), size, crc, spec; concatenated per record."""
    specs: list[EntrySpec] = field(default_factory=list)

    @property
    def version(self) -> tuple[int, int]:
        return self.header.version

    @property
    def header_crc(self) -> int:
        return self.header.crc

    @property
    def created(self) -> dt.datetime:
        """When the shard's writer was opened (UTC); clamped to years 1 to 9999, never raises."""
        return self.header.created

    @property
    def file_id(self) -> str:
        return self.header.file_id.hex()

    @property
    def group(self) -> str | None:
        """The column group whose entries the shard holds; None: the base (docs/GROUPS.md).

        Raises
        ------
        FormatError
            The footer names a group, but not as a non-empty string.
        """
        user = self.metadata.get("user")
        group = user.get(GROUP_KEY) if isinstance(user, dict) else None
        if group is None:
            return None
        if not isinstance(group, str) or not group:
            raise FormatError(
                f"footer metadata {GROUP_KEY!r} must name a column group, not {group!r}",
                path=self.path,
            )
        return group

    @classmethod
    def from_footer(cls, path: str, header: Header, footer: Footer) -> ShardInfo:
        t = footer.trailer
        return cls(
            path=path,
            header=header,
            size=t.footer_offset + Footer.size_from(t),
            data_crc=t.data_crc,
            footer_crc=t.footer_crc,
            metadata=footer.metadata,
            keys=footer.keys(),
            records=footer.records,
            entries=footer.entries,
            specs=footer.specs,
        )


@dataclass(frozen=True, slots=True)
class InPlaceShardInfo(RowArrays):
    """Data registered where it lies (no header, no footer), shaped like :class:`ShardInfo`.

    ``records`` and ``entries`` use the native footer's row layouts, so the
    catalog registers it the way it registers a shard; each entry row holds
    the CRC32C computed while indexing.
    """

    path: str
    size: int
    """Bytes of the data it covers."""
    keys: list[str]
    records: np.ndarray = field(repr=False)
    entries: np.ndarray = field(repr=False)
    specs: list[EntrySpec] = field(default_factory=list)
    shard_number: int | None = None
