"""Column groups joined to streamed base records: the plan, and the read (docs/GROUPS.md §5).

Readers that stream a base shard (``shardcat.read``, :class:`~shardcat.readers.SampleStream`,
the PyTorch datasets, ``to_dask_dataframe``) give each sample its groups'
entries too. Per base shard and group, the catalog says where the group's
records of that shard's samples are (:func:`~shardcat.catalog.group_rows`);
:func:`plan_joins` splits them by the one alignment rule:

**Aligned**: taken in the base shard's record order, a group's records read
forward through the group's shards (by shard number, then offset). The
longest such run of them (all of them, for a group written from the
dataset's own partitioning, e.g. ``shardcat.read(...).map(...)``) is
*streamed*: read in forward ranged reads beside the base and matched to it
by position, with no per-key lookup. The rest (a 2 % fix written later, a
group written in another order) is *keyed*: read by location in batched
ranged reads, a window of base records at a time, and logged.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Collection, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..format import Record
from ..format.merged import MergedRecord

if TYPE_CHECKING:
    from ..catalog.group_rows import GroupRows
    from ..catalog.results import ShardRow
    from ..storage import LocalShardCache
    from ..storage.shards import ShardReader

__all__ = [
    "GroupJoin",
    "GroupPart",
    "forward_run",
    "join_records",
    "join_summary",
    "log_joins",
    "plan_joins",
]

logger = logging.getLogger("shardcat.groups")

_READ_BYTES = 4 * 2**20
"""A streamed group part is read in forward ranged reads of about this many bytes."""

_KEYED_WINDOW = 1024
"""Keyed group records read at once (merged ranged reads), in base order."""


@dataclass(frozen=True, slots=True)
class GroupPart:
    """Records of one group shard that join one base shard's records.

    ``offsets`` are the group records' byte offsets, increasing (the read
    order); ``bases[i]`` the offset of the base record ``offsets[i]`` joins.
    """

    url: str
    expect: tuple[str, int] | None
    offsets: tuple[int, ...]
    bases: tuple[int, ...]
    kind: str = "native"


@dataclass(frozen=True, slots=True)
class GroupJoin:
    """One group's records of one base shard: those streamed in order, and those read by key."""

    group: str
    streamed: tuple[GroupPart, ...] = ()
    """In base order: their ``bases`` increase across the parts."""
    keyed: tuple[GroupPart, ...] = ()

    @property
    def streamed_count(self) -> int:
        """Group records read as a forward stream."""
        return sum(len(p.offsets) for p in self.streamed)

    @property
    def keyed_count(self) -> int:
        """Group records read by location, out of the base's order."""
        return sum(len(p.offsets) for p in self.keyed)


def forward_run(positions: Sequence[tuple[Any, int]]) -> list[bool]:
    """Which of ``positions`` (in base order) form the longest run reading forward.

    The alignment rule's one definition: a longest strictly increasing
    subsequence of ``(shard order, offset)`` (patience sorting, O(n log n));
    a fully aligned group's positions are all in it.
    """
    tails: list[tuple[Any, int]] = []  # smallest last position of a run of each length
    tail_at: list[int] = []
    before = [-1] * len(positions)
    for i, pos in enumerate(positions):
        n = bisect.bisect_left(tails, pos)
        if n == len(tails):
            tails.append(pos)
            tail_at.append(i)
        else:
            tails[n] = pos
            tail_at[n] = i
        before[i] = tail_at[n - 1] if n else -1
    member = [False] * len(positions)
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        member[i] = True
        i = before[i]
    return member


def _shard_order(shard: ShardRow) -> tuple[int, str, int]:
    """Group shards are read by number, then URL and id (the order :func:`visible_shards` lists)."""
    return (-1 if shard.shard_number is None else shard.shard_number, shard.url, shard.id)


