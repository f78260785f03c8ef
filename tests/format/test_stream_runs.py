"""Streaming a shard record by record: the compiled run iterator and entry accessors.

With the compiled codec, ``ShardReader`` iteration decodes each read buffer
through ``_ccodec.iter_records``: one record at a time as the consumer asks,
never a whole buffer's records at once. These tests pin what that must keep:
the same records as the list decoder, where it stops, that a batch left half
read is not read twice, that the records of a stream do not pile up (so the
cyclic GC does not run while streaming), and that entries and their views
stay valid after the record, the reader and the read buffer are dropped.
Both codecs run every test that goes through the public API (the autouse
``record_codec`` fixture).
"""

from __future__ import annotations

import gc
import io
import threading
from collections.abc import Iterator
from itertools import islice
from typing import Any

import crc32c as crc32c_package
import pytest

from shardcat.errors import FormatError
from shardcat.format import Entry, ShardReader, recordcodec, records
from shardcat.format.entries import _StoredEntry
from shardcat.format.records import PreparedEntry
from shardcat.format.spec import Codec
from shardcat.format.stream import stream_record_batches

from .conftest import write_shard

ALIGN = 64


def _blob(key: bytes, payload: bytes) -> bytes:
    entry = PreparedEntry(
        b"x", b"application/octet-stream", Codec.NONE, payload, crc32c_package.crc32c(payload)
    )
    return b"".join(bytes(p) for p in records.encode_record(key, 0, [entry], ALIGN).parts)


def _ccodec() -> Any:
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    from shardcat.format import _ccodec

    return _ccodec


def _args(view: memoryview) -> tuple[Any, ...]:
    return (view, 0, len(view), 64, -1, ALIGN, 0, None, {}, False, "s")


def test_iter_records_gives_decode_records_records() -> None:
    ccodec = _ccodec()
    blobs = [_blob(k, k * 70) for k in (b"a", b"b", b"c")]
    view = memoryview(b"".join(blobs))
    listed, used = ccodec.decode_records(*_args(view))
    run = ccodec.iter_records(*_args(view))
    assert (run.used, run.count) == (0, 0)
    got = list(run)
    assert got == listed and (run.used, run.count) == (used, 3) == (len(view), 3)
    assert [(r.key, r.offset, r.index) for r in got] == [(r.key, r.offset, r.index) for r in listed]
    assert list(run) == []  # exhausted for good


def test_iter_records_counts_what_was_taken_and_stops_before_a_damaged_record() -> None:
    ccodec = _ccodec()
    blobs = [_blob(k, k * 70) for k in (b"a", b"b", b"c")]
    data = bytearray(b"".join(blobs))
    data[data.find(b"b" * 70) + 5] ^= 0x01  # b's payload: its CRC fails
    view = memoryview(bytes(data))
    run = ccodec.iter_records(*_args(view))
    assert next(run).key == "a" and (run.used, run.count) == (len(blobs[0]), 1)
    assert list(run) == []  # b is left to the caller's one-record path, which raises
    assert (run.used, run.count) == (len(blobs[0]), 1)


def test_iter_records_leaves_what_it_does_not_handle_to_the_caller() -> None:
    ccodec = _ccodec()
    view = memoryview(bytearray(_blob(b"a", b"A" * 70)))  # writable: not the fast path
    run = ccodec.iter_records(*_args(view))
    assert list(run) == [] and (run.used, run.count) == (0, 0)


def _shard(n: int, **kwargs: Any) -> bytes:
    return write_shard(
        [{"__key__": f"k/{i:05d}", "x": bytes([i % 251]) * 40} for i in range(n)], **kwargs
    )


def test_a_batch_left_half_read_is_not_read_again() -> None:
    data = _shard(50)
    with ShardReader(data) as r:
        end = r.trailer.footer_offset
        batches = stream_record_batches(r._source, r.path, end, None, r.trailer.header_crc, 50)
        first = list(islice(iter(next(batches)), 3))
        # No error: the records the consumer left are still counted as streamed.
        rest = [rec for batch in batches for rec in batch]
    keys = [rec.key for rec in first + rest]
    assert keys[0] == "k/00000" and keys == sorted(set(keys))  # none twice, in file order
    # Both codecs decode runs (the Python one through its twin, runs.iter_records): the
    # 50 small records are one run, and the 47 the consumer left in it are skipped alike.
    assert len(keys) == 3


