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

It applies to native shards whose records all have the same uncompressed
entries, read in file order (no shuffle buffer), every record but the
hidden ones (no ``where=``), without ``decode=``; a batch that meets a
shard it does not apply to is made from that shard's records instead
(:meth:`ShardReader.take <shardcat.format.ShardReader.take>` and
:func:`.packed.pack_records`). Same batches, same bytes, same errors
(a damaged record raises :class:`~shardcat.errors.ChecksumError`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ChecksumError, FormatError, TruncatedError
from ..format import Codec, ShardReader, recordcodec
from ..format.entries import JSON_TYPE, _StoredEntry, decodes_to_bytes
from ..format.spec import ENTRY_DESC_DTYPE, RECORD_HEAD_DTYPE, RECORD_TAG
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

__all__ = ["DirectShard", "iter_direct"]

_RAW_DECODE = json.JSONDecoder().raw_decode
_I8 = np.int64
_NONE = np.empty(0, dtype=np.int64)  # a shard not read directly has no plan


@dataclass(slots=True)
class DirectShard:
    """One open shard, planned from its footer: which records, where their payloads lie.

    ``rows`` are the records to yield (indices, file order). When ``direct``
    is False the shard's records are decoded instead (``why`` says why).
    """

    reader: ShardReader
    rows: np.ndarray
    names: tuple[str, ...] = ()
    direct: bool = False
    why: str = ""
    kinds: tuple[str, ...] = ()  # content type per name
    packed: tuple[bool, ...] = ()  # per name: its values are its bytes (a column)
    columns: np.ndarray = field(
        default_factory=lambda: _NONE
    )  # per name, the entry's place among a record's entries
    starts: np.ndarray = field(
        default_factory=lambda: _NONE
    )  # (records, entries) payload offsets in the file
    sizes: np.ndarray = field(default_factory=lambda: _NONE)  # (records, entries) payload sizes
    crcs: np.ndarray = field(default_factory=lambda: _NONE)  # (records, entries) payload CRC32Cs
    keys: np.ndarray = field(default_factory=lambda: _NONE)  # object array of the keys

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
    if task.hidden:
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
    if not n or width == 0 or bool((counts != width).any()):
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
    rel = footer.entries["offset"].reshape(n, width).astype(_I8)
    shard.names = tuple(sp.name for _, sp in chosen)
    shard.kinds = tuple(sp.content_type for _, sp in chosen)
    shard.packed = tuple(decodes_to_bytes(k) for k in shard.kinds)
    shard.columns = np.asarray([c for c, _ in chosen], dtype=_I8)
    shard.starts = recs["offset"].astype(_I8)[:, None] + rel
    shard.sizes = footer.entries["size"].reshape(n, width).astype(_I8)
    shard.crcs = footer.entries["crc"].reshape(n, width)
    shard.keys = np.asarray(footer.keys(), dtype=object)
    reader.header  # noqa: B018 - read and checked (bound to the footer), as a stream reads it
    shard.direct = True
    return shard


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
    names, packed = first.names, first.packed
    pcols = [i for i, p in enumerate(packed) if p]  # name indices that are columns
    picks = [(s, s.rows[lo:hi]) for s, lo, hi in segments]
    n = sum(len(idx) for _, idx in picks)
    # Sizes of each column's values over the batch, in batch order.
    col_sizes = [np.concatenate([s.sizes[idx, s.columns[i]] for s, idx in picks]) for i in pcols]
    index_bytes = 8 * (n + 1) * len(pcols)
    col_bytes = [int(c.sum()) for c in col_sizes]
    runs = []
    for s, idx in picks:
        recs = s.reader.footer.records
        runs.append(
            (int(recs["offset"][idx[0]]), int(recs["offset"][idx[-1]] + recs["length"][idx[-1]]))
        )
    rest_bytes = sum(b - a for a, b in runs) - sum(col_bytes)
    ring = process_ring()
    block = ring.take(index_bytes + sum(col_bytes) + rest_bytes)
    used = index_bytes + sum(col_bytes)
    whole = _leased(block.map, block.size - HEADER)
    # Column areas and offsets, as pack_records lays them out.
    layout = []
    columns = {}
    col_base = []
    pos = index_bytes
    for c, (i, sizes) in enumerate(zip(pcols, col_sizes)):
        at = 8 * (n + 1) * c
        offsets = whole[at : at + 8 * (n + 1)].view(OFFSETS)
        offsets[0] = 0
        np.cumsum(sizes, out=offsets[1:])
        columns[names[i]] = PackedColumn(whole[pos : pos + col_bytes[c]], offsets)
        layout.append((names[i], at, pos, col_bytes[c]))
        col_base.append(pos)
        pos += col_bytes[c]
    rest = pos
    done = 0  # records of the batch laid out so far
    value_spans: list[list[np.ndarray]] = [[] for _ in names]
    for (s, idx), (run_start, run_end) in zip(picks, runs):
        m = len(idx)
        starts, sizes = s.starts[idx], s.sizes[idx]
        # Payload pieces (columns), in file order: record by record, entry by entry.
        cols = s.columns[pcols]
        p_start = starts[:, cols]
        p_size = sizes[:, cols]
        p_dest = np.empty_like(p_start)
        for c in range(len(pcols)):
            p_dest[:, c] = col_base[c] + columns[names[pcols[c]]].offsets[done : done + m]
        p_start, p_size, p_dest = p_start.ravel(), p_size.ravel(), p_dest.ravel()
        # The gaps around them (heads, padding, other entries, hidden records) go to the rest area.
        g_start = np.concatenate([[run_start], p_start + p_size])
        g_len = np.concatenate([p_start, [run_end]]) - g_start
        g_dest = rest + np.concatenate([[0], np.cumsum(g_len)[:-1]])
        rest += int(g_len.sum())
        k = len(p_start)
        dest = np.empty(2 * k + 1, dtype=_I8)
        length = np.empty(2 * k + 1, dtype=_I8)
        dest[0::2], dest[1::2] = g_dest, p_dest
        length[0::2], length[1::2] = g_len, p_size
        _read_run(s.reader, run_start, run_end, whole, dest, length)

        def where(
            file_pos: np.ndarray, g_start: np.ndarray = g_start, g_dest: np.ndarray = g_dest
        ) -> np.ndarray:
            g = np.searchsorted(g_start, file_pos, side="right") - 1
            out: np.ndarray = g_dest[g] + (file_pos - g_start[g])
            return out

        _check(s, idx, whole, where(s.reader.footer.records["offset"][idx].astype(_I8)))
        # Every chosen payload's CRC, in one call.
        all_dest = np.empty((m, len(names)), dtype=_I8)
        by_col = p_dest.reshape(m, len(pcols))
        for i in range(len(names)):
            if packed[i]:
                all_dest[:, i] = by_col[:, pcols.index(i)]
            else:
                col = int(s.columns[i])
                all_dest[:, i] = where(starts[:, col])
                value_spans[i].append(np.stack([all_dest[:, i], sizes[:, col]], axis=1))
        chosen = s.columns
        crcs = np.frombuffer(
            recordcodec.crc32c_spans(whole, all_dest.ravel(), sizes[:, chosen].ravel()),
            dtype="<u4",
        ).reshape(m, len(names))
        bad = np.argwhere(crcs != s.crcs[idx][:, chosen])
        if len(bad):
            r, j = (int(v) for v in bad[0])
            raise ChecksumError(
                f"entry {names[j]!r} payload CRC32C mismatch (stored "
                f"{int(s.crcs[idx[r], chosen[j]]):#010x}, computed {int(crcs[r, j]):#010x})",
                path=s.reader.path,
                offset=int(starts[r, chosen[j]]),
            )
        done += m
    keys: list[str] = np.concatenate([s.keys[idx] for s, idx in picks]).tolist()
    values: dict[str, list[Any]] = {}
    view = whole.data.toreadonly()
    for i, name in enumerate(names):
        if packed[i]:
            continue
        spans = np.concatenate(value_spans[i]).tolist()
        kind = first.kinds[i]
        col = _json_column(view, spans) if kind == JSON_TYPE else None
        if col is None:
            col = [
                _StoredEntry(view[a : a + b], kind, Codec.NONE).decode(writable=True)
                for a, b in spans
            ]
        values[name] = col
    del view
    return sealed(ring, block, whole, used, keys, names, layout, columns, values)


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


def _read_run(
    reader: ShardReader,
    start: int,
    end: int,
    whole: np.ndarray,
    dest: np.ndarray,
    length: np.ndarray,
) -> None:
    """Bytes ``[start, end)`` of the shard laid out as ``dest``/``length`` say (pieces in file order)."""
    source = reader._source
    fd = getattr(source, "pread_fd", None)
    if fd is not None:
        if not recordcodec.scatter_read(fd, start, whole, dest, length):
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


def _heads_dtype(width: int) -> np.dtype[Any]:
    """A record head and its ``width`` entry descriptors, as one structured row."""
    return np.dtype([("head", RECORD_HEAD_DTYPE), ("desc", ENTRY_DESC_DTYPE, (width,))])


def _check(shard: DirectShard, idx: np.ndarray, whole: np.ndarray, heads: np.ndarray) -> None:
    """The record heads at ``heads`` (in the block): sound, and what the footer says."""
    footer = shard.reader.footer
    recs = footer.records[idx]
    offsets = recs["offset"].astype(_I8)
    head_length = shard.starts[idx, 0] - offsets
    crcs = np.frombuffer(recordcodec.crc32c_spans(whole, heads + 8, head_length - 8), dtype="<u4")
    width = shard.starts.shape[1]
    dtype = _heads_dtype(width)
    rows = np.ascontiguousarray(whole[heads[:, None] + np.arange(dtype.itemsize)])
    table = rows.view(dtype).ravel()
    head, desc = table["head"], table["desc"]
    bad = np.flatnonzero(crcs != head["head_crc"])
    if len(bad):
        r = int(bad[0])
        raise ChecksumError(
            f"record head CRC32C mismatch (stored {int(head['head_crc'][r]):#010x}, computed "
            f"{int(crcs[r]):#010x})",
            path=shard.reader.path,
            offset=int(offsets[r]),
        )
    same = (
        (head["tag"] == RECORD_TAG)
        & (head["record_length"] == recs["length"])
        & (head["key_hash"] == recs["key_hash"])
        & (head["head_length"] == head_length)
        & (head["key_length"] == recs["key_length"])
        & (head["entry_count"] == width)
        & (desc["payload_offset"] == shard.starts[idx] - offsets[:, None]).all(axis=1)
        & (desc["stored_size"] == shard.sizes[idx]).all(axis=1)
        & (desc["payload_crc"] == shard.crcs[idx]).all(axis=1)
    )
    if not same.all():
        r = int(np.flatnonzero(~same)[0])
        raise FormatError(
            "record head does not match the footer index",
            path=shard.reader.path,
            offset=int(recs["offset"][r]),
        )
