"""Streaming several shards with the next one opened ahead (``shardcat.iter_shards``).

The records must be those of each shard's own stream, in order; the next
shard must be opened while the current one is still being read; an error
of a shard must surface at that shard, after every record before it; and
leaving early must leave no thread and no open stream behind.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import shardcat
from shardcat.errors import ShardNotFoundError
from shardcat.format import stream as stream_module
from shardcat.storage import gap, streaming


def write_shards(base: str, opts: dict[str, Any] | None, shards: int = 4, n: int = 60) -> list[str]:
    rng = np.random.default_rng(11)
    urls = []
    for s in range(shards):
        url = f"{base}/part-{s:06d}.shard"
        with shardcat.ShardWriter(url, storage_options=opts) as w:
            for i in range(n):
                w.add(f"s{s}/{i:04d}", {"bin": rng.bytes(int(rng.integers(100, 4000)))})
        urls.append(url)
    return urls


def expected(urls: list[str], opts: dict[str, Any] | None) -> list[tuple[str, bytes]]:
    out = []
    for url in urls:
        with shardcat.ShardReader(url, storage_options=opts) as r:
            out += [(rec.key, bytes(rec["bin"].data)) for rec in r]
    return out


def our_threads() -> list[threading.Thread]:
    return [
        t
        for t in threading.enumerate()
        if t.name.startswith(("shardcat-next-shard", "shardcat-read-ahead"))
    ]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_module, "_STREAM_CHUNK", 16 * 1024)
    # Remote files size their requests from the store's latency: these small ones here.
    monkeypatch.setattr(gap, "stream_chunk", lambda key: 16 * 1024)


@pytest.mark.parametrize("ahead", [0, 1, 2])
def test_same_records_as_each_shard_streamed_alone_locally(tmp_path: Path, ahead: int) -> None:
    urls = write_shards(str(tmp_path), None)
    got = [(r.key, bytes(r["bin"].data)) for r in shardcat.iter_shards(urls, ahead=ahead)]
    assert got == expected(urls, None)
    assert our_threads() == []


@pytest.mark.parametrize("ahead", [1, 3])
def test_same_records_on_s3(s3: dict[str, Any], small_chunks: None, ahead: int) -> None:
    opts = s3["storage_options"]
    urls = write_shards(f"{s3['url']}/ds", opts)
    got = [
        (r.key, bytes(r["bin"].data))
        for r in shardcat.iter_shards(urls, storage_options=opts, ahead=ahead)
    ]
    assert got == expected(urls, opts)
    assert our_threads() == []


def test_the_next_shard_is_opened_while_the_current_one_is_read(
    s3: dict[str, Any], small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = s3["storage_options"]
    urls = write_shards(f"{s3['url']}/ds", opts, shards=3)
    opened: list[str] = []
    real_open = streaming._open

    def logged(url: Any, *args: Any) -> Any:
        opened_shard = real_open(url, *args)
        opened.append(str(url))  # after its stream started (first chunk read)
        return opened_shard

    monkeypatch.setattr(streaming, "_open", logged)
    it = shardcat.iter_shards(urls, storage_options=opts, ahead=1)
    first = next(it)
    assert first.key == "s0/0000"
    # The streams share their read slots, earliest first: the second shard's stream
    # starts once the first has asked for its last chunk, before its records are all read.
    last = [next(it) for _ in range(58)][-1]
    assert last.key == "s0/0058"
    deadline = time.monotonic() + 10
    while len(opened) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert opened == urls[:2]
    rest = list(it)
    assert len(rest) == 3 * 60 - 59
    assert opened == urls
    assert our_threads() == []


def test_a_missing_shard_fails_at_its_turn_after_the_records_before_it(
    s3: dict[str, Any], small_chunks: None
) -> None:
    opts = s3["storage_options"]
    urls = write_shards(f"{s3['url']}/ds", opts, shards=3)
    before = expected(urls[:2], opts)
    urls.insert(2, f"{s3['url']}/ds/missing.shard")
    seen: list[tuple[str, bytes]] = []

    def consume() -> None:
        for r in shardcat.iter_shards(urls, storage_options=opts, ahead=2):
            seen.append((r.key, bytes(r["bin"].data)))

    with pytest.raises(ShardNotFoundError) as info:
        consume()
    assert "missing.shard" in str(info.value)
    assert seen == before
    assert our_threads() == []


@pytest.mark.parametrize("stop_after", [0, 1, 59, 60, 150])
def test_leaving_early_closes_every_shard_opened_ahead(
    s3: dict[str, Any], small_chunks: None, stop_after: int
) -> None:
    opts = s3["storage_options"]
    urls = write_shards(f"{s3['url']}/ds", opts)
    it = shardcat.iter_shards(urls, storage_options=opts, ahead=2)
    for _ in range(stop_after):
        next(it)
    del it  # what a for loop left by break does
    assert our_threads() == []
