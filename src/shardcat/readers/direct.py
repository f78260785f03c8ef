"""Packed batches read straight from shard bytes: no record object, no copy, per sample.

The plain path (:func:`.packed.pack_records`) decodes every record of a
batch into a :class:`~shardcat.format.Record` and then copies its entries
into a shared block. Here the footer index (which the shard's reader has
already, CRC-checked) says where every record and payload lies, so a run
of whole records is read once, straight into the block
(:func:`~shardcat.format.recordcodec.scatter_read`, one ``preadv``): each
``bytes`` payload lands at its column's place, everything else (record
heads, padding, other entries) in a rest area after the columns. One
compiled call (:func:`~shardcat.format.recordcodec.crc32c_spans`) then
checks every record head and payload; the heads are compared with the
footer in numpy. What crosses to the training process is the same
descriptor as any :class:`.packed.PackedBatch`.

It applies to local shards (a remote one streams better with read-ahead,
:mod:`.stream` decides), native ones whose records all have the same uncompressed
entries, every record but the hidden ones (no ``where=``), without
``decode=``; here in file order, through a shuffle buffer in
:mod:`.gather` (which reuses the plans and checks). A batch that meets a
shard it does not apply to is made from that shard's records instead
(:meth:`ShardReader.take <shardcat.format.ShardReader.take>` and
:func:`.packed.pack_records`). Same batches, same bytes, same errors
(a damaged record raises :class:`~shardcat.errors.ChecksumError`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChecksumError, FormatError, SampleDecodeError, TruncatedError
from ..format import Codec, ShardReader, recordcodec
from ..format.entries import JSON_TYPE, _StoredEntry, decodes_to_bytes
from ..format.heads import expected_heads, verify_heads
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

__all__ = ["DirectShard", "iter_direct", "open_direct"]

_RAW_DECODE = json.JSONDecoder().raw_decode
_I8 = np.int64
_NONE = np.empty(0, dtype=np.int64)  # a shard not read directly has no plan


@dataclass(slots=True)
class DirectShard:
    """One open shard, planned from its footer: which records, where their bytes go.

    ``rows`` are the records to yield (indices, file order). When ``direct``
    is False the shard's records are decoded instead (``why`` says why).
    Every other array has one row per record of ``rows``, so a batch takes
    slices of them (views), never gathers. A record is read as ``2P + 1``
    pieces (``pieces``: their lengths): the gap before its first column
    payload (its head, padding, other entries), then each of its ``P``
    column payloads followed by the gap after it; the last gap runs to the
    next record of ``rows`` (over hidden records), or to the record's end
    (``tail``) when the record ends a run.
    """

    reader: ShardReader
    rows: np.ndarray
    direct: bool = False
    why: str = ""
    names: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()  # content type per name
    packed: tuple[bool, ...] = ()  # per name: its values are its bytes (a column)
    start: np.ndarray = field(default_factory=lambda: _NONE)  # record offsets
    end: np.ndarray = field(default_factory=lambda: _NONE)  # record ends
    pieces: np.ndarray = field(default_factory=lambda: _NONE)  # (records, 2P + 1) lengths
    tail: np.ndarray = field(default_factory=lambda: _NONE)  # last gap up to the record's end
    value_piece: tuple[int, ...] = ()  # per non-column name: the gap piece holding it
    value_delta: np.ndarray = field(default_factory=lambda: _NONE)  # (records, V) offset in it
    sizes: np.ndarray = field(default_factory=lambda: _NONE)  # (records, names) payload sizes
    crcs: np.ndarray = field(default_factory=lambda: _NONE)  # (records, names) payload CRCs
    keys: list[str] = field(default_factory=list)
    # What each record's head and entry descriptors must hold (from the footer's rows), as
    # bytes: (records, head bytes), and which of those bytes are compared (``mask``).
    head_length: np.ndarray = field(default_factory=lambda: _NONE)
    expect: np.ndarray = field(default_factory=lambda: _NONE)
    mask: np.ndarray = field(default_factory=lambda: _NONE)

    @property
    def layout(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return self.names, self.kinds

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
    footer = reader.footer
    recs = footer.records
    n = len(recs)
    rows = np.arange(n, dtype=_I8)
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
    counts = recs["entry_count"]
    width = int(counts[0]) if n else 0
    if not len(rows) or width == 0 or bool((counts != width).any()):
        shard.why = "records have different entries"
        return shard
    spec = footer.entries["spec"].reshape(n, width)
    if bool((spec != spec[0]).any()):
        shard.why = "records have different entries"
        return shard
    wanted = None if entries is None else frozenset(entries)
    chosen = [
        (c, footer.specs[s])
        for c, s in enumerate(spec[0].tolist())
        if wanted is None or footer.specs[s].name in wanted
    ]
    if any(sp.codec is not Codec.NONE for _, sp in chosen):
        shard.why = "compressed entries"
        return shard
    shard.names = tuple(sp.name for _, sp in chosen)
    shard.kinds = tuple(sp.content_type for _, sp in chosen)
    shard.packed = tuple(decodes_to_bytes(k) for k in shard.kinds)
    cols = np.asarray([c for c, _ in chosen], dtype=_I8)
    pcols = cols[list(shard.packed)] if chosen else cols
    mine = recs[rows]
    start = mine["offset"].astype(_I8)
    end = start + mine["length"].astype(_I8)
    rel = footer.entries["offset"].reshape(n, width)[rows].astype(_I8)
    size = footer.entries["size"].reshape(n, width)[rows].astype(_I8)
    crc = footer.entries["crc"].reshape(n, width)[rows]
    nxt = np.concatenate([start[1:], end[-1:]])
    p_start = start[:, None] + rel[:, pcols]
    p_end = p_start + size[:, pcols]
    gap_from = np.concatenate([start[:, None], p_end], axis=1)  # (K, P + 1)
    gap_to = np.concatenate([p_start, nxt[:, None]], axis=1)
    pieces = np.empty((len(rows), 2 * len(pcols) + 1), dtype=_I8)
    pieces[:, 0::2] = gap_to - gap_from
    pieces[:, 1::2] = p_end - p_start
    shard.start, shard.end, shard.pieces = start, end, pieces
    shard.tail = end - gap_from[:, -1]
    # A non-column entry lies in the gap after the column payloads that come before it.
    value_cols = [
        c for c, (_, sp) in zip(cols.tolist(), chosen) if not decodes_to_bytes(sp.content_type)
    ]
    gaps = [int((pcols < c).sum()) for c in value_cols]
    shard.value_piece = tuple(2 * g for g in gaps)
    shard.value_delta = (
        np.stack([start + rel[:, c] - gap_from[:, g] for c, g in zip(value_cols, gaps)], axis=1)
        if value_cols
        else np.empty((len(rows), 0), dtype=_I8)
    )
    shard.sizes = np.ascontiguousarray(size[:, cols])
    shard.crcs = np.ascontiguousarray(crc[:, cols])
    shard.keys = [k for k, keep in zip(footer.keys(), _mask(n, rows)) if keep]
    shard.head_length = rel[:, 0]
    shard.expect, shard.mask = expected_heads(mine, rel, size, crc)
    reader.header  # noqa: B018 - read and checked (bound to the footer), as a stream reads it
    shard.direct = True
    return shard


def _mask(n: int, rows: np.ndarray) -> list[bool]:
    keep = np.zeros(n, dtype=bool)
    keep[rows] = True
    out: list[bool] = keep.tolist()
    return out


def iter_direct(
    tasks: Sequence[ShardTask],
    storage_options: Mapping[str, Any],
    entries: Sequence[str] | None,
    cache: LocalShardCache | None,
    start: int,
    batch_size: int,
) -> Iterator[PackedBatch]:
    """A reader's ``tasks`` from its ``start``-th sample on, in file order, in packed batches."""
    segments: list[tuple[DirectShard, int, int]] = []
    filled = 0
    opened: list[DirectShard] = []
    try:
        skip = start
        for task in tasks:
            if skip >= task.count:
                skip -= task.count
                continue
            shard = open_direct(task, storage_options, entries, cache)
            opened.append(shard)
            pos, skip = skip, 0
            total = len(shard.rows)
            while pos < total:
                take = min(batch_size - filled, total - pos)
                segments.append((shard, pos, pos + take))
                filled += take
                pos += take
                if filled == batch_size:
                    yield _batch(segments, entries)
                    segments, filled = [], 0
                    for done in opened[:-1]:
                        done.close()
                    del opened[:-1]
        if segments:
            yield _batch(segments, entries)
    finally:
        for shard in opened:
            with contextlib.suppress(Exception):
                shard.close()


