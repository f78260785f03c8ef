"""Shuffled packed batches gathered straight from shard bytes: the shuffle buffer holds positions.

A reader's order through its shuffle buffer is a function of the seed,
the epoch and its place (:func:`.plan.buffered_order`), computed on
positions before anything is read. The record path reads its shards
sequentially and holds up to ``shuffle_buffer`` decoded samples until
their turn; here nothing is held but the footer plans
(:class:`.direct.DirectShard`) of the shards that still have a sample to
come: each batch takes the records the order names, wherever they lie,
each copied whole straight to its places in the batch's block, then one
call computes every record head's and payload's CRC. The records are
copied from the shards' files mapped read-only (every record of the
batch in one compiled call, :func:`~shardcat.format.recordcodec.gather_copy`:
a memcpy per piece, ~10% less CPU than a system call per record). A
shard is a user's file that another process may cut at any time, and a
mapped page past a file's end faults with SIGBUS, so shards are mapped
only under the guard of :mod:`shardcat.format.mapguard`: a page found cut
reads as zeros instead, and after every copy the batch asks the guard of
each file it read (a page cut, or the file now shorter than a record it
took) before it is checked and handed out: a cut is a
:class:`~shardcat.errors.TruncatedError` naming the file and the record.
Each batch also first asks every mapped file's size (``fstat``); a file
found shorter, or one that cannot be mapped under the guard, is read with
one ``preadv`` per record
(:func:`~shardcat.format.recordcodec.scatter_read_runs`), which reports
where it ends.

The same samples in the same order as the record path (same seed, epoch,
split, resume position), so resuming works across both. A shard opens with
the first batch that needs it and closes after the last; a buffer
spanning more than :data:`MAX_OPEN_SHARDS` shards at once (tiny shards)
is read by the record path instead, one shard at a time.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import TruncatedError
from ..format import recordcodec
from ..format.heads import verify_heads
from ..format.mapguard import GuardedMap, map_guarded
from ..storage import LocalShardCache
from .direct import BlockFill, DirectShard, open_direct, read_run
from .packed import PackedBatch, pack_records
from .plan import ShardTask

__all__ = ["MAX_OPEN_SHARDS", "iter_gathered", "shards_needed_at_once"]

_I8 = np.int64

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


def iter_gathered(
    tasks: Sequence[ShardTask],
    storage_options: Mapping[str, Any],
    entries: Sequence[str] | None,
    cache: LocalShardCache | None,
    order: np.ndarray,
    batch_size: int,
) -> Iterator[PackedBatch]:
    """The samples at ``order`` (positions over ``tasks``' samples, file order), in packed batches."""
    if not len(order):
        return
    bases = np.concatenate([[0], np.cumsum([t.count for t in tasks], dtype=_I8)])
    which = np.searchsorted(bases, order, side="right") - 1
    rows = order - bases[which]
    # The batch after which each shard is not needed again: it is closed then.
    last = np.full(len(tasks), -1, dtype=_I8)
    np.maximum.at(last, which, np.arange(len(order), dtype=_I8) // batch_size)
    window = Window(len(tasks))
    try:
        for b, lo in enumerate(range(0, len(order), batch_size)):
            mine = which[lo : lo + batch_size]
            for t in np.unique(mine).tolist():
                if t not in window.shards:
                    window.open(t, open_direct(tasks[t], storage_options, entries, cache))
            yield window.batch(mine, rows[lo : lo + batch_size], entries)
            for t in [t for t in window.shards if last[t] == b]:
                window.close(t)
    finally:
        window.close_all()


def _map(shard: DirectShard) -> GuardedMap | None:
    """The shard's file mapped read-only under the guard (None where it cannot be: then it is
    read with ``preadv``)."""
    fd = getattr(shard.reader._source, "pread_fd", None)
    if fd is None:
        return None
    mapped = map_guarded(fd, shard.reader.path)
    if mapped is None:
        return None
    if len(shard.end) and len(mapped) < int(shard.end.max()):
        mapped.close()  # shorter than its footer says: preadv reports where it ends
        return None
    return mapped


class Window:
    """The open shards' plans end to end: a batch's records, from any of them, in one index.

    Rebuilt when a shard opens (rarely: once per shard of the reader); a
    batch then takes each of its arrays with one fancy index. Only the
    shards read directly with the same entries as the first such shard
    are in the tables (``base`` -1 for the others).
    """

    def __init__(self, tasks: int) -> None:
        self.shards: dict[int, DirectShard] = {}
        self.maps: dict[int, GuardedMap | None] = {}  # per open shard: its file, mapped
        self.sources: list[Any] = []  # per row of the tables' shards: its mapping (an mmap)
        self.guards: list[GuardedMap | None] = []  # per row of the tables' shards: its guard
        self.mapped = False
        self.base = np.full(tasks, -1, dtype=_I8)  # per task: its first row in the tables
        self._stale = True

    def open(self, task: int, shard: DirectShard) -> None:
        self.shards[task] = shard
        self._stale = True

    def close(self, task: int) -> None:
        # Its rows stay in the tables, out of reach, until the next shard opens: a rebuild
        # per shard, not two. Its mapping goes now (a source of nothing from here on).
        self.shards.pop(task).close()
        self.base[task] = -1
        mapped = self.maps.pop(task, None)
        if mapped is not None:
            if self.mapped:
                self.sources = [b"" if m is mapped.map else m for m in self.sources]
                self.guards = [None if m is mapped else m for m in self.guards]
            mapped.close()

    def close_all(self) -> None:
        self.sources = []
        self.guards = []
        for mapped in self.maps.values():
            if mapped is not None:
                mapped.close()
        for shard in self.shards.values():
            with contextlib.suppress(Exception):
                shard.close()
        self.shards.clear()
        self.maps.clear()

    def _rebuild(self) -> None:
        self._stale = False
        self.base[:] = -1
        direct = [(t, s) for t, s in sorted(self.shards.items()) if s.direct]
        if not direct:
            return
        first = direct[0][1]
        width = first.expect.shape[1]
        fit = [(t, s) for t, s in direct if s.layout == first.layout and s.expect.shape[1] == width]
        counts = np.asarray([len(s.rows) for _, s in fit], dtype=_I8)
        self.base[[t for t, _ in fit]] = np.concatenate([[0], np.cumsum(counts)[:-1]])
        shards = [s for _, s in fit]
        self.first = first
        self.sizes = np.concatenate([s.sizes for s in shards])
        self.crcs = np.concatenate([s.crcs for s in shards])
        self.start = np.concatenate([s.start for s in shards])
        self.end = np.concatenate([s.end for s in shards])
        # Each record is read as a run of its own: its last gap ends where it does.
        self.pieces = np.concatenate([s.pieces for s in shards])
        self.pieces[:, -1] = np.concatenate([s.tail for s in shards])
        self.delta = np.concatenate([s.value_delta for s in shards])
        self.head_length = np.concatenate([s.head_length for s in shards])
        self.expect = np.concatenate([s.expect for s in shards])
        self.keys = [k for s in shards for k in s.keys]
        self.owner = np.repeat(np.arange(len(shards)), counts)
        self.paths = [s.reader.path for s in shards]
        # Raw numbers, read without the GIL: these readers are this generator's own,
        # closed by it alone (Window.close) after the last batch that reads them.
        fds = [getattr(s.reader._source, "pread_fd", None) for s in shards]
        self.readers = [s.reader for s in shards]
        self.fds = np.repeat(np.asarray([-1 if f is None else f for f in fds], dtype=_I8), counts)
        self.preads = all(f is not None for f in fds)
        for t, s in fit:
            if t not in self.maps and s.direct:
                self.maps[t] = _map(s)
        self.guards = [self.maps[t] for t, _ in fit]
        self.sources = [m.map if m is not None else None for m in self.guards]
        self.mapped = all(m is not None for m in self.guards)

    def batch(
        self, which: np.ndarray, rows: np.ndarray, entries: Sequence[str] | None
    ) -> PackedBatch:
        """Sample ``i`` is record ``rows[i]`` of the shard of task ``which[i]``."""
        if self._stale:
            self._rebuild()
        at = self.base[which]
        if (at < 0).any():
            return self._from_records(which, rows, entries)
        g = at + rows
        m = len(g)
        sizes, start, end, pieces = self.sizes[g], self.start[g], self.end[g], self.pieces[g]
        out = BlockFill(self.first, sizes, int((end - start).sum()))
        dest = out.place(pieces, 0)
        self._read(g, start, end, out.whole, dest, pieces)
        heads = dest[:, 0]
        where = out.payloads(dest, self.delta[g])
        # Every head's and payload's CRC in one call.
        crcs = np.frombuffer(
            recordcodec.crc32c_spans(
                out.whole,
                np.concatenate([heads + 8, where.ravel()]),
                np.concatenate([self.head_length[g] - 8, sizes.ravel()]),
            ),
            dtype="<u4",
        )

        def locate(r: int) -> tuple[str, int]:
            return self.paths[int(self.owner[g[r]])], int(start[r])

        verify_heads(out.whole, heads, crcs[:m], self.expect[g], self.first.mask, locate)
        out.check_payloads(where, sizes, self.crcs[g], locate, crcs[m:])
        keys = list(operator.itemgetter(*g.tolist())(self.keys)) if m > 1 else [self.keys[g[0]]]
        return out.seal(keys, where[:, out.vnames])

    def _read(
        self,
        g: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        whole: np.ndarray,
        dest: np.ndarray,
        pieces: np.ndarray,
    ) -> None:
        if self.mapped:
            # From the mappings: a memcpy per piece, no system call per record. A page of
            # a file cut before or during the copy reads as zeros (the guard), so every
            # mapped file is then asked whether this batch read anything it lost.
            counts = np.full(len(g), pieces.shape[1], dtype=_I8)
            owners = self.owner[g]
            recordcodec.gather_copy(self.sources, owners, start, counts, whole, dest, pieces)
            self._check_cut(owners, start, end)
            return
        if not self.preads:  # a source without a descriptor: record by record
            for r, i in enumerate(g.tolist()):
                reader = self.readers[int(self.owner[i])]
                read_run(
                    reader, int(start[r]), int(end[r]), whole, dest[r : r + 1], pieces[r : r + 1]
                )
            return
        counts = np.full(len(g), pieces.shape[1], dtype=_I8)
        cut = recordcodec.scatter_read_runs(self.fds[g], start, counts, whole, dest, pieces)
        if cut >= 0:
            raise TruncatedError(
                f"the file ends inside the record at [{int(start[cut])}, {int(end[cut])})",
                path=self.paths[int(self.owner[g[cut]])],
                offset=int(start[cut]),
            )

    def _check_cut(self, owners: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Raise if a file was cut under the records just copied from its mapping.

        One ``fstat`` per mapped file (as many as a check before the copy took).

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
