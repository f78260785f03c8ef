"""Packed batches read straight from shard bytes: no record object, no sample dict, per sample.

The record path (:func:`.packed.pack_records`) decodes every record of a
batch into a :class:`~shardcat.format.Record` and then copies its entries
into a shared block. Here the footer index (which the shard's reader has
already, CRC-checked) says where every record and payload lies (the plan:
:func:`~shardcat.format.plans.plan_records`), so each record is copied
once, straight into the batch's block: each ``bytes`` payload at its
column's place, everything else (record heads, padding, other entries) in a
rest area after the columns. One compiled call
(:func:`~shardcat.format.recordcodec.crc32c_spans`) then computes every
record head's and payload's CRC, and the heads are compared with the footer
in numpy (:mod:`shardcat.format.heads`). What crosses to the training
process is the same descriptor as any :class:`.packed.PackedBatch`. This
module decides which records each batch takes, from which open shards;
:mod:`.direct_batch` makes the batch (copy, checks, seal).

A reader's samples come in an order of positions over its shards' records
(:func:`iter_direct`): file order, or the shuffle buffer's order
(:func:`.plan.buffered_order`, a function of the seed, the epoch and the
reader, computed before anything is read). So the buffer holds positions,
not samples: what is held between batches is the plan of each shard that
still has a sample to come (one open file each). A shard opens with the
first batch that takes one of its records and closes after the last.
Consecutive records of one shard are one run of bytes.

How the bytes are copied depends on the order, behind the same plans and
checks. In file order a batch is a few long runs, each read with one
``preadv`` (:func:`~shardcat.format.recordcodec.scatter_read_runs`): the
kernel copies from its cache with no page faults and no mapping to keep
(in one process, file order took 2% less CPU per sample this way than
copied from the mappings in batches of 64, 7% less in batches of 256).
A shuffled batch is as many runs as records, and a system call
per record costs more than copying it from the file mapped read-only
(:func:`~shardcat.format.recordcodec.gather_copy`, a memcpy per piece:
~10% less CPU per batch). A shard is a user's file another process may cut
at any time, and a mapped page past a file's end faults with SIGBUS, so
shards are mapped only under the guard of :mod:`shardcat.format.mapguard`:
a page found cut reads as zeros, and after every copy the batch asks the
guard of each file it read whether it lost anything, raising a
:class:`~shardcat.errors.TruncatedError` naming the file and the record. A
file found shorter than its footer says, or one that cannot be mapped under
the guard, is read with ``preadv``, which reports where it ends.

It applies to local shards (a remote one streams better with read-ahead,
:mod:`.stream` decides), native ones whose records all have the same
uncompressed entries, every record but the hidden ones (no ``where=``),
without ``decode=``. A batch that takes a record of a shard it does not
apply to (or of shards of different layouts) is made from those records
instead (:meth:`ShardReader.take <shardcat.format.ShardReader.take>` and
:func:`.packed.pack_records`). Same batches, same bytes, same errors (a
damaged record raises :class:`~shardcat.errors.ChecksumError`, a cut file
:class:`~shardcat.errors.TruncatedError`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import FormatError
from ..format import ShardReader
from ..format.mapguard import GuardedMap, map_guarded
from ..format.plans import plan_records
from ..orchestration import open_registered
from ..storage import LocalShardCache
from .direct_batch import DirectShard, Table
from .packed import PackedBatch, pack_records
from .plan import ShardTask

__all__ = ["MAX_OPEN_SHARDS", "DirectShard", "iter_direct", "open_direct", "shards_needed_at_once"]

_I8 = np.int64
_CHUNK = 1 << 16  # positions placed per step: memory per reader stays bounded, whatever its size

MAX_OPEN_SHARDS = 64
"""Shards a shuffled reader may hold open at once (see :func:`shards_needed_at_once`)."""


def shards_needed_at_once(counts: Sequence[int], order: np.ndarray, batch_size: int) -> int:
    """The most shards a reader of ``order`` over shards of ``counts`` samples holds open at once.

    A shard opens with the first batch that takes one of its records and
    closes after the last: a shuffle buffer spanning many small shards
    keeps as many open (one file and one footer plan each).
    """
    if not len(order):
        return 0
    bases = np.concatenate([[0], np.cumsum(np.asarray(counts, dtype=_I8))])
    shard = np.searchsorted(bases, order, side="right") - 1
    batch = np.arange(len(order), dtype=_I8) // batch_size
    first = np.full(len(counts), len(order), dtype=_I8)
    last = np.full(len(counts), -1, dtype=_I8)
    np.minimum.at(first, shard, batch)
    np.maximum.at(last, shard, batch)
    used = last >= 0
    opened = np.zeros(int(batch[-1]) + 2, dtype=_I8)
    np.add.at(opened, first[used], 1)
    np.add.at(opened, last[used] + 1, -1)
    return int(np.cumsum(opened).max())


def open_direct(
    task: ShardTask,
    storage_options: Mapping[str, Any],
    entries: Sequence[str] | None,
    cache: LocalShardCache | None,
) -> DirectShard:
    """Open ``task``'s shard and plan it (see :class:`DirectShard`).

    Raises
    ------
    ChecksumError
        The shard was replaced since it was registered.
    ShardNotFoundError, FormatError
        As :class:`~shardcat.format.ShardReader` does.
    """
    url = task.url
    if cache is not None and task.expect is not None:
        url = cache.fetch(url, task.expect[0], storage_options)
    reader = open_registered(url, storage_options, task.expect)
    try:
        return _plan(reader, task, entries)
    except BaseException:
        reader.close()
        raise


def _plan(reader: ShardReader, task: ShardTask, entries: Sequence[str] | None) -> DirectShard:
    recs = reader.footer.records
    rows = np.arange(len(recs), dtype=_I8)
    if task.offsets is not None:  # the records a where= filter chose (decoded: see below)
        picked = np.fromiter(task.offsets, dtype=np.uint64, count=len(task.offsets))
        rows = rows[np.isin(recs["offset"], picked)]
    elif task.hidden:
        hidden = np.fromiter(task.hidden, dtype=np.uint64, count=len(task.hidden))
        rows = rows[~np.isin(recs["offset"], hidden)]
    if len(rows) != task.count:
        raise FormatError(
            f"the shard holds {len(rows)} readable records, the epoch was planned with "
            f"{task.count}",
            path=reader.path,
        )
    shard = DirectShard(reader, rows)
    if task.offsets is not None:
        shard.why = "where= chose some records"
        return shard
    plan = plan_records(reader.footer, rows, entries)
    if isinstance(plan, str):
        shard.why = plan
        return shard
    reader.header  # noqa: B018 - read and checked (bound to the footer), as a stream reads it
    shard.plan = plan
    return shard


def iter_direct(
    tasks: Sequence[ShardTask],
    storage_options: Mapping[str, Any],
    entries: Sequence[str] | None,
    cache: LocalShardCache | None,
    batch_size: int,
    *,
    start: int = 0,
    order: np.ndarray | None = None,
) -> Iterator[PackedBatch]:
    """A reader's samples in packed batches: at ``order``, or in file order from the ``start``-th.

    ``order`` holds positions over ``tasks``' samples (file order), as the
    shuffle buffer emits them: its batches copy their records from the
    shards' mappings. Without it the batches are the samples from position
    ``start`` on in file order, read in runs with ``preadv``.
    """
    counts = np.fromiter((t.count for t in tasks), dtype=_I8, count=len(tasks))
    bases = np.concatenate([[0], np.cumsum(counts)])
    n = len(order) if order is not None else max(0, int(bases[-1]) - start)

    def positions(lo: int, hi: int) -> np.ndarray:
        if order is not None:
            return order[lo:hi]
        return np.arange(start + lo, start + hi, dtype=_I8)

    opens, closes = _schedule(bases, n, positions, batch_size)
    window = Window(len(tasks), mapped=order is not None)
    step = max(1, _CHUNK // batch_size) * batch_size
    try:
        for chunk in range(0, n, step):
            pos = positions(chunk, min(chunk + step, n))
            which = np.searchsorted(bases, pos, side="right") - 1
            rows = pos - bases[which]
            # Batches of consecutive positions take slices (views) of the plans, not gathers.
            broken = np.concatenate([[0], np.cumsum(np.diff(pos) != 1)])
            los = np.arange(0, len(pos), batch_size)
            his = np.minimum(los + batch_size, len(pos))
            flags = (broken[his - 1] == broken[los]).tolist()
            for lo, hi, sliced in zip(los.tolist(), his.tolist(), flags):
                b = (chunk + lo) // batch_size
                for t in opens.get(b, ()):
                    window.open(t, open_direct(tasks[t], storage_options, entries, cache))
                yield window.batch(which[lo:hi], rows[lo:hi], entries, sliced)
                for t in closes.get(b, ()):
                    window.close(t)
    finally:
        window.close_all()


def _schedule(
    bases: np.ndarray, n: int, positions: Callable[[int, int], np.ndarray], batch_size: int
) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Per batch, the shards it opens (its first) and closes (their last batch), by task."""
    tasks = len(bases) - 1
    first = np.full(tasks, n, dtype=_I8)
    last = np.full(tasks, -1, dtype=_I8)
    for lo in range(0, n, _CHUNK):
        pos = positions(lo, min(lo + _CHUNK, n))
        which = np.searchsorted(bases, pos, side="right") - 1
        batch = (lo + np.arange(len(pos), dtype=_I8)) // batch_size
        np.minimum.at(first, which, batch)
        np.maximum.at(last, which, batch)
    opens: dict[int, list[int]] = {}
    closes: dict[int, list[int]] = {}
    for t in np.flatnonzero(last >= 0).tolist():
        opens.setdefault(int(first[t]), []).append(t)
        closes.setdefault(int(last[t]), []).append(t)
    return opens, closes


