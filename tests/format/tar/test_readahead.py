"""The read-ahead thread: same results and errors as reading in the walk's thread, and no thread left behind."""

from __future__ import annotations

import io
import os
import threading
from typing import Any

import pytest

import shardcat.config
from shardcat.format.tar import iter_tar_samples, scan_tar
from shardcat.format.tar.errors import TarChecksumError, TarError, TarTruncatedError
from shardcat.format.tar.readahead import THREAD_NAME, ChunkReader, is_local_file
from shardcat.format.tar.spec import BLOCK
from shardcat.format.tar.walk import TarWalker

from .helpers import error_fields, make_tar, random_samples_tar, summary_fields

CHUNK = 4096  # small chunks: the archive below spans ~200 of them


DATA = random_samples_tar(5, 150)


def _readers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Any:
    assert not _readers()
    yield
    assert not _readers(), "a read-ahead thread outlived its walk"


def _summary(data: bytes, **kwargs: Any) -> tuple[Any, ...]:
    info = scan_tar(io.BytesIO(data), "mem.tar", chunk_size=CHUNK, **kwargs)
    return summary_fields(info)


def _error(data: bytes, **kwargs: Any) -> tuple[type, str, Any, Any]:
    with pytest.raises(TarError) as e:
        scan_tar(io.BytesIO(data), "mem.tar", chunk_size=CHUNK, **kwargs)
    return error_fields(e.value)


class _Stream(io.RawIOBase):
    """A readable stream over bytes that raises ``error`` once ``fail_at`` bytes were read."""

    def __init__(self, data: bytes, fail_at: int | None = None, error: Exception | None = None):
        self._data = memoryview(data)
        self._pos = 0
        self._fail_at = fail_at
        self._error = error
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._fail_at is not None and self._pos >= self._fail_at:
            assert self._error is not None
            raise self._error
        n = min(len(b), len(self._data) - self._pos, 1000)  # short reads, too
        b[:n] = self._data[self._pos : self._pos + n]
        self._pos += n
        self.read_bytes += n
        return n


@pytest.mark.parametrize("readahead", [1, 2, 4])
def test_reading_ahead_finds_what_reading_in_the_walk_finds(readahead):
    assert _summary(DATA, readahead=readahead) == _summary(DATA, readahead=0)
    # Streams that return fewer bytes than asked for, too.
    info = scan_tar(_Stream(DATA), "mem.tar", chunk_size=CHUNK, readahead=readahead)
    assert info.keys == _summary(DATA, readahead=0)[0]


def test_by_default_a_local_file_is_read_without_the_thread_and_a_stream_with_it(tmp_path):
    path = tmp_path / "x.tar"
    path.write_bytes(DATA)
    with open(path, "rb") as f:
        seen = [len(_readers()) for _ in TarWalker(f, "x.tar", chunk_size=CHUNK)]
    assert seen and max(seen) == 0
    seen = [len(_readers()) for _ in TarWalker(_Stream(DATA), "mem.tar", chunk_size=CHUNK)]
    assert max(seen) == 1
    r, w = os.pipe()  # a pipe is not a regular file: read ahead
    with open(r, "rb", buffering=0) as pipe:
        os.close(w)
        assert not is_local_file(pipe)
    assert scan_tar(path, chunk_size=CHUNK).keys == _summary(DATA, readahead=0)[0]


def test_the_thread_runs_only_when_the_tar_is_longer_than_one_chunk():
    seen = []
    for _batch in TarWalker(io.BytesIO(DATA), "mem.tar", chunk_size=CHUNK, readahead=2):
        seen.append(len(_readers()))
    assert max(seen) == 1
    small = make_tar([("a.txt", b"abc")])
    for batch in TarWalker(io.BytesIO(small), "mem.tar", chunk_size=CHUNK, readahead=2):
        assert not _readers() and batch[0] == [b"a.txt"]


@pytest.mark.parametrize("readahead", [0, 2])
def test_every_truncation_is_reported_alike(readahead):
    end_of_members = _summary(DATA, readahead=0)[4]
    for cut in range(BLOCK, end_of_members + 1, 24_989):
        expected = _error(DATA[:cut], readahead=0)
        assert expected[0] is TarTruncatedError
        assert _error(DATA[:cut], readahead=readahead) == expected, cut
        assert _error(DATA[:cut], readahead=readahead, size=len(DATA)) == _error(
            DATA[:cut], readahead=0, size=len(DATA)
        )