def plan_joins(
    found: GroupRows,
    entries: Collection[str] | None = None,
    chosen: Mapping[int, Collection[int]] | None = None,
) -> dict[int, tuple[GroupJoin, ...]]:
    """Base shard id -> its groups' joins (in group order), split by the alignment rule.

    With ``entries`` only groups holding one of them are joined (the others
    are not read at all); with ``chosen`` (base shard id -> offsets a filter
    chose) only those base records' group records are.
    """
    wanted = {
        gid
        for gid in found.names
        if entries is None or not found.entries.get(gid, frozenset()).isdisjoint(entries)
    }
    runs: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for bsid, boff, gid, gsid, goff in found.rows:
        if gid not in wanted:
            continue
        if chosen is not None and boff not in chosen.get(bsid, ()):
            continue
        runs.setdefault((bsid, gid), []).append((boff, gsid, goff))
    order = {sid: _shard_order(s) for sid, s in found.shards.items()}
    out: dict[int, list[GroupJoin]] = {}
    for (bsid, gid), rows in sorted(runs.items()):
        member = forward_run([(order[gsid], goff) for _, gsid, goff in rows])
        streamed: list[tuple[int, list[int], list[int]]] = []
        keyed: dict[int, list[tuple[int, int]]] = {}
        for (boff, gsid, goff), inside in zip(rows, member):
            if not inside:
                keyed.setdefault(gsid, []).append((goff, boff))
            elif streamed and streamed[-1][0] == gsid:
                streamed[-1][1].append(goff)
                streamed[-1][2].append(boff)
            else:
                streamed.append((gsid, [goff], [boff]))
        join = GroupJoin(
            found.names[gid],
            tuple(_part(found.shards[s], offs, bases) for s, offs, bases in streamed),
            tuple(
                _part(found.shards[s], [g for g, _ in sorted(pairs)], [b for _, b in sorted(pairs)])
                for s, pairs in sorted(keyed.items(), key=lambda kv: order[kv[0]])
            ),
        )
        out.setdefault(bsid, []).append(join)
    return {bsid: tuple(joins) for bsid, joins in out.items()}


def _part(shard: ShardRow, offsets: list[int], bases: list[int]) -> GroupPart:
    return GroupPart(
        shard.url, (shard.file_id, shard.footer_crc), tuple(offsets), tuple(bases), shard.kind
    )


def join_summary(joins: Iterable[Sequence[GroupJoin]]) -> dict[str, dict[str, int]]:
    """Per group: its records ``"streamed"`` with the base and those read ``"keyed"``."""
    out: dict[str, dict[str, int]] = {}
    for shard_joins in joins:
        for j in shard_joins:
            counts = out.setdefault(j.group, {"streamed": 0, "keyed": 0})
            counts["streamed"] += j.streamed_count
            counts["keyed"] += j.keyed_count
    return out


def log_joins(dataset: str, summary: Mapping[str, Mapping[str, int]]) -> None:
    """Say how each group is joined: streamed (aligned) or partly by keyed reads."""
    for group, counts in summary.items():
        keyed, total = counts["keyed"], counts["keyed"] + counts["streamed"]
        if keyed:
            logger.info(
                "column group %r of dataset %r: %d of its %d records are not in the base's "
                "order and are read by key (batched ranged reads); the rest stream with the "
                "base. A group written from shardcat.read(...) of the dataset streams whole",
                group,
                dataset,
                keyed,
                total,
            )
        else:
            logger.debug(
                "column group %r of dataset %r: aligned, its %d records stream with the base",
                group,
                dataset,
                total,
            )


def join_records(
    records: Iterable[Record],
    joins: Sequence[GroupJoin],
    storage_options: Mapping[str, Any],
    entries: Collection[str] | None = None,
    cache: LocalShardCache | None = None,
) -> Iterator[Record]:
    """``records`` (a base shard's, in file order) each merged with its groups' records.

    Records may skip some of the shard's (a resumed or filtered read): group
    records of base records not read are passed over.
    """
    names = None if entries is None else list(entries)
    readers: list[_Join] = [_Join(j, storage_options, names, cache) for j in joins]
    try:
        if len(readers) == 1 and not readers[0].keyed:
            # One group, all streamed (an aligned group): _Join.take's streamed case inline,
            # no call or list of parts per record.
            stream, head = readers[0].streamed()
            for rec in records:
                base = rec.offset
                while head is not None and head[0] < base:
                    head = next(stream, None)
                if head is not None and head[0] == base:
                    yield MergedRecord(rec.key, (rec, head[1]))
                    head = next(stream, None)
                else:
                    yield rec
            return
        if len(readers) == 1:  # one group: no list of parts per record
            take = readers[0].take
            for rec in records:
                part = take(rec.offset)
                yield rec if part is None else MergedRecord(rec.key, (rec, part))
            return
        for rec in records:
            parts = [rec]
            for r in readers:
                part = r.take(rec.offset)
                if part is not None:
                    parts.append(part)
            yield rec if len(parts) == 1 else MergedRecord(rec.key, tuple(parts))
    finally:
        for r in readers:
            r.close()