class Window:
    """The open shards, and their plans as tables a batch takes its rows from.

    A batch of consecutive positions (file order) takes a slice of its
    shard's own table (views of its plan, no copy), or of a table of the
    few rows it takes from each shard it spans. Any other batch (shuffled)
    takes its rows with one fancy index from the table of the open shards
    of its layout, end to end. ``mapped``: copy records from the shards'
    guarded mappings (a shuffled order) rather than read runs with ``preadv``.
    """

    def __init__(self, tasks: int, *, mapped: bool) -> None:
        self.mapped = mapped
        self.shards: dict[int, DirectShard] = {}
        self.maps: dict[int, GuardedMap | None] = {}  # per open shard: its file, mapped
        self.own: dict[int, Table] = {}  # per open shard with a plan: its table (views)
        self.group = np.full(tasks, -1, dtype=_I8)  # per task open with a plan: its layout's
        self.base = np.full(tasks, -1, dtype=_I8)  # per task: its first row in its group's table
        self.groups: dict[tuple[Any, ...], int] = {}
        self.tables: list[Table | None] = []  # per group; None: rebuilt at its next batch

    def open(self, task: int, shard: DirectShard) -> None:
        self.shards[task] = shard
        if shard.plan is None:
            return
        gid = self.groups.setdefault(shard.plan.layout, len(self.groups))
        if gid == len(self.tables):
            self.tables.append(None)
        self.group[task] = gid
        self.tables[gid] = None
        if self.mapped:
            self.maps[task] = _map(shard)

    def close(self, task: int) -> None:
        # Its rows stay in its group's table, out of reach, until a shard of the group opens:
        # a rebuild per shard, not two. Its mapping goes now (a source of nothing from here on).
        gid = int(self.group[task])
        self.group[task] = self.base[task] = -1
        self.own.pop(task, None)
        mapped = self.maps.pop(task, None)  # only shards with a plan are mapped
        if mapped is not None:
            table = self.tables[gid]
            if table is not None:
                table.forget(mapped)
            mapped.close()
        self.shards.pop(task).close()

    def close_all(self) -> None:
        self.tables = []
        self.own.clear()
        for mapped in self.maps.values():
            if mapped is not None:
                mapped.close()
        for shard in self.shards.values():
            with contextlib.suppress(Exception):
                shard.close()
        self.shards.clear()
        self.maps.clear()

    def batch(
        self, which: np.ndarray, rows: np.ndarray, entries: Sequence[str] | None, sliced: bool
    ) -> PackedBatch:
        """Sample ``i`` is record ``rows[i]`` of the shard of task ``which[i]``.

        ``sliced``: the samples are consecutive positions (file order): each
        shard's rows among them are consecutive.
        """
        m = len(which)
        if sliced:
            t = int(which[0])
            if t == int(which[-1]):  # the usual batch: a slice of one shard's plan
                table = self._own(t)
                if table is None:
                    return self._from_records(which, rows, entries)
                r = int(rows[0])
                return table.batch(slice(r, r + m), m)
            # Over the end of a shard: a table of the rows it takes from each.
            cuts = [0, *(np.flatnonzero(np.diff(which)) + 1).tolist(), m]
            parts = [
                (self.shards[int(which[a])], slice(int(rows[a]), int(rows[b - 1]) + 1))
                for a, b in itertools.pairwise(cuts)
            ]
            layouts = {None if s.plan is None else s.plan.layout for s, _ in parts}
            if None in layouts or len(layouts) > 1:
                return self._from_records(which, rows, entries)
            maps = [self.maps.get(int(which[a])) for a in cuts[:-1]]
            return Table(parts, maps).batch(slice(0, m), m)
        gid = self.group[which]
        g = int(gid[0])
        if g < 0 or bool((gid != g).any()):
            return self._from_records(which, rows, entries)
        table = self.tables[g]
        if table is None:
            members = [(t, s) for t, s in sorted(self.shards.items()) if self.group[t] == g]
            parts = [(s, slice(None)) for _, s in members]
            table = self.tables[g] = Table(parts, [self.maps.get(t) for t, _ in members])
            self.base[[t for t, _ in members]] = table.bases
        return table.batch(self.base[which] + rows, m)

    def _own(self, task: int) -> Table | None:
        """The table of the shard of ``task`` alone (None: it has no plan)."""
        table = self.own.get(task)
        if table is None:
            shard = self.shards[task]
            if shard.plan is None:
                return None
            table = self.own[task] = Table([(shard, slice(None))], [self.maps.get(task)])
        return table

    def _from_records(
        self, which: np.ndarray, rows: np.ndarray, entries: Sequence[str] | None
    ) -> PackedBatch:
        """The batch decoded from records: it takes some from a shard not read directly."""
        records: list[Any] = [None] * len(which)
        for t in np.unique(which).tolist():
            shard = self.shards[t]
            at = np.flatnonzero(which == t)
            mine = rows[at]
            by_file = np.argsort(mine, kind="stable")
            taken = shard.reader.take(shard.rows[mine[by_file]].tolist(), entries)
            for i, rec in zip(at[by_file].tolist(), taken):
                records[i] = rec
        return pack_records(records)


def _map(shard: DirectShard) -> GuardedMap | None:
    """The shard's file mapped read-only under the guard (None where it cannot be: then it is
    read with ``preadv``)."""
    fd = getattr(shard.reader._source, "pread_fd", None)
    if fd is None or shard.plan is None:
        return None
    mapped = map_guarded(fd, shard.reader.path)
    if mapped is None:
        return None
    if len(shard.plan.end) and len(mapped) < int(shard.plan.end.max()):
        mapped.close()  # shorter than its footer says: preadv reports where it ends
        return None
    return mapped
