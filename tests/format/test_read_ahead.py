"""Streaming with read-ahead: background threads read the next chunks of a remote source.

The threads must deliver exactly the bytes a plain stream would, in file
order, with ``depth`` reads in flight and no more, read only up to the end
of the data region, hand their errors to the consumer as the source raised
them, and never outlive the stream: not after the last record, an error,
or a caller that stops early.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import pytest

from shardcat.errors import ChecksumError, StorageError
from shardcat.format import BytesSource, ShardReader, iter_partial
from shardcat.format import stream as stream_module
from shardcat.format.prefetch import READ_AHEAD_DEPTH, ReadAhead, ReadSlots

from .conftest import plain, write_shard

CHUNK = 4096


class RemoteLike(BytesSource):
    """A BytesSource that asks for read-ahead, logs its reads and can fail one."""

    read_ahead = True

    def __init__(self, data: bytes, fail_at: int | None = None) -> None:
        super().__init__(data, name="remote://bucket/a.shard")
        self.reads: list[tuple[int, int]] = []
        self.fail_at = fail_at
        self.streams_opened = 0

    def read(self, start: int, end: int) -> bytes:
        self.reads.append((start, end))  # list.append is atomic: reads come from several threads
        if self.fail_at is not None and start <= self.fail_at < end:
            raise StorageError(f"{self.name}: connection reset while reading [{start}, {end})")
        return super().read(start, end)

    def open_stream(self, start: int = 0) -> BinaryIO:
        self.streams_opened += 1
        return super().open_stream(start)


def read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("shardcat-read-ahead")]


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Many chunks from a small shard, so every path crosses chunk boundaries.
    monkeypatch.setattr(stream_module, "_STREAM_CHUNK", CHUNK)
    yield
    assert read_ahead_threads() == []


@pytest.fixture(scope="module")
def shard() -> bytes:
    rng = np.random.default_rng(5)
    samples: list[dict[str, Any]] = [
        {"__key__": f"k/{i:04d}", "bin": rng.bytes(int(rng.integers(200, 3000))), "cls": str(i)}
        for i in range(120)
    ]
    # One record larger than a chunk: it straddles several of them.
    samples[40]["bin"] = rng.bytes(3 * CHUNK + 17)
    return write_shard(samples)


def test_same_records_as_a_plain_stream_and_reads_only_the_data_region(shard: bytes) -> None:
    expected = [plain(r) for r in ShardReader(BytesSource(shard))]
    src = RemoteLike(shard)
    reader = ShardReader(src)
    src.reads.clear()
    assert [plain(r) for r in reader] == expected
    end = reader.trailer.footer_offset
    # Consecutive chunks from 0 to the footer, each read once, none past it,
    # and no file object opened (several are read at once: in any order).
    starts = list(range(0, end, CHUNK))
    assert sorted(src.reads) == [(a, min(a + CHUNK, end)) for a in starts]
    assert src.streams_opened == 0


def test_verify_and_salvage_read_ahead_too(shard: bytes) -> None:
    src = RemoteLike(shard)
    assert ShardReader(src).verify().records == 120
    assert src.streams_opened == 0
    salvaged = list(iter_partial(RemoteLike(shard[: len(shard) // 2])))
    assert 0 < len(salvaged) < 120


def test_a_failed_read_surfaces_typed_after_the_records_before_it(shard: bytes) -> None:
    src = RemoteLike(shard, fail_at=5 * CHUNK + 1)
    seen: list[str] = []

    def consume() -> None:
        for rec in ShardReader(src):
            seen.append(rec.key)

    with pytest.raises(StorageError, match="connection reset") as info:
        consume()
    assert "[20480, 24576)" in str(info.value)
    assert seen and seen == [f"k/{i:04d}" for i in range(len(seen))]
    # Reading stopped at the failure: nothing was asked after the reads
    # already in flight with it (depth - 1 of them).
    assert max(src.reads)[0] <= (4 + READ_AHEAD_DEPTH) * CHUNK


def test_corruption_found_while_reading_ahead_is_the_usual_error(shard: bytes) -> None:
    bad = bytearray(shard)
    reader = ShardReader(BytesSource(shard))
    row = reader.footer.records[60]
    bad[int(row["offset"]) + int(row["length"]) // 2] ^= 0xFF  # inside record 60's payload

    def consume() -> None:
        for rec in ShardReader(RemoteLike(bytes(bad))):
            assert rec["bin"].data is not None

    with pytest.raises(ChecksumError):
        consume()


@pytest.mark.parametrize("stop_after", [0, 1, 50, 119])
def test_stopping_early_leaves_no_thread(shard: bytes, stop_after: int) -> None:
    src = RemoteLike(shard)
    it = iter(ShardReader(src))
    for _ in range(stop_after):
        next(it)
    assert read_ahead_threads() or stop_after == 0  # reading ahead while the caller pauses
    del it  # a for loop left by break: the generator is closed, the thread joined
    assert read_ahead_threads() == []


def test_an_error_in_the_callers_loop_leaves_no_thread(shard: bytes) -> None:
    def consume() -> None:
        for i, _ in enumerate(ShardReader(RemoteLike(shard))):
            if i == 10:
                raise KeyError("the caller's own bug")

    with pytest.raises(KeyError):
        consume()
    assert read_ahead_threads() == []


@pytest.mark.parametrize("depth", [1, 3])
def test_read_ahead_alone_stops_at_a_short_read_and_closes_idempotently(depth: int) -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes
    src = RemoteLike(data)
    ra = ReadAhead(src, 1000, 40_000, chunk=4000, depth=depth)
    got = b""
    while chunk := ra.read():
        got += chunk
    assert got == data[1000:]
    # The third read came back short (the file ends): nothing was asked after
    # it but the reads already in flight with it (none with one at a time).
    assert sorted(src.reads)[:3] == [(1000, 5000), (5000, 9000), (9000, 13000)]
    assert 3 <= len(src.reads) <= 3 + depth - 1
    assert not ra.alive
    ra.close()
    ra.close()
    assert ra.read() == b""


def test_reads_overlap_up_to_depth_and_never_more() -> None:
    depth = 3
    barrier = threading.Barrier(depth, timeout=10)
    in_flight = [0, 0]  # now, most
    lock = threading.Lock()

    class Slow(RemoteLike):
        def read(self, start: int, end: int) -> bytes:
            with lock:
                in_flight[0] += 1
                in_flight[1] = max(in_flight)
            try:
                if start < depth * 100:
                    barrier.wait()  # the first ``depth`` reads only pass together
                time.sleep(0.002)
                return super().read(start, end)
            finally:
                with lock:
                    in_flight[0] -= 1

    src = Slow(bytes(range(256)) * 40)
    ra = ReadAhead(src, 0, 10_240, chunk=100, depth=depth, first=100)
    got, delivered = b"", 0
    while chunk := ra.read():
        got += chunk
        delivered += 1
        # Memory stays bounded: at most ``depth`` chunks asked and not yet handed over.
        assert len(src.reads) <= delivered + depth
    assert got == bytes(range(256)) * 40
    assert in_flight[1] == depth


def test_chunks_arrive_in_file_order_when_reads_finish_out_of_order() -> None:
    class LateFirst(RemoteLike):
        def read(self, start: int, end: int) -> bytes:
            time.sleep(0.02 if start % 300 == 0 else 0.0)  # every third read is slow
            return super().read(start, end)

    data = bytes(range(256)) * 40
    ra = ReadAhead(LateFirst(data), 0, len(data), chunk=100, depth=4, first=100)
    got = b""
    while chunk := ra.read():
        got += chunk
    assert got == data


def test_reads_start_small_and_double_up_to_the_chunk_size() -> None:
    src = RemoteLike(bytes(100_000))
    ra = ReadAhead(src, 0, 100_000, chunk=16_000, depth=2, first=1_000)
    while ra.read():
        pass
    sizes = [b - a for a, b in sorted(src.reads)]
    assert sizes[:6] == [1_000, 2_000, 4_000, 8_000, 16_000, 16_000]
    assert set(sizes[4:-1]) == {16_000}
    assert sum(sizes) == 100_000


def test_an_error_past_a_short_read_is_never_seen() -> None:
    class PastEnd(RemoteLike):
        def read(self, start: int, end: int) -> bytes:
            if start >= self.size():
                raise StorageError(f"{self.name}: InvalidRange [{start}, {end})")
            return super().read(start, end)

    data = bytes(2500)
    ra = ReadAhead(PastEnd(data), 0, 10_000, chunk=1000, depth=4, first=1000)
    got = b""
    while chunk := ra.read():
        got += chunk
    assert got == data


def test_closing_while_the_consumer_is_behind_stops_the_thread() -> None:
    src = RemoteLike(bytes(1 << 20))
    ra = ReadAhead(src, 0, 1 << 20, chunk=1024, depth=2)
    assert len(ra.read()) == 1024
    ra.close()
    assert not ra.alive
    assert len(src.reads) < 1024  # it stopped, rather than reading the whole file
    assert ra.read() == b""


# --- streams sharing their read slots (iter_shards) ------------------------------------------


def test_streams_sharing_slots_never_ask_for_more_and_the_next_starts_before_the_first_ends() -> (
    None
):
    slots = ReadSlots(3)
    asked: list[tuple[str, int]] = []  # (stream, start), in the order asked
    lock = threading.Lock()

    class Logged(RemoteLike):
        def read(self, start: int, end: int) -> bytes:
            with lock:
                asked.append((self.name, start))
            return super().read(start, end)

    data = [bytes([i]) * 1000 for i in range(3)]
    sources = [Logged(d) for d in data]
    for i, src in enumerate(sources):
        src._name = f"remote://bucket/{i}.shard"
    streams = [ReadAhead(src, 0, 1000, chunk=100, first=100, slots=slots) for src in sources]
    delivered = 0
    got = [b"", b"", b""]
    first_of_next_asked_at = None
    for i, stream in enumerate(streams):
        while chunk := stream.read():
            got[i] += bytes(chunk)
            delivered += 1
            with lock:
                # Asked and not handed over: never more than the slots, over all streams.
                assert len(asked) <= delivered + 3
            # Set when a chunk is asked for (in the read() that freed the slot), not when read.
            if first_of_next_asked_at is None and i == 0 and streams[1]._next > 0:
                first_of_next_asked_at = delivered
    assert got == data
    # The second stream's first chunk was asked for while the first still had chunks to hand
    # over (it had asked for its last), not after its end.
    # 3 slots, 10 chunks: the first stream asked for its last at its 7th handover, the
    # 8th slot freed went to the second.
    assert first_of_next_asked_at == 8
    # Each chunk of each stream was asked for once.
    for src in sources:
        assert sorted(a for n, a in asked if n == src.name) == list(range(0, 1000, 100))
    for stream in streams:
        stream.close()
    assert slots.free == 3 and slots.streams == []


def test_a_stream_closed_early_gives_its_slots_to_the_next() -> None:
    slots = ReadSlots(2)
    first = ReadAhead(RemoteLike(b"a" * 1000), 0, 1000, chunk=100, first=100, slots=slots)
    second = ReadAhead(RemoteLike(b"b" * 1000), 0, 1000, chunk=100, first=100, slots=slots)
    assert bytes(first.read()) == b"a" * 100
    first.close()  # the caller stopped: its slots (and the reads holding them) come back
    out = _bounded_read_all(second)
    assert out == b"b" * 1000
    assert slots.free == 2


def test_a_failed_read_in_a_shared_stream_is_raised_and_gives_its_slot_back() -> None:
    slots = ReadSlots(2)
    bad = ReadAhead(
        RemoteLike(b"a" * 1000, fail_at=250), 0, 1000, chunk=100, first=100, slots=slots
    )
    nxt = ReadAhead(RemoteLike(b"b" * 1000), 0, 1000, chunk=100, first=100, slots=slots)
    assert bytes(bad.read()) + bytes(bad.read()) == b"a" * 200
    with pytest.raises(StorageError, match="connection reset"):
        bad.read()
    assert _bounded_read_all(nxt) == b"b" * 1000
    assert slots.free == 2


def _bounded_read_all(stream: ReadAhead, bound: float = 30.0) -> bytes:
    """Every chunk of ``stream`` read on a thread; fails if that never ends (a lost slot)."""
    out: list[bytes] = []
    t = threading.Thread(target=lambda: out.extend(bytes(c) for c in iter(stream.read, b"")))
    t.daemon = True
    t.start()
    t.join(bound)
    assert not t.is_alive(), "the stream waits for a slot that never comes back"
    return b"".join(out)
