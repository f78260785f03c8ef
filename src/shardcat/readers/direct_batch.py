"""One packed batch straight from shard bytes: rows of the shards' plans copied, checked, sealed.

:mod:`.direct` decides which records a batch takes, in what order and from
which open shards; this module makes the batch. A :class:`Table` holds the
plans (:func:`~shardcat.format.plans.plan_records`) of the open shards of
one layout end to end, so a batch's rows are one slice or one fancy index.
Its records are copied once, straight into a :class:`BlockFill` (the
batch's block in the process ring): each ``bytes`` payload at its column's
place, everything else in a rest area after the columns. Then one compiled
call computes every record head's and payload's CRC, the heads are compared
with the footer (:mod:`shardcat.format.heads`), the other entries are
decoded and the block is sealed into a :class:`~.packed.PackedBatch`.
"""

from __future__ import annotations

import bisect
import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ChecksumError, SampleDecodeError, TruncatedError
from ..format import Codec, ShardReader, recordcodec
from ..format.entries import JSON_TYPE, _StoredEntry
from ..format.heads import verify_heads
from ..format.mapguard import GuardedMap
from ..format.plans import RecordPlan
from ..format.sources import FileSource
from .packed import HEADER, OFFSETS, PackedBatch, PackedColumn, _leased, process_ring, sealed

__all__ = ["BlockFill", "DirectShard", "Table", "read_run"]

_RAW_DECODE = json.JSONDecoder().raw_decode
_I8 = np.int64


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
