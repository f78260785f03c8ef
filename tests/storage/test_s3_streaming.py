"""Streaming a shard from S3 (moto): which requests it sends, and that it reads ahead."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import shardcat
from shardcat.errors import ShardNotFoundError
from shardcat.format import stream as stream_module
from shardcat.storage import gap

CHUNK = 64 * 1024


@pytest.fixture
def requests_sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str | None]]:
    """Every S3 call s3fs makes, as (operation, Range header); reads go through s3fs."""
    import s3fs

    # These tests count s3fs's requests: not obstore's, which auto would pick for these options.
    shardcat.config.set(s3_transport="fsspec")

    sent: list[tuple[str, str | None]] = []
    call = s3fs.S3FileSystem._call_s3

    async def counted(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        sent.append((method, kwargs.get("Range")))
        return await call(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", counted)
    return sent


def write(url: str, opts: dict[str, Any], n: int = 200) -> list[tuple[str, bytes]]:
    rng = np.random.default_rng(3)
    samples = [(f"k/{i:04d}", rng.bytes(int(rng.integers(500, 3000)))) for i in range(n)]
    with shardcat.ShardWriter(url, storage_options=opts) as w:
        for key, payload in samples:
            w.add(key, {"bin": payload})
    return samples


def test_stream_reads_the_data_region_in_chunks_once_and_nothing_else(
    s3: dict[str, Any], requests_sent: list[tuple[str, str | None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream_module, "_STREAM_CHUNK", CHUNK)
    # Remote files size their requests from the store's latency: these small ones here.
    monkeypatch.setattr(gap, "stream_chunk", lambda key: CHUNK)
    url, opts = f"{s3['url']}/ds/a.shard", s3["storage_options"]
    samples = write(url, opts)
    reader = shardcat.ShardReader(url, storage_options=opts)
    requests_sent.clear()
    assert [(r.key, bytes(r["bin"].data)) for r in reader] == samples
    end = reader.trailer.footer_offset
    gets = [rng for op, rng in requests_sent if op == "get_object"]
    # One ranged GET per chunk (several at once: in any order), up to the footer
    # (already read by opening).
    assert sorted(gets, key=lambda r: int(str(r).split("=")[1].split("-")[0])) == [
        f"bytes={a}-{min(a + CHUNK, end) - 1}" for a in range(0, end, CHUNK)
    ]
    # Besides them only the size check before streaming (one HEAD), no file object's HEAD.
    assert [op for op, _ in requests_sent if op != "get_object"] == ["head_object"]
    assert not [t for t in threading.enumerate() if t.name.startswith("shardcat-read-ahead")]


def test_a_shard_deleted_while_streaming_is_shard_not_found(
    s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import fsspec

    monkeypatch.setattr(stream_module, "_STREAM_CHUNK", CHUNK)
    # Remote files size their requests from the store's latency: these small ones here.
    monkeypatch.setattr(gap, "stream_chunk", lambda key: CHUNK)
    url, opts = f"{s3['url']}/ds/b.shard", s3["storage_options"]
    write(url, opts)
    it = iter(shardcat.ShardReader(url, storage_options=opts))
    next(it)
    fsspec.filesystem("s3", **opts).rm(url)
    with pytest.raises(ShardNotFoundError) as info:
        list(it)
    assert "b.shard" in str(info.value)
    assert not [t for t in threading.enumerate() if t.name.startswith("shardcat-read-ahead")]