def test_a_damaged_header_far_ahead_is_reported_alike_and_stops_the_thread():
    data = bytearray(DATA)
    at = len(data) // 2 // BLOCK * BLOCK
    while data[at + 257 : at + 262] != b"ustar":  # a header's block
        at -= BLOCK
    data[at + 3] ^= 1
    expected = _error(bytes(data), readahead=0)
    assert expected[0] is TarChecksumError and expected[3] == at
    assert _error(bytes(data), readahead=3) == expected


@pytest.mark.parametrize("fail_at", [0, CHUNK, 10 * CHUNK + 100])
def test_a_read_error_in_the_thread_is_raised_in_the_walk(fail_at):
    outcomes = []
    for readahead in (0, 2):
        error = OSError(5, "Input/output error", "bucket/mem.tar")
        stream = _Stream(DATA, fail_at=fail_at, error=error)
        with pytest.raises(OSError, match="Input/output error") as e:
            scan_tar(stream, "mem.tar", chunk_size=CHUNK, readahead=readahead)
        assert e.value is error  # the stream's own exception, not a copy
        outcomes.append((type(e.value), str(e.value)))
    assert outcomes[0] == outcomes[1]


def test_an_abandoned_walk_stops_its_thread():
    samples = iter_tar_samples(io.BytesIO(DATA), "mem.tar", chunk_size=CHUNK, readahead=2)
    first = next(samples)
    assert first.key == "s/0000" and len(_readers()) == 1
    samples.close()
    assert not _readers()


def test_closing_a_walker_stops_its_thread_and_is_idempotent():
    walker = TarWalker(io.BytesIO(DATA), "mem.tar", chunk_size=CHUNK, readahead=2)
    batches = iter(walker)
    next(batches)
    assert len(_readers()) == 1
    walker.close()
    walker.close()
    assert not _readers()


def _consume_and_fail() -> None:
    for _ in iter_tar_samples(io.BytesIO(DATA), "mem.tar", chunk_size=CHUNK, readahead=2):
        assert len(_readers()) == 1
        raise ZeroDivisionError


def test_an_exception_in_the_consumer_stops_the_thread():
    with pytest.raises(ZeroDivisionError):
        _consume_and_fail()
    # The abandoned generator was closed as the exception left its frame (the fixture checks).


@pytest.mark.parametrize("readahead", [1, 3])
def test_the_thread_reads_at_most_readahead_chunks_ahead(readahead):
    stream = _Stream(DATA)
    walker = TarWalker(stream, "mem.tar", chunk_size=CHUNK, readahead=readahead)
    walked = 0
    for batch in walker:
        walked = batch[2][-1] + batch[3][-1]  # the end of the last payload handed out
        # The chunk being walked (and up to two before it, back to the end of the last
        # member handed out), then at most `readahead` more: buffers are reused, never added.
        assert stream.read_bytes <= walked + (readahead + 3) * CHUNK
    assert stream.read_bytes == len(DATA)


def test_chunk_reader_hands_out_the_stream_in_order():
    for readahead in (0, 2):
        reader = ChunkReader(io.BytesIO(DATA), 1024, 16, readahead)
        out = bytearray()
        while True:
            slot, n = reader.next()
            if slot is None:
                break
            out += slot.buf[16 : 16 + n]
            reader.release(slot)
        assert bytes(out) == DATA
        assert reader.next() == (None, 0)
        reader.close()
        reader.close()
    with pytest.raises(ValueError, match="readahead"):
        ChunkReader(io.BytesIO(DATA), 1024, 16, -1)


def test_on_s3_the_thread_reads_one_sequential_stream(s3, monkeypatch):
    import fsspec

    # The requests are counted in s3fs's file object: read through s3fs, not obstore (auto).
    shardcat.config.set(s3_transport="fsspec")

    from shardcat.storage import open_source

    fs = fsspec.filesystem("s3", **s3["storage_options"])
    url = f"{s3['url']}/wds/readahead.tar"
    fs.pipe_file(url, DATA)
    chunk = 64 << 10
    results = []
    for readahead in (0, 2):
        source = open_source(url, s3["storage_options"])
        stream = source.open_stream()
        requests: list[tuple[int, int]] = []
        fetch = stream.cache.fetcher  # every byte an fsspec file reads comes through here
        stream.cache.fetcher = lambda start, end, f=fetch, r=requests: (
            r.append((start, end)) or f(start, end)
        )
        with stream:
            info = scan_tar(stream, url, size=len(DATA), chunk_size=chunk, readahead=readahead)
        # One request per chunk, in order, each starting where the previous one ended.
        assert [start for start, _ in requests] == list(range(0, len(DATA), chunk))
        assert all(end >= start for start, end in requests)
        results.append((info.keys, info.records.tobytes(), info.entries.tobytes(), info.size))
    assert results[0] == results[1] and len(results[0][0]) == 150
