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
process is the same descriptor as any :class:`.packed.PackedBatch`.

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

import bisect
import contextlib
import itertools
import json
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ChecksumError, FormatError, SampleDecodeError, TruncatedError
from ..format import Codec, ShardReader, recordcodec
from ..format.entries import JSON_TYPE, _StoredEntry
from ..format.heads import verify_heads
from ..format.mapguard import GuardedMap, map_guarded
from ..format.plans import RecordPlan, plan_records
from ..format.sources import FileSource
from ..orchestration import open_registered
from ..storage import LocalShardCache
from .packed import (
    HEADER,
    OFFSETS,
    PackedBatch,
    PackedColumn,
    _leased,
    pack_records,
    process_ring,
    sealed,
)
from .plan import ShardTask

__all__ = ["MAX_OPEN_SHARDS", "DirectShard", "iter_direct", "open_direct", "shards_needed_at_once"]

_RAW_DECODE = json.JSONDecoder().raw_decode
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


@dataclass(slots=True)
class DirectShard:
    """One open shard: the records to yield (``rows``: indices, file order) and their plan.

    ``plan`` is None when the shard's records are decoded instead (``why`` says why).
    """

    reader: ShardReader
    rows: np.ndarray
    plan: RecordPlan | None = None
    why: str = ""

    def close(self) -> None:
        self.reader.close()


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


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """``arrays`` end to end; one alone is used as it is (a view of its plan, no copy)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


class Table:
    """Rows of the plans of shards of one layout, end to end: a batch's rows in one index.

    ``parts``: each shard and the rows of its plan taken (a slice). A batch
    then takes each array with one slice or one fancy index.
    """

    def __init__(
        self, parts: list[tuple[DirectShard, slice]], maps: list[GuardedMap | None]
    ) -> None:
        plans = [(s.plan, rows) for s, rows in parts if s.plan is not None]
        self.first = plans[0][0]
        self.sizes = _joined([p.sizes[r] for p, r in plans])
        self.crcs = _joined([p.crcs[r] for p, r in plans])
        self.start = _joined([p.start[r] for p, r in plans])
        self.end = _joined([p.end[r] for p, r in plans])
        self.pieces = _joined([p.pieces[r] for p, r in plans])
        self.tail = _joined([p.tail[r] for p, r in plans])
        self.delta = _joined([p.value_delta[r] for p, r in plans])
        self.head_length = _joined([p.head_length[r] for p, r in plans])
        self.expect = _joined([p.expect[r] for p, r in plans])
        self.keys = (
            [k for p, r in plans for k in p.keys[r]]
            if len(plans) > 1
            else plans[0][0].keys[plans[0][1]]
        )
        counts = np.asarray([len(p.start[r]) for p, r in plans], dtype=_I8)
        ends = np.cumsum(counts)
        self.bases = ends - counts
        self.ends: list[int] = ends.tolist()  # where each part's rows end: runs break there
        self.owner = np.repeat(np.arange(len(plans), dtype=_I8), counts)
        self._joins: np.ndarray | None = None
        self.paths = [s.reader.path for s, _ in parts]
        self.readers = [s.reader for s, _ in parts]
        # Raw numbers, read without the GIL: these readers are the iterator's own, closed by
        # it alone (Window.close) after the last batch that reads them.
        fds = [getattr(s.reader._source, "pread_fd", None) for s, _ in parts]
        self.fds = np.asarray([-1 if f is None else f for f in fds], dtype=_I8)
        self.preads = all(f is not None for f in fds)
        self.guards = maps
        self.sources: list[Any] = [m.map if m is not None else None for m in maps]
        self.mapped = all(m is not None for m in maps)
        if self.mapped:  # each record read alone: its last gap ends with it
            self.pieces = self.pieces.copy()
            self.pieces[:, -1] = self.tail

    def forget(self, mapped: GuardedMap) -> None:
        """``mapped`` is closing: no batch reads from it again (its shard is done)."""
        self.sources = [b"" if m is mapped.map else m for m in self.sources]
        self.guards = [None if m is mapped else m for m in self.guards]

    def batch(self, sel: slice | np.ndarray, m: int) -> PackedBatch:
        """The batch of rows ``sel`` (``m`` of them): copied, checked and sealed."""
        sizes, start, end = self.sizes[sel], self.start[sel], self.end[sel]
        owners = self.owner[sel]
        if self.mapped:
            # Each record a run of its own (its last gap ends with it): a memcpy per piece.
            pieces = self.pieces[sel]
            runs = None
            span = int(end.sum() - start.sum())
        else:
            # Consecutive records of one file are one run: one preadv for them all.
            pieces = self.pieces[sel].copy() if isinstance(sel, slice) else self.pieces[sel]
            runs = self._runs(sel, m)
            tail = self.tail[sel]
            span = 0
            for f, la in zip(*runs):
                pieces[la, -1] = tail[la]
                span += int(end[la]) - int(start[f])
        out = BlockFill(self.first, sizes, span)
        dest = out.place(pieces, 0)
        self._read(owners, start, end, runs, out.whole, dest, pieces)
        heads = dest[:, 0]
        where = out.payloads(dest, self.delta[sel])
        # Every head's and payload's CRC in one call.
        crcs = np.frombuffer(
            recordcodec.crc32c_spans(
                out.whole,
                np.concatenate([heads + 8, where.ravel()]),
                np.concatenate([self.head_length[sel] - 8, sizes.ravel()]),
            ),
            dtype="<u4",
        )

        def locate(r: int) -> tuple[str, int]:
            return self.paths[int(owners[r])], int(start[r])

        verify_heads(out.whole, heads, crcs[:m], self.expect[sel], self.first.mask, locate)
        out.check_payloads(where, sizes, self.crcs[sel], locate, crcs[m:])
        if isinstance(sel, slice):
            keys = self.keys[sel]
        elif m > 1:
            keys = list(operator.itemgetter(*sel.tolist())(self.keys))
        else:
            keys = [self.keys[int(sel[0])]]
        return out.seal(keys, where[:, out.vnames])

    def _runs(self, sel: slice | np.ndarray, m: int) -> tuple[list[int], list[int]]:
        """The runs of rows ``sel``: each one's first and last record (of the batch)."""
        if isinstance(sel, slice):
            # A slice breaks only where a shard's rows end.
            a = int(sel.start)
            i = bisect.bisect_right(self.ends, a)
            cuts = []
            while self.ends[i] < a + m:
                cuts.append(self.ends[i] - a)
                i += 1
            return [0, *cuts], [c - 1 for c in cuts] + [m - 1]
        if self._joins is None:
            # A row whose record is followed in its file by the next row's: one run.
            self._joins = np.ones(len(self.start), dtype=bool)
            self._joins[np.asarray(self.ends) - 1] = False
        joined = self._joins[sel[:-1]] & (sel[1:] == sel[:-1] + 1)
        ends: list[int] = np.flatnonzero(~joined).tolist()
        return [0] + [e + 1 for e in ends], [*ends, m - 1]

    def _read(
        self,
        owners: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        runs: tuple[list[int], list[int]] | None,
        whole: np.ndarray,
        dest: np.ndarray,
        pieces: np.ndarray,
    ) -> None:
        """Records ``start``/``end`` of files ``owners`` into ``dest``: from the mappings
        (``runs`` None), or with one ``preadv`` per run (records ``first[k]`` to ``last[k]``)."""
        width = pieces.shape[1]
        if runs is None:
            # From the mappings: a memcpy per piece, no system call per record. A page of
            # a file cut before or during the copy reads as zeros (the guard), so every
            # mapped file is then asked whether this batch read anything it lost.
            counts = np.full(len(start), width, dtype=_I8)
            recordcodec.gather_copy(self.sources, owners, start, counts, whole, dest, pieces)
            self._check_cut(owners, start, end)
            return
        first, last = runs
        at = [int(start[f]) for f in first]
        who = [int(owners[f]) for f in first]
        if not self.preads:  # a source without a descriptor: run by run
            for k, (f, la) in enumerate(zip(first, last)):
                reader = self.readers[who[k]]
                rows = slice(f, la + 1)
                read_run(reader, at[k], int(end[la]), whole, dest[rows], pieces[rows])
            return
        cut = recordcodec.scatter_read_runs(
            self.fds[who],
            np.array(at, dtype=_I8),
            np.array([(la - f + 1) * width for f, la in zip(first, last)], dtype=_I8),
            whole,
            dest,
            pieces,
        )
        if cut >= 0:
            a, b = at[cut], int(end[last[cut]])
            what = f"the record at [{a}, {b})" if first[cut] == last[cut] else f"records [{a}, {b})"
            raise TruncatedError(
                f"the file ends inside {what}", path=self.paths[who[cut]], offset=a
            )

    def _check_cut(self, owners: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Raise if a file was cut under the records just copied from its mapping.

        One ``fstat`` per mapped file.

        Raises
        ------
        TruncatedError
            A record of this batch ends past the first byte its file's guard
            says was lost (a page cut while mapped, or the file now shorter).
        """
        for o, guarded in enumerate(self.guards):
            if guarded is None or guarded.lost(len(guarded)) is None:
                continue
            mine = owners == o
            if not mine.any():
                continue  # cut, but this batch took nothing from it
            lost = guarded.lost(int(end[mine].max()))
            if lost is None:
                continue  # cut past every record this batch took from it
            r = int(np.flatnonzero(mine & (end > lost))[0])
            raise TruncatedError(
                f"the file was cut at byte {lost} while the record at [{int(start[r])}, "
                f"{int(end[r])}) was read from it; read it again once it is whole",
                path=self.paths[o],
                offset=int(start[r]),
            )


class BlockFill:
    """A batch's block being filled: its columns' places, then its checks and its seal."""

    def __init__(self, first: RecordPlan, sizes: np.ndarray, span: int) -> None:
        self.first = first
        self.pnames = [i for i, p in enumerate(first.packed) if p]  # names that are columns
        self.vnames = [i for i, p in enumerate(first.packed) if not p]
        self.sizes = sizes
        n, ncols = len(sizes), len(self.pnames)
        # Where each column value starts within its column, over the batch (batch order).
        self.bounds = bounds = np.zeros((n + 1, ncols), dtype=_I8)
        np.cumsum(sizes[:, self.pnames], axis=0, out=bounds[1:])
        col_bytes = bounds[-1]
        index_bytes = 8 * (n + 1) * ncols
        self.used = index_bytes + int(col_bytes.sum())
        self.ring = process_ring()
        self.block = self.ring.take(index_bytes + span)
        self.whole = whole = _leased(self.block.map, self.block.size - HEADER)
        self.col_base = index_bytes + np.concatenate([[0], np.cumsum(col_bytes)[:-1]]).astype(_I8)
        self.layout: list[tuple[str, int, int, int]] = []
        self.columns: dict[str, PackedColumn] = {}
        for c, i in enumerate(self.pnames):
            at = 8 * (n + 1) * c
            offsets = whole[at : at + 8 * (n + 1)].view(OFFSETS)
            offsets[:] = bounds[:, c]
            pos = int(self.col_base[c])
            name = first.names[i]
            self.columns[name] = PackedColumn(whole[pos : pos + int(col_bytes[c])], offsets)
            self.layout.append((name, at, pos, int(col_bytes[c])))
        self.rest = self.used  # heads, padding and other entries go after the columns

    def place(self, length: np.ndarray, done: int) -> np.ndarray:
        """Where the pieces ``length`` of the next records (the batch's ``done``-th on) go in the block."""
        dest = np.empty_like(length)
        gaps = length[:, 0::2]
        ends = np.cumsum(gaps)
        dest[:, 0::2] = (self.rest + ends - gaps.ravel()).reshape(gaps.shape)
        self.rest += int(ends[-1])
        dest[:, 1::2] = self.col_base + self.bounds[done : done + len(length)]
        return dest

    def payloads(self, dest: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """Where each chosen payload of the records placed at ``dest`` lies: (records, names)."""
        where = np.empty((len(dest), len(self.first.names)), dtype=_I8)
        where[:, self.pnames] = dest[:, 1::2]
        if self.vnames:
            where[:, self.vnames] = dest[:, list(self.first.value_piece)] + delta
        return where

    def check_payloads(
        self,
        where: np.ndarray,
        sizes: np.ndarray,
        stored: np.ndarray,
        locate: Callable[[int], tuple[str, int]],
        crcs: np.ndarray | None = None,
    ) -> None:
        """Every payload's CRC (computed here in one call unless given); ``locate(r)``: record ``r``'s path and offset."""
        names = self.first.names
        if crcs is None:
            crcs = np.frombuffer(
                recordcodec.crc32c_spans(self.whole, where.ravel(), sizes.ravel()), dtype="<u4"
            )
        crcs = crcs.reshape(where.shape)
        bad = np.argwhere(crcs != stored)
        if len(bad):
            r, j = (int(v) for v in bad[0])
            path, offset = locate(r)
            raise ChecksumError(
                f"entry {names[j]!r} payload CRC32C mismatch (stored "
                f"{int(stored[r, j]):#010x}, computed {int(crcs[r, j]):#010x})",
                path=path,
                offset=offset,
            )

    def seal(self, keys: list[str], value_at: np.ndarray) -> PackedBatch:
        first = self.first
        values: dict[str, list[Any]] = {}
        if self.vnames:
            view = self.whole.data.toreadonly()
            for v, i in enumerate(self.vnames):
                spans = np.stack([value_at[:, v], self.sizes[:, i]], axis=1).tolist()
                kind = first.kinds[i]
                decoded = _json_column(view, spans) if kind == JSON_TYPE else None
                if decoded is None:
                    try:
                        decoded = [
                            _StoredEntry(view[a : a + b], kind, Codec.NONE).decode(writable=True)
                            for a, b in spans
                        ]
                    except SampleDecodeError as e:
                        raise _bad_value(e, view, spans, kind, keys, first.names[i]) from e
                values[first.names[i]] = decoded
            del view
        return sealed(
            self.ring,
            self.block,
            self.whole,
            self.used,
            keys,
            first.names,
            self.layout,
            self.columns,
            values,
        )


def _bad_value(
    error: SampleDecodeError,
    view: memoryview,
    spans: list[list[int]],
    kind: str,
    keys: list[str],
    name: str,
) -> SampleDecodeError:
    """``error``, naming the key of the batch's first value of ``name`` that does not decode."""
    for key, (a, b) in zip(keys, spans):
        try:
            _StoredEntry(view[a : a + b], kind, Codec.NONE).decode()
        except SampleDecodeError as e:
            return e.locate(key=key, entry=name)
    return error.locate(entry=name)


def _json_column(view: memoryview, spans: list[list[int]]) -> list[Any] | None:
    """A batch's JSON values, parsed from one ASCII string; None where that is not exactly ``json.loads``'s.

    ``json.loads`` per value spends most of its time finding the value's
    encoding and whitespace; one ASCII text of every value, decoded once,
    and one ``raw_decode`` per value (which must end where the value does)
    give the same values. Anything else (non-ASCII, whitespace around a
    value, invalid JSON) returns None: the caller decodes value by value,
    with ``json.loads``'s result or error.
    """
    try:
        text = b"".join([view[a : a + b] for a, b in spans]).decode("ascii")
    except UnicodeDecodeError:
        return None
    out = []
    at = 0
    try:
        for _, size in spans:
            value, end = _RAW_DECODE(text, at)
            at += size
            if end != at:
                return None
            out.append(value)
    except (ValueError, RecursionError):
        return None
    return out


def read_run(
    reader: ShardReader,
    start: int,
    end: int,
    whole: np.ndarray,
    dest: np.ndarray,
    length: np.ndarray,
) -> None:
    """Bytes ``[start, end)`` of the shard laid out as ``dest``/``length`` say (pieces in file order)."""
    source = reader._source
    if isinstance(source, FileSource) and source.pread_fd is not None:
        # Held: the read runs without the GIL, and another thread may close the reader.
        with source.held() as fd:
            whole_run = recordcodec.scatter_read(fd, start, whole, dest, length)
        if not whole_run:
            raise TruncatedError(
                f"the file ends inside records [{start}, {end})", path=reader.path, offset=start
            )
        return
    data = source.read(start, end)
    if len(data) != end - start:
        raise TruncatedError(
            f"the file ends inside records [{start}, {end})", path=reader.path, offset=start
        )
    recordcodec.scatter_copy(data, whole, dest, length)