def _batch(
    segments: list[tuple[DirectShard, int, int]], entries: Sequence[str] | None
) -> PackedBatch:
    first = segments[0][0]
    if not all(s.direct and s.layout == first.layout for s, _, _ in segments):
        records = [
            rec for s, lo, hi in segments for rec in s.reader.take(s.rows[lo:hi].tolist(), entries)
        ]
        return pack_records(records)
    return _direct_batch(segments)


def _direct_batch(segments: list[tuple[DirectShard, int, int]]) -> PackedBatch:
    first = segments[0][0]
    sizes = np.concatenate([s.sizes[lo:hi] for s, lo, hi in segments])
    span = sum(int(s.end[hi - 1] - s.start[lo]) for s, lo, hi in segments)
    out = BlockFill(first, sizes, span)
    done = 0
    value_spans: list[np.ndarray] = []
    for s, lo, hi in segments:
        m = hi - lo
        length = s.pieces[lo:hi].copy()
        length[-1, -1] = s.tail[hi - 1]  # the run ends with this record
        dest = out.place(length, done)
        read_run(s.reader, int(s.start[lo]), int(s.end[hi - 1]), out.whole, dest, length)
        _check(s, slice(lo, hi), out.whole, dest[:, 0])
        where = out.payloads(dest, s.value_delta[lo:hi])
        value_spans.append(where[:, out.vnames])
        out.check_payloads(where, s.sizes[lo:hi], s.crcs[lo:hi], _locator(s, s.start[lo:hi]))
        done += m
    keys = [k for s, lo, hi in segments for k in s.keys[lo:hi]]
    return out.seal(keys, np.concatenate(value_spans))


class BlockFill:
    """A direct batch's block being filled: its columns' places, then its checks and its seal."""

    def __init__(self, first: DirectShard, sizes: np.ndarray, span: int) -> None:
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


def _locator(shard: DirectShard, starts: np.ndarray) -> Callable[[int], tuple[str, int]]:
    """Where record ``r`` of ``starts`` (offsets in ``shard``) lies, for an error."""
    return lambda r: (shard.reader.path, int(starts[r]))


def _check(
    shard: DirectShard, sel: slice | np.ndarray, whole: np.ndarray, heads: np.ndarray
) -> None:
    """The heads of records ``sel`` (of ``rows``), at ``heads`` in the block: sound, and what the footer says."""
    head_length = shard.head_length[sel]
    crcs = np.frombuffer(recordcodec.crc32c_spans(whole, heads + 8, head_length - 8), dtype="<u4")
    verify_heads(
        whole, heads, crcs, shard.expect[sel], shard.mask, _locator(shard, shard.start[sel])
    )
