"""Value objects the catalog returns: plain frozen dataclasses, no ORM objects."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._units import count_of
from ..errors import KeyNotFoundError
from ..format import Record

__all__ = [
    "BatchResult",
    "CatalogReport",
    "DatasetInfo",
    "DatasetSummary",
    "DescribedBatch",
    "EntryKind",
    "FieldsUpdate",
    "GroupInfo",
    "JobInfo",
    "Location",
    "Problem",
    "RecordRow",
    "ShardRow",
    "VersionDiff",
    "VersionInfo",
]


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A dataset's row."""

    id: int
    name: str
    root_url: str
    format_version: tuple[int, int]
    version: int
    """Number of commits so far."""
    properties: dict[str, Any]
    created_at: dt.datetime
    keys: str = "text"
    """What the catalog keeps of each key: ``"text"`` (and its hash, in key order),
    ``"unsorted"`` (both, no key-order index) or ``"hash"`` only."""


@dataclass(frozen=True, slots=True)
class DatasetSummary:
    """A dataset with the totals of its committed shards (what ``shardcat ls`` lists)."""

    name: str
    root_url: str
    created_at: dt.datetime
    shard_count: int
    record_count: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class EntryKind:
    """One kind of entry of a dataset, and how many committed records hold one."""

    name: str
    content_type: str
    codec: str
    """The codec's label: ``none``, ``zstd`` or ``lz4``."""
    record_count: int


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job's row."""

    id: int
    dataset: str
    state: str
    """``open``, ``committed`` or ``aborted``."""
    version: int | None
    """The dataset version its commit produced."""
    description: str | None
    properties: dict[str, Any] | None
    created_at: dt.datetime
    finished_at: dt.datetime | None
    shard_count: int = 0
    record_count: int = 0


@dataclass(frozen=True, slots=True)
class ShardRow:
    """A shard's row (without its records)."""

    id: int
    dataset: str
    url: str
    state: str
    job_id: int | None
    shard_number: int | None
    record_count: int
    size_bytes: int
    payload_bytes: int
    file_id: str
    format_version: tuple[int, int]
    created_at: dt.datetime
    header_crc: int
    data_crc: int
    footer_crc: int
    metadata: dict[str, Any] = field(default_factory=dict)
    kind: str = "native"
    """``native`` (a shardcat shard) or ``tar`` (a WebDataset tar indexed in place)."""
    added_version: int | None = None
    """The version that made it visible (None while staged)."""
    removed_version: int | None = None
    """The version from which none of its records is live; older versions still read it."""


@dataclass(frozen=True, slots=True)
class RecordRow:
    """One record's catalog row, decoded: where it is and where each entry lies inside it."""

    key: str
    offset: int
    length: int
    entries: tuple[tuple[str, str, str], ...]
    """``(name, content_type, codec)`` per entry, in record order (its layout)."""
    spans: tuple[tuple[int, int, int], ...]
    """``(offset in the record, stored size, CRC32C)`` per entry, in the same order."""


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """One entry of a record as its catalog row describes it: no byte of the shard read.

    ``size`` and ``crc32c`` are of the bytes as stored, which are the entry's
    bytes when ``codec`` is ``none`` (a compressed entry is larger once read).
    """

    name: str
    content_type: str
    codec: str
    """The codec's label: ``none``, ``zstd`` or ``lz4``."""
    size: int
    crc32c: int


