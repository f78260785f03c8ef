"""LocalShardCache: whole remote shards copied locally, bounded in size, LRU eviction."""

from __future__ import annotations

import os
import pickle
import time
import uuid

import fsspec
import pytest

from shardcat.errors import ShardNotFoundError
from shardcat.storage import LocalShardCache


@pytest.fixture
def remote():
    root = f"memory://cache-{uuid.uuid4().hex[:8]}"
    fs = fsspec.filesystem("memory")
    for i in range(4):
        fs.pipe(f"{root}/s{i}.shard", bytes([i]) * 1000)
    yield root
    fs.rm(root, recursive=True)


def _age(cache: LocalShardCache, path: str, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_a_copy_is_downloaded_once_and_then_served_locally(remote, tmp_path):
    cache = LocalShardCache.create(tmp_path / "c", "10KB")
    path = cache.fetch(f"{remote}/s1.shard", "id1")
    with open(path, "rb") as f:
        assert f.read() == bytes([1]) * 1000
    fsspec.filesystem("memory").rm(f"{remote}/s1.shard")
    assert cache.fetch(f"{remote}/s1.shard", "id1") == path  # no request: the store lost it
    # Another file id (the shard was replaced) is another copy.
    with pytest.raises(ShardNotFoundError):
        cache.fetch(f"{remote}/s1.shard", "id2")
    assert [p for p in os.listdir(tmp_path / "c") if "partial" in p] == []


def test_least_recently_used_copies_go_first(remote, tmp_path):
    cache = LocalShardCache.create(tmp_path / "c", 2500)
    p0 = cache.fetch(f"{remote}/s0.shard", "a")
    p1 = cache.fetch(f"{remote}/s1.shard", "a")
    _age(cache, p0, 20)
    _age(cache, p1, 30)
    cache.fetch(f"{remote}/s0.shard", "a")  # a hit makes s0 the most recent
    p2 = cache.fetch(f"{remote}/s2.shard", "a")
    assert os.path.exists(p0) and os.path.exists(p2) and not os.path.exists(p1)
    assert cache.size() <= 2500


def test_the_copy_being_read_stays_even_over_the_limit(remote, tmp_path):
    cache = LocalShardCache.create(tmp_path / "c", 10)
    path = cache.fetch(f"{remote}/s3.shard", "a")
    assert os.path.getsize(path) == 1000
    other = cache.fetch(f"{remote}/s2.shard", "a")
    assert os.path.exists(other) and not os.path.exists(path)


def test_local_urls_are_not_copied_and_the_cache_pickles(tmp_path):
    cache = LocalShardCache.create(tmp_path / "c", "1MB")
    assert cache.fetch("/data/x.shard", "a") == "/data/x.shard"
    assert pickle.loads(pickle.dumps(cache)) == cache
    assert os.listdir(tmp_path / "c") == []