@pytest.fixture
def gc_threshold() -> Iterator[None]:
    old = gc.get_threshold()
    gc.collect()
    gc.set_threshold(200, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def test_streaming_holds_one_record_at_a_time(gc_threshold: None) -> None:
    # 2,000 records in one read buffer: a reader that made them all before
    # handing out the first would pass the young generation's threshold (200)
    # ten times over; one at a time, records are freed as the loop moves on.
    data = _shard(2000)
    collections = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    with ShardReader(data) as r:
        it = iter(r)
        first = next(it)
        gc.callbacks.append(count)
        try:
            n = sum(len(rec["x"]) for rec in it)
        finally:
            gc.callbacks.remove(count)
    assert len(first["x"]) + n == 2000 * 40
    assert len(collections) <= 2, collections


def test_entries_and_views_outlive_the_record_reader_and_buffer() -> None:
    data = _shard(300)
    views, entries = [], []
    with ShardReader(io.BytesIO(data)) as r:
        for rec in r:
            e = rec["x"]
            entries.append(e)
            views.append(e.view)
    del r, rec, e
    gc.collect()
    for i, (e, v) in enumerate(zip(entries, views)):
        assert bytes(v) == bytes([i % 251]) * 40 and e.view.tobytes() == bytes(v)


def test_stored_entries_give_length_and_view_for_every_codec() -> None:
    samples = [
        {
            "__key__": f"k/{i}",
            "raw": Entry(b"r" * (i + 1), "application/x-raw", "none"),
            "z": Entry(b"zstd " * (i + 20), "application/x-z", "zstd"),
            "l": Entry(b"lz4 " * (i + 20), "application/x-l", "lz4"),
        }
        for i in range(5)
    ]
    with ShardReader(write_shard(samples)) as r:
        for i, rec in enumerate(r):
            raw, z, lz = rec["raw"], rec["z"], rec["l"]
            assert isinstance(raw, _StoredEntry)
            assert (len(raw), len(z), len(lz)) == (i + 1, 5 * (i + 20), 4 * (i + 20))
            assert raw.view is raw.view  # zero-copy: the stored view itself
            assert bytes(z.view) == b"zstd " * (i + 20)
            assert lz.data == b"lz4 " * (i + 20)
            assert rec["z"] is z and rec["raw"] is raw and rec["l"] is lz  # one object per entry
            assert rec.entries["z"] is z


def test_a_stored_entry_made_by_hand_behaves_as_before() -> None:
    e = _StoredEntry(memoryview(b"abc"), "text/plain", Codec.NONE)
    assert len(e) == 3 and e.view.tobytes() == b"abc" and e.data == b"abc"
    assert isinstance(type(e).view, property)


def _big_samples() -> list[dict[str, Any]]:
    # Records past 1 MiB: the compiled codec checks their CRCs without the GIL.
    return [
        {"__key__": f"big/{i}", "x": bytes([i + 1]) * ((3 << 19) + i), "y": b"small"}
        for i in range(3)
    ]


def test_big_records_stream_and_decode_whole() -> None:
    data = write_shard(_big_samples())
    with ShardReader(data) as r:
        assert [(rec.key, len(rec["x"]), rec["y"].data) for rec in r] == [
            (f"big/{i}", (3 << 19) + i, b"small") for i in range(3)
        ]
        assert bytes(r.get("big/2")["x"].view) == bytes([3]) * ((3 << 19) + 2)


def test_a_flipped_byte_in_a_big_record_is_found() -> None:
    data = bytearray(write_shard(_big_samples()))
    data[data.find(bytes([2]) * 1000) + 777_777] ^= 0x40  # inside big/1's payload
    with ShardReader(bytes(data)) as r, pytest.raises(FormatError, match="CRC"):
        for _ in r:
            pass


def test_threads_stream_big_records_together() -> None:
    data = write_shard(_big_samples())
    results: list[list[bool]] = []
    expected = [bytes([i + 1]) * ((3 << 19) + i) for i in range(3)]

    def stream() -> None:
        with ShardReader(data) as r:
            results.append([rec["x"].view == want for rec, want in zip(r, expected)])

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [[True] * 3] * 3
