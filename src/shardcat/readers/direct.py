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
    shard.expect, shard.mask = _expected_heads(mine, rel, size, crc)
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
    names, packed = first.names, first.packed
    pnames = [i for i, p in enumerate(packed) if p]  # names that are columns
    vnames = [i for i, p in enumerate(packed) if not p]
    n = sum(hi - lo for _, lo, hi in segments)
    ncols = len(pnames)
    # Where each column value starts within its column, over the batch (batch order).
    sizes = np.concatenate([s.sizes[lo:hi] for s, lo, hi in segments])
    bounds = np.zeros((n + 1, ncols), dtype=_I8)
    np.cumsum(sizes[:, pnames], axis=0, out=bounds[1:])
    col_bytes = bounds[-1]
    index_bytes = 8 * (n + 1) * ncols
    used = index_bytes + int(col_bytes.sum())
    span = sum(int(s.end[hi - 1] - s.start[lo]) for s, lo, hi in segments)
    ring = process_ring()
    block = ring.take(index_bytes + span)
    whole = _leased(block.map, block.size - HEADER)
    col_base = index_bytes + np.concatenate([[0], np.cumsum(col_bytes)[:-1]]).astype(_I8)
    layout = []
    columns = {}
    for c, i in enumerate(pnames):
        at = 8 * (n + 1) * c
        offsets = whole[at : at + 8 * (n + 1)].view(OFFSETS)
        offsets[:] = bounds[:, c]
        pos = int(col_base[c])
        columns[names[i]] = PackedColumn(whole[pos : pos + int(col_bytes[c])], offsets)
        layout.append((names[i], at, pos, int(col_bytes[c])))
    rest = used  # heads, padding and other entries go after the columns
    done = 0
    value_spans: list[np.ndarray] = []
    for s, lo, hi in segments:
        m = hi - lo
        length = s.pieces[lo:hi].copy()
        length[-1, -1] = s.tail[hi - 1]  # the run ends with this record
        dest = np.empty_like(length)
        gaps = length[:, 0::2]
        ends = np.cumsum(gaps)
        dest[:, 0::2] = (rest + ends - gaps.ravel()).reshape(gaps.shape)
        rest += int(ends[-1])
        dest[:, 1::2] = col_base + bounds[done : done + m]
        _read_run(s.reader, int(s.start[lo]), int(s.end[hi - 1]), whole, dest, length)
        _check(s, lo, hi, whole, dest[:, 0])
        # Every chosen payload's CRC, in one call.
        where = np.empty((m, len(names)), dtype=_I8)
        where[:, pnames] = dest[:, 1::2]
        if vnames:
            where[:, vnames] = dest[:, list(s.value_piece)] + s.value_delta[lo:hi]
            value_spans.append(where[:, vnames])
        crcs = np.frombuffer(
            recordcodec.crc32c_spans(whole, where.ravel(), s.sizes[lo:hi].ravel()), dtype="<u4"
        ).reshape(m, len(names))
        bad = np.argwhere(crcs != s.crcs[lo:hi])
        if len(bad):
            r, j = (int(v) for v in bad[0])
            raise ChecksumError(
                f"entry {names[j]!r} payload CRC32C mismatch (stored "
                f"{int(s.crcs[lo + r, j]):#010x}, computed {int(crcs[r, j]):#010x})",
                path=s.reader.path,
                offset=int(s.start[lo + r]),
            )
        done += m
    keys = [k for s, lo, hi in segments for k in s.keys[lo:hi]]
    values: dict[str, list[Any]] = {}
    if vnames:
        view = whole.data.toreadonly()
        value_at = np.concatenate(value_spans)
        for v, i in enumerate(vnames):
            spans = np.stack([value_at[:, v], sizes[:, i]], axis=1).tolist()
            kind = first.kinds[i]
            decoded = _json_column(view, spans) if kind == JSON_TYPE else None
            if decoded is None:
                decoded = [
                    _StoredEntry(view[a : a + b], kind, Codec.NONE).decode(writable=True)
                    for a, b in spans
                ]
            values[names[i]] = decoded
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


_CHECKED = ("tag", "record_length", "key_hash", "head_length", "key_length", "entry_count")
_CHECKED_DESC = ("payload_offset", "stored_size", "payload_crc")


def _expected_heads(
    recs: np.ndarray, rel: np.ndarray, size: np.ndarray, crc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The head bytes the footer implies for each record, and the mask of the bytes it implies.

    The head CRC, names, content types, codecs (the footer's specs, the
    same for every record) and reserved bytes are left out (mask 0).
    """
    dtype = _heads_dtype(rel.shape[1])
    expect = np.zeros(len(recs), dtype=dtype)
    head, desc = expect["head"], expect["desc"]
    head["tag"] = RECORD_TAG
    head["record_length"] = recs["length"]
    head["key_hash"] = recs["key_hash"]
    head["head_length"] = rel[:, 0]
    head["key_length"] = recs["key_length"]
    head["entry_count"] = rel.shape[1]
    desc["payload_offset"] = rel
    desc["stored_size"] = size
    desc["payload_crc"] = crc
    mask = np.zeros(1, dtype=dtype)
    for name in _CHECKED:
        mask["head"][name] = b"\xff" * 4 if name == "tag" else np.iinfo(RECORD_HEAD_DTYPE[name]).max
    for name in _CHECKED_DESC:
        mask["desc"][name] = np.iinfo(ENTRY_DESC_DTYPE[name]).max
    as_bytes = expect.view(np.uint8).reshape(len(recs), dtype.itemsize)
    return as_bytes, mask.view(np.uint8).ravel()


def _check(shard: DirectShard, lo: int, hi: int, whole: np.ndarray, heads: np.ndarray) -> None:
    """The heads of records ``lo:hi``, at ``heads`` in the block: sound, and what the footer says."""
    head_length = shard.head_length[lo:hi]
    crcs = np.frombuffer(recordcodec.crc32c_spans(whole, heads + 8, head_length - 8), dtype="<u4")
    rows = whole[heads[:, None] + np.arange(shard.mask.size)]
    stored = np.ascontiguousarray(rows[:, 4:8]).view("<u4").ravel()
    bad = np.flatnonzero(crcs != stored)
    if len(bad):
        r = int(bad[0])
        raise ChecksumError(
            f"record head CRC32C mismatch (stored {int(stored[r]):#010x}, computed "
            f"{int(crcs[r]):#010x})",
            path=shard.reader.path,
            offset=int(shard.start[lo + r]),
        )
    differ = ((rows & shard.mask) != shard.expect[lo:hi]).any(axis=1)
    if differ.any():
        r = int(np.flatnonzero(differ)[0])
        raise FormatError(
            "record head does not match the footer index",
            path=shard.reader.path,
            offset=int(shard.start[lo + r]),
        )
