"""SourceCache beyond the conformance suite: descriptors closed after fork, one-off batches."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import numpy as np
import pytest

import shardcat.config
from catalog.helpers import descriptors_of, needs_proc
from shardcat._types import ByteRange
from shardcat.errors import ShardNotFoundError
from shardcat.storage import SourceCache, fetch_ranges

DATA = bytes(range(256)) * 40


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    path = tmp_path / "a.bin"
    path.write_bytes(DATA)
    return path


def _count_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of every ``os.pread`` from now on (the list fills as they happen)."""
    calls: list[int] = []
    real = os.pread

    def counted(fd: int, n: int, off: int) -> bytes:
        calls.append(n)
        return real(fd, n, off)

    monkeypatch.setattr(os, "pread", counted)
    return calls


@needs_proc
def test_a_local_source_stays_open_until_closed(shard):
    cache = SourceCache()
    assert descriptors_of(shard) == []
    cache.read(str(shard), 0, 10)
    cache.read_batch([(str(shard), ByteRange(20, 30)), (str(shard), ByteRange(5000, 5100))])
    assert len(descriptors_of(shard)) == 1  # one descriptor for every read since
    cache.close()
    assert descriptors_of(shard) == []


@needs_proc
def test_a_one_off_batch_closes_what_it_opened(shard):
    views = fetch_ranges([(str(shard), ByteRange(0, 4)), (f"file://{shard}", ByteRange(256, 260))])
    assert [bytes(v) for v in views] == [DATA[:4], DATA[256:260]]
    assert descriptors_of(shard) == []


@needs_proc
def test_a_forked_child_closes_the_descriptors_it_inherited(shard):
    cache = SourceCache()
    assert cache.read(str(shard), 0, 10) == DATA[:10]
    assert len(descriptors_of(shard)) == 1

    def child(queue) -> None:
        try:
            inherited = descriptors_of(shard)
            emptied = len(cache) == 0
            data = cache.read(str(shard), 10, 20)  # reopened: the child's own descriptor
            queue.put((inherited, emptied, data, len(descriptors_of(shard))))
        except Exception as e:  # report, do not hang the parent
            queue.put(repr(e))

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(timeout=60)
    assert got == ([], True, DATA[10:20], 1)
    # The parent's descriptor is its own: still open and reading.
    assert len(descriptors_of(shard)) == 1
    assert cache.read(str(shard), 20, 30) == DATA[20:30]
    cache.close()


def test_a_local_file_replaced_by_rename_is_reopened(shard, tmp_path):
    cache = SourceCache()
    assert cache.read(str(shard), 0, 4) == DATA[:4]
    aside = tmp_path / "new.bin"
    aside.write_bytes(b"fresh bytes")
    os.replace(aside, shard)  # the cached descriptor now names no file
    assert cache.read(str(shard), 0, 5) == b"fresh"
    cache.close()


# --- read_sorted: the batch path's reads --------------------------------------


def _sorted_reads(cache, urls, rows):
    file = np.array([f for f, _, _ in rows], dtype=np.int64)
    start = np.array([s for _, s, _ in rows], dtype=np.int64)
    end = np.array([e for _, _, e in rows], dtype=np.int64)
    blobs, merged = cache.read_sorted(urls, file, start, end)
    return [
        bytes(blobs[r][s - merged.start[r] : e - merged.start[r]])
        for r, s, e in zip(merged.read.tolist(), start.tolist(), end.tolist())
    ]


def test_read_sorted_reads_local_files_with_pread_and_merges(shard, tmp_path, monkeypatch):
    other = tmp_path / "b.bin"
    other.write_bytes(DATA[::-1])
    calls = _count_preads(monkeypatch)
    rows = [(0, 0, 10), (0, 10, 20), (0, 9000, 9100), (1, 5, 7), (1, 10_000, 10_300)]
    with SourceCache() as cache:
        got = _sorted_reads(cache, [str(shard), f"file://{other}"], rows)
    expected = [DATA[0:10], DATA[10:20], DATA[9000:9100], DATA[::-1][5:7], DATA[::-1][10_000:]]
    assert got == expected  # the last range passes the end of the file: fewer bytes
    # (0, 20) is one read; 9000 is more than 8 KiB further; the short read is continued once.
    assert calls[:4] == [20, 100, 2, 300]


@pytest.mark.parametrize(
    ("setting", "sent"),
    [
        ("64KiB", 2),  # the first file's ranges merged across their 10 KB gap
        (None, 3),  # derived: a 10 KB gap is far past the read budget of 52 bytes wanted
    ],
)
def test_read_sorted_reads_remote_files_with_one_cat_ranges(s3, monkeypatch, setting, sent):
    import s3fs

    # s3fs's cat_ranges, counted. What is checked is the calls, not the speed: one moto
    # request on a loaded machine outlasted the suite's 3-s deadline once (tests/conftest.py).
    shardcat.config.set(s3_transport="fsspec", storage_retry_deadline=60)

    fs = s3fs.S3FileSystem(**s3["storage_options"])
    urls = [f"{s3['url']}/a.bin", f"{s3['url']}/b.bin"]
    fs.pipe(urls[0], DATA)
    fs.pipe(urls[1], DATA[::-1])
    rows = [(0, 0, 10), (0, 10_200, 10_240), (1, 5, 7)]
    with SourceCache(s3["storage_options"], remote_max_gap=setting) as cache:
        calls: list[int] = []
        fs = cache.source(urls[0]).fs  # type: ignore[attr-defined]
        real = fs.cat_ranges

        def counted(paths, starts, ends, **kwargs):
            calls.append(len(paths))
            return real(paths, starts, ends, **kwargs)

        fs.cat_ranges = counted
        got = _sorted_reads(cache, urls, rows)
    assert got == [DATA[0:10], DATA[10_200:], DATA[::-1][5:7]]
    assert calls == [sent]  # one call for both files


def test_read_sorted_names_a_missing_file(tmp_path, shard):
    missing = tmp_path / "gone.bin"
    with SourceCache() as cache, pytest.raises(ShardNotFoundError) as info:
        _sorted_reads(cache, [str(shard), str(missing)], [(0, 0, 4), (1, 0, 4)])
    assert str(missing) in str(info.value.path)


def test_a_batch_beside_remote_files_keeps_the_local_gap(shard, monkeypatch):
    # The derived remote gap's read budget (20 bytes wanted remotely: no gap read there)
    # holds for remote files only: the local file still merges its 4,990-byte gap.
    import fsspec

    remote = "memory://gap-local/a.bin"
    fsspec.filesystem("memory").pipe_file(remote, DATA)
    calls = _count_preads(monkeypatch)
    requests = [(url, ByteRange(a, a + 10)) for url in (str(shard), remote) for a in (0, 5000)]
    with SourceCache() as cache:
        assert cache.remote_max_gap is None  # derived
        got = [bytes(v) for v in cache.read_batch(requests)]
    assert got == [DATA[0:10], DATA[5000:5010]] * 2
    assert calls == [5010]