@dataclass(frozen=True, slots=True)
class FieldsUpdate:
    """What ``update_fields`` did: the version it made, and what it changed there."""

    dataset: str
    version: int
    keys: int
    """Keys whose records it changed."""
    values: int
    """Values it set (a ``None`` value unsets one: counted in ``unset``)."""
    unset: int
    skipped: int
    """Keys without a live record it left out (``on_missing="skip"``)."""
    fields: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A column group of a dataset: ``shardcat groups``, :meth:`Catalog.groups`."""

    name: str
    id: int
    added_version: int
    dropped_version: int | None
    records: int
    """Its live records (0 once dropped)."""
    bytes: int


@dataclass(frozen=True, slots=True)
class Location:
    """Where a record's bytes are: ``url``, bytes ``[offset, offset + length)``.

    ``groups``: where the sample's column groups' records are, in group order
    (docs/GROUPS.md); empty for a sample without groups.
    """

    url: str
    offset: int
    length: int
    groups: tuple[Location, ...] = ()

    @property
    def end(self) -> int:
        return self.offset + self.length


@dataclass(slots=True)
class DescribedBatch:
    """Many samples described from their catalog rows, with the entries asked for read.

    ``described``: every entry of each found key, in record order (no read);
    ``records``: each found key's record holding the entries that were read
    (CRC-checked); ``errors``: keys whose read bytes did not match their row,
    with the error (the other keys are unaffected); ``missing``: keys not
    found at the version asked for.
    """

    described: dict[str, list[EntryInfo]]
    records: dict[str, Record]
    errors: dict[str, Exception]
    missing: list[str]


class BatchResult(Sequence["Record | None"]):
    """Records of a :meth:`Catalog.get_many` call, in the order the keys were asked.

    A missing key has ``None`` at its positions and is listed once in
    :attr:`missing`; nothing is dropped silently.
    """

    __slots__ = ("keys", "missing", "records")

    def __init__(self, keys: list[str], records: list[Record | None], missing: list[str]) -> None:
        self.keys = keys
        self.records = records
        self.missing = missing

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: Any) -> Any:
        return self.records[i]

    def __iter__(self) -> Iterator[Record | None]:
        return iter(self.records)

    @property
    def ok(self) -> bool:
        """True when every key was found."""
        return not self.missing

    def found(self) -> dict[str, Record]:
        """Key → record for the keys that were found."""
        return {k: r for k, r in zip(self.keys, self.records) if r is not None}

    def raise_for_missing(self) -> None:
        """Raise KeyNotFoundError naming the missing keys, if any.

        Raises
        ------
        KeyNotFoundError
            If at least one key was not found.
        """
        if self.missing:
            shown = ", ".join(repr(k) for k in self.missing[:10])
            more = f" and {len(self.missing) - 10} more" if len(self.missing) > 10 else ""
            raise KeyNotFoundError(f"{len(self.missing)} key(s) not found: {shown}{more}")

    def __repr__(self) -> str:
        return f"BatchResult({len(self.records)} keys, {len(self.missing)} missing)"


@dataclass(frozen=True, slots=True)
class Problem:
    """One disagreement :meth:`Catalog.verify` found."""

    url: str
    kind: str
    """``missing``, ``unreadable``, ``shard-mismatch``, ``row-not-in-footer``,
    ``record-not-in-catalog``, ``duplicate-row`` or ``corrupt``; the quick verify's
    ``row-count`` and ``row-out-of-range``; the history's ``history-*``."""
    message: str
    keys: tuple[str, ...] = ()

    def __str__(self) -> str:
        return f"{self.url}: {self.kind}: {self.message}"


@dataclass(frozen=True, slots=True)
class CatalogReport:
    """What :meth:`Catalog.verify` checked and every disagreement it found."""

    dataset: str
    shards_checked: int
    records_checked: int
    """Records read back and compared; quick: catalog rows counted."""
    bytes_checked: int
    """Bytes read back; quick: the bytes of the shards' ends read."""
    problems: list[Problem]
    quick: bool = False
    """The quick verify: the shards' ends and their rows' counts, no record read."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def by_shard(self) -> dict[str, list[Problem]]:
        out: dict[str, list[Problem]] = {}
        for p in self.problems:
            out.setdefault(p.url, []).append(p)
        return out

    def __str__(self) -> str:
        head = (
            f"dataset {self.dataset!r}: {count_of(self.shards_checked, 'shard')}, "
            f"{count_of(self.records_checked, 'record')}, "
            f"{self.bytes_checked} bytes checked"
            + (" (quick: headers, trailers and row counts; no record read)" if self.quick else "")
            + "; "
        )
        if self.ok:
            return head + "no problems"
        return (
            head
            + f"{len(self.problems)} problem(s):\n"
            + "\n".join(f"  {p}" for p in self.problems)
        )


@dataclass(frozen=True, slots=True)
class VersionInfo:
    """One kept version of a dataset: what ``shardcat log`` lists."""

    number: int
    created_at: dt.datetime
    operation: str
    """``write``, ``append``, ``overwrite``, ``delete``, ``register``, ``reindex``, ``remove_shard``, ``upgrade``."""
    job_id: int | None
    records_added: int
    records_removed: int
    bytes_added: int
    bytes_removed: int
    message: str | None
    total_records: int
    total_bytes: int
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class VersionDiff:
    """What changed between two versions, by key: counts, and the keys when asked for."""

    dataset: str
    old: int
    new: int
    added: int
    removed: int
    replaced: int
    added_keys: list[str] | None = None
    removed_keys: list[str] | None = None
    replaced_keys: list[str] | None = None
