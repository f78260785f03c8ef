"""SourceCache beyond the conformance suite: descriptors closed after fork, one-off batches."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from catalog.helpers import descriptors_of, needs_proc
from shardcat._types import ByteRange
from shardcat.storage import SourceCache, fetch_ranges

DATA = bytes(range(256)) * 40


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    path = tmp_path / "a.bin"
    path.write_bytes(DATA)
    return path


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