class _Join:
    """One group's records for one base shard, handed out in base order."""

    def __init__(
        self,
        join: GroupJoin,
        storage_options: Mapping[str, Any],
        entries: list[str] | None,
        cache: LocalShardCache | None,
    ) -> None:
        self._opts = storage_options
        self._entries = entries
        self._cache = cache
        self._stream = _streamed(join.streamed, self._open, entries)
        self._next: tuple[int, Record] | None = next(self._stream, None)
        # Keyed records by base offset: (base offset, part, group offset), in base order.
        self._keyed = sorted(
            (b, i, g) for i, part in enumerate(join.keyed) for g, b in zip(part.offsets, part.bases)
        )
        self._keyed_bases = [b for b, _, _ in self._keyed]
        self._parts = join.keyed
        self._done = 0  # keyed rows before this one are read (or passed over)
        self._loaded: dict[int, Record] = {}
        self._open_parts: dict[int, ShardReader] = {}

    def _open(self, part: GroupPart) -> ShardReader:
        from .read import open_registered

        # Groups are written by add_entries: native shards, never tars indexed in place.
        url = part.url
        if self._cache is not None and part.expect is not None:
            url = self._cache.fetch(url, part.expect[0], self._opts)
        return open_registered(url, self._opts, part.expect)

    @property
    def keyed(self) -> bool:
        """Whether some of the group's records are read by key (not all streamed)."""
        return bool(self._keyed)

    def streamed(self) -> tuple[Iterator[tuple[int, Record]], tuple[int, Record] | None]:
        """The streamed records' iterator and its next ``(base offset, record)``, for a caller
        that takes them in base order itself instead of calling :meth:`take` (then not called)."""
        return self._stream, self._next

    def take(self, base: int) -> Record | None:
        """The group's record joining the base record at offset ``base``, if it has one."""
        head = self._next
        while head is not None and head[0] < base:
            head = next(self._stream, None)
        if head is not None and head[0] == base:
            self._next = next(self._stream, None)
            return head[1]
        self._next = head
        if not self._keyed:
            return None
        if base in self._loaded:
            return self._loaded.pop(base)
        at = bisect.bisect_left(self._keyed_bases, base, lo=self._done)
        if at == len(self._keyed) or self._keyed_bases[at] != base:
            return None
        self._load(at)
        return self._loaded.pop(base)

    def _load(self, at: int) -> None:
        """Read the keyed records of the next window of base records, from ``at`` on."""
        self._loaded.clear()  # base order: records of earlier base offsets are not asked again
        window = self._keyed[at : at + _KEYED_WINDOW]
        self._done = at + len(window)
        by_part: dict[int, list[tuple[int, int]]] = {}
        for b, i, g in window:
            by_part.setdefault(i, []).append((g, b))
        for i, pairs in by_part.items():
            reader = self._open_parts.get(i)
            if reader is None:
                reader = self._open_parts[i] = self._open(self._parts[i])
            pairs.sort()
            indices = _indices(reader, [g for g, _ in pairs])
            for (_, b), rec in zip(pairs, reader.take(indices, self._entries)):
                self._loaded[b] = rec

    def close(self) -> None:
        self._stream.close()
        for reader in self._open_parts.values():
            reader.close()
        self._open_parts.clear()


def _indices(reader: ShardReader, offsets: Sequence[int]) -> list[int]:
    """Record numbers of the records starting at ``offsets`` (the catalog's rows of this shard)."""
    starts = reader.footer.records["offset"]
    found = np.searchsorted(starts, np.asarray(offsets, dtype=starts.dtype))
    return [int(i) for i in found]


def _streamed(
    parts: Sequence[GroupPart],
    open_part: Any,
    entries: list[str] | None,
) -> Generator[tuple[int, Record], None, None]:
    """``(base offset, group record)`` of the parts in order, in forward ranged reads."""
    for part in parts:
        with open_part(part) as reader:
            if len(part.offsets) == reader.num_records:
                # The whole shard, in file order (offsets only increase in a part): each
                # record is the next base's, paired without a matching step per record.
                yield from zip(part.bases, reader.iter_records(entries))
                continue
            if 2 * len(part.offsets) >= reader.num_records:
                # Most of the shard (an aligned group's usual case): one sequential stream
                # of it (the compiled record stream), the records of other base shards passed.
                yield from _matched(reader.iter_records(entries), part)
                continue
            indices = _indices(reader, part.offsets)
            lengths = reader.footer.records["length"]
            start = 0
            while start < len(indices):
                # Forward reads of about _READ_BYTES (take merges neighbouring records).
                end, size = start, 0
                while end < len(indices) and (end == start or size < _READ_BYTES):
                    size += int(lengths[indices[end]])
                    end += 1
                recs = reader.take(indices[start:end], entries)
                yield from zip(part.bases[start:end], recs)
                start = end


def _matched(records: Iterable[Record], part: GroupPart) -> Iterator[tuple[int, Record]]:
    """The records of ``records`` (a shard's, in file order) at ``part.offsets``, with their bases."""
    offsets, bases = part.offsets, part.bases
    j, n = 0, len(offsets)
    for rec in records:
        if rec.offset == offsets[j]:
            yield bases[j], rec
            j += 1
            if j == n:
                return
