"""obstore as the S3 read transport (``SHARDCAT_S3_TRANSPORT=obstore``, and ``auto``'s pick), against moto.

Shards are written through s3fs (writes stay there) and read through
obstore: point lookups, batches, streams, and the typed errors of a
missing object, a missing bucket, a stopped store and a denied read.
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

import shardcat
from shardcat.errors import (
    BucketNotFoundError,
    ShardNotFoundError,
    StorageError,
    StoragePermissionError,
    StorageUnreachableError,
)
from shardcat.reading import Catalog
from shardcat.storage import FsspecSource, SourceCache, choose_transport, fanout, open_source
from shardcat.storage import cache as cache_module
from shardcat.storage.objstore import ObstoreSource

pytest.importorskip("obstore")

DATA = bytes(range(256)) * 40


@pytest.fixture
def obstore_on(monkeypatch: pytest.MonkeyPatch) -> None:
    shardcat.config.set(s3_transport="obstore")


def _put(s3: dict[str, Any], name: str, data: bytes) -> str:
    import s3fs

    url = f"{s3['url']}/{name}"
    s3fs.S3FileSystem(**s3["storage_options"]).pipe(url, data)
    return url


def test_s3fs_options_map_to_obstore_or_keep_s3fs(monkeypatch):
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9/", "region_name": "eu-west-1"},
        "use_listings_cache": False,
    }
    choice = choose_transport("s3://bucket/x", options)
    assert choice.config == {
        "endpoint": "http://127.0.0.1:9",
        "aws_endpoint_url_s3": "http://127.0.0.1:9",
        "region": "eu-west-1",
        "default_region": "eu-west-1",
        "virtual_hosted_style_request": False,
        "skip_signature": False,
        "request_payer": False,
        "s3_express": False,
        "unsigned_payload": False,
        "client_options": {"allow_http": True},
    }
    assert choice.credentials()["access_key_id"] == "k"
    anon = choose_transport("s3://bucket/x", {"anon": True, "region_name": "eu-west-1"})
    assert anon.config is not None and anon.config["skip_signature"] is True
    assert anon.credentials is None
    # Options botocore cannot resolve, or that add headers obstore would not send: s3fs.
    assert choose_transport("s3://bucket/x", {"profile": "no-such-profile"}).config is None
    paying = choose_transport("s3://bucket/x", {**options, "requester_pays": True})
    assert paying.config is None and "x-amz-request-payer" in paying.reason


def test_transport_is_auto_by_default(s3, monkeypatch):
    url = _put(s3, "a.bin", DATA)
    shardcat.config.set(s3_transport=None)
    # The fixture's options carry keys, an endpoint and a region: obstore reads as s3fs would.
    assert isinstance(open_source(url, s3["storage_options"]), ObstoreSource)
    shardcat.config.set(s3_transport="fsspec")
    assert isinstance(open_source(url, s3["storage_options"]), FsspecSource)
    shardcat.config.set(s3_transport="obstore")
    assert isinstance(open_source(url, s3["storage_options"]), ObstoreSource)
    unmapped = {**s3["storage_options"], "requester_pays": True}
    assert isinstance(open_source(url, unmapped), FsspecSource)
    shardcat.config.set(s3_transport="rust")
    with pytest.raises(StorageError, match="expected 'auto', 'obstore' or 'fsspec'"):
        open_source(url, s3["storage_options"])


def test_reads_and_ranges_past_the_end(s3, obstore_on):
    url = _put(s3, "a.bin", DATA)
    src = open_source(url, s3["storage_options"])
    assert isinstance(src, ObstoreSource)
    n = len(DATA)
    assert src.size() == n
    assert src.read(10, 20) == DATA[10:20]
    assert src.read(n - 5, n + 100) == DATA[-5:]  # fewer bytes where the file ends
    assert src.read(n, n + 10) == b""
    assert src.read(n + 50, n + 60) == b""
    assert src.read_suffix(7) == DATA[-7:]
    assert src.read_suffix(n + 100) == DATA
    got = src.read_many([0, 100, n - 3, n + 1], [4, 200, n + 10, n + 9])
    assert [bytes(v) for v in got] == [DATA[:4], DATA[100:200], DATA[-3:], b""]
    with src.open_stream(1000) as f:
        assert f.read(24) == DATA[1000:1024]


def test_catalog_point_batch_and_stream_through_obstore(s3, obstore_on, sqlite_url, monkeypatch):
    opts = s3["storage_options"]
    url = f"{s3['url']}/ds/train-000000.shard"
    with shardcat.ShardWriter(url, storage_options=opts) as w:
        for i in range(200):
            w.add(f"k/{i:04d}", {"bin": bytes([i % 256]) * (3000 + i)})
    info = w.close()
    calls: list[str] = []
    real_read, real_many = ObstoreSource.read, ObstoreSource.read_many
    real_buffer = ObstoreSource.read_buffer

    def read(self: ObstoreSource, start: int, end: int) -> bytes:
        calls.append("read")
        return real_read(self, start, end)

    def read_many(self: ObstoreSource, starts: Any, ends: Any) -> list[memoryview]:
        calls.append("read_many")
        return real_many(self, starts, ends)

    def read_buffer(self: ObstoreSource, start: int, end: int) -> memoryview:
        calls.append("read_buffer")
        return real_buffer(self, start, end)

    ObstoreSource.read, ObstoreSource.read_many = read, read_many  # type: ignore[method-assign]
    ObstoreSource.read_buffer = read_buffer  # type: ignore[method-assign]
    fanned: list[int] = []
    real_across = fanout.read_across

    def across(jobs: Any, failed: Any) -> Any:
        fanned.append(len(jobs))
        return real_across(jobs, failed)

    monkeypatch.setattr(cache_module, "read_across", across)
    try:
        with Catalog(sqlite_url, storage_options=opts) as cat:
            cat.create_dataset("train", f"{s3['url']}/ds")
            cat.register_shard("train", info)
            assert bytes(cat.get("train", "k/0007")["bin"].data) == bytes([7]) * 3007
            assert "read" in calls
            keys = [f"k/{i:04d}" for i in (150, 3, 77, 199)]
            got = [(r.key, bytes(r["bin"].data)) for r in cat.get_many("train", keys)]
            assert got == [(k, bytes([int(k[2:])]) * (3000 + int(k[2:]))) for k in keys]
            # A batch's ranges go out through obstore's async reads, all shards at once
            # (storage/fanout.py): no per-file call, none through s3fs.
            assert "read_many" not in calls and fanned, calls
        calls.clear()
        streamed = [
            (r.key, len(r["bin"].data)) for r in shardcat.iter_shards([url], storage_options=opts)
        ]
        assert streamed == [(f"k/{i:04d}", 3000 + i) for i in range(200)]
        # The read-ahead's chunks, as views of obstore's buffers (no copy).
        assert calls and set(calls) == {"read_buffer"}
    finally:
        ObstoreSource.read, ObstoreSource.read_many = real_read, real_many  # type: ignore[method-assign]
        ObstoreSource.read_buffer = real_buffer  # type: ignore[method-assign]


def test_missing_object_and_missing_bucket(s3, obstore_on):
    opts = s3["storage_options"]
    with SourceCache(opts) as cache:
        with pytest.raises(ShardNotFoundError) as err:
            cache.read(f"{s3['url']}/gone.shard", 0, 10)
        assert not isinstance(err.value, BucketNotFoundError)
        assert err.value.path == f"{s3['url']}/gone.shard"
        bucket = f"no-such-bucket-{os.getpid()}"
        with pytest.raises(BucketNotFoundError) as err2:
            cache.read(f"s3://{bucket}/x.shard", 0, 10)
        assert err2.value.bucket == bucket


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_store_gone_is_unreachable(obstore_on):
    port = _closed_port()
    options = {
        "key": "k",
        "secret": "s",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
    }
    src = open_source("s3://bucket/x.shard", options)
    assert isinstance(src, ObstoreSource)
    with pytest.raises(StorageUnreachableError) as err:
        src.read(0, 10)
    assert str(err.value).startswith(f"cannot reach http://127.0.0.1:{port}/ (connection refused)")
    assert isinstance(err.value, ConnectionError)


def test_denied_read_is_a_permission_error(obstore_on):
    from _servers import iam_world

    with iam_world("deny-obs", b"abc") as (endpoint, key, secret):
        options = {
            "key": key,
            "secret": secret,
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        }
        src = open_source("s3://deny-obs/x.shard", options)
        assert isinstance(src, ObstoreSource)
        with pytest.raises(StoragePermissionError) as err:
            src.read(0, 3)
        assert "access denied" in str(err.value)
        assert secret not in str(err.value)
