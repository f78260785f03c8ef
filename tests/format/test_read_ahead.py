"""Streaming with read-ahead: a background thread reads the next chunks of a remote source.

The thread must deliver exactly the bytes a plain stream would, read only
up to the end of the data region, hand its errors to the consumer as the
source raised them, and never outlive the stream: not after the last
record, an error, or a caller that stops early.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import pytest

from shardcat.errors import ChecksumError, StorageError
from shardcat.format import BytesSource, ShardReader, iter_partial
from shardcat.format import stream as stream_module
from shardcat.format.prefetch import ReadAhead

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
        self.reads.append((start, end))
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
    # and no file object opened.
    starts = list(range(0, end, CHUNK))
    assert src.reads == [(a, min(a + CHUNK, end)) for a in starts]
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
    # The thread stopped at the failure: nothing was read after it.
    assert src.reads[-1] == (5 * CHUNK, 6 * CHUNK)


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


def test_read_ahead_alone_stops_at_a_short_read_and_closes_idempotently() -> None:
    data = bytes(range(256)) * 40  # 10,240 bytes
    src = RemoteLike(data)
    ra = ReadAhead(src, 1000, 20_000, chunk=4000)
    got = b""
    while chunk := ra.read():
        got += chunk
    assert got == data[1000:]
    # The third read came back short (the file ends): nothing was asked after it.
    assert src.reads == [(1000, 5000), (5000, 9000), (9000, 13000)]
    assert not ra.alive
    ra.close()
    ra.close()
    assert ra.read() == b""


def test_closing_while_the_consumer_is_behind_stops_the_thread() -> None:
    src = RemoteLike(bytes(1 << 20))
    ra = ReadAhead(src, 0, 1 << 20, chunk=1024, depth=2)
    assert len(ra.read()) == 1024
    ra.close()
    assert not ra.alive
    assert len(src.reads) < 1024  # it stopped, rather than reading the whole file
    assert ra.read() == b""
