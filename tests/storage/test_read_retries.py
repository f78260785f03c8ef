"""Reads ride out a store that goes away for a few seconds, and give up, typed, at the deadline.

Both S3 transports (obstore, s3fs), against a real moto server on 127.0.0.1
that is stopped (its port refuses, open connections are cut) and started
again on the same port (``RestartableMoto``), a server that never answers
(``silent_store``), and a moto server that counts the requests it answers
(``counting_moto``). botocore's own retries are off (``max_attempts: 1``),
so a store that comes back is ridden out by shardcat's retries
(storage/retry.py), not by the library's. Attempts are counted (requests
the server saw, the retry log's records), never timed; each wait is bounded.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import shardcat
from _servers import RestartableMoto, counting_moto, moto_client, requests_seen, silent_store
from _threads import bounded
from shardcat.errors import (
    BucketNotFoundError,
    ShardNotFoundError,
    StorageError,
    StorageUnreachableError,
)
from shardcat.storage import SourceCache, open_source
from shardcat.storage.retry import RetryPolicy

pytest.importorskip("obstore")

N = 300
RETRY_LOG = "shardcat.storage.retry"


def _options(endpoint: str) -> dict[str, Any]:
    return {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        # botocore's retries off: what rides the outage out is shardcat's.
        "config_kwargs": {"retries": {"max_attempts": 1}},
        "use_listings_cache": False,
    }


@pytest.fixture(params=["obstore", "fsspec"])
def transport(request: pytest.FixtureRequest) -> str:
    shardcat.config.set(s3_transport=request.param)
    return str(request.param)


@pytest.fixture
def store() -> Iterator[tuple[RestartableMoto, str, dict[str, Any]]]:
    """A moto server of this test's own (stopped and restarted by it), one bucket, options."""
    import s3fs

    server = RestartableMoto()
    bucket = f"retry-{uuid.uuid4().hex[:12]}"
    moto_client(server.endpoint).create_bucket(Bucket=bucket)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield server, bucket, _options(server.endpoint)
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()


def _value(i: int) -> bytes:
    return f"record {i} ".encode() * (20 + i % 50)


def _write(url: str, options: dict[str, Any]) -> None:
    with shardcat.ShardWriter(url, storage_options=options) as w:
        for i in range(N):
            w.add(f"k/{i:04d}", {"bin": _value(i)})


def _retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == RETRY_LOG and "failed; next" in r.message)


def test_the_policy_pauses_with_full_jitter_under_an_exponential_ceiling() -> None:
    policy = RetryPolicy(deadline=60, base=0.1, cap=2.0)
    for failures, ceiling in ((1, 0.1), (2, 0.2), (3, 0.4), (5, 1.6), (6, 2.0), (40, 2.0)):
        pauses = [policy.pause(failures) for _ in range(200)]
        assert all(0 <= p <= ceiling for p in pauses)
        assert len(set(pauses)) > 100  # jittered: clients that failed together spread out
    shardcat.config.set(storage_retry_deadline="7.5")
    assert RetryPolicy.from_config().deadline == 7.5
    shardcat.config.set(storage_retry_deadline=None)
    assert RetryPolicy.from_config().deadline == float(
        shardcat.config.defaults()["storage_retry_deadline"]
    )
    shardcat.config.set(storage_retry_deadline="soon")
    with pytest.raises(StorageError, match="SHARDCAT_STORAGE_RETRY_DEADLINE='soon'"):
        RetryPolicy.from_config()


def test_reads_ride_out_a_store_stopped_for_3s_mid_read(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    transport: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, options = store
    url = f"s3://{bucket}/ds/train-000000.shard"
    _write(url, options)
    shardcat.config.set(storage_retry_deadline=60)
    restart = threading.Timer(3.0, server.start)
    got: list[bytes] = []
    try:
        src = open_source(url, options)
        assert src.transport == transport  # type: ignore[attr-defined]
        with caplog.at_level(logging.DEBUG, logger=RETRY_LOG), shardcat.ShardReader(src) as reader:
            for i in range(N):
                if i == 100:  # mid-read: the store goes away, and is back in 3 s
                    server.stop()
                    restart.start()
                got.append(bytes(bounded(lambda i=i: reader.read(i))["bin"].data))
            restart.join(30)
            # A batch (ranged reads of several records) after a second outage.
            server.stop()
            again = threading.Timer(3.0, server.start)
            again.start()
            batch = bounded(lambda: reader.take([5, 150, 299]))
            again.join(30)
    finally:
        restart.cancel()
        restart.join(30)
    assert got == [_value(i) for i in range(N)]
    assert [bytes(r["bin"].data) for r in batch] == [_value(i) for i in (5, 150, 299)]
    assert _retries(caplog) >= 2, "no read met the outage: the test tests nothing"


def test_batches_of_the_source_cache_ride_out_a_restart(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    transport: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Catalog lookups read through a SourceCache: s3fs's batches are one cat_ranges call.
    from shardcat._types import ByteRange

    server, bucket, options = store
    url = f"s3://{bucket}/blob.bin"
    data = bytes(range(256)) * 64
    moto_client(server.endpoint).put_object(Bucket=bucket, Key="blob.bin", Body=data)
    shardcat.config.set(storage_retry_deadline=60)
    with SourceCache(options) as cache, caplog.at_level(logging.DEBUG, logger=RETRY_LOG):
        assert bytes(cache.read(url, 0, 4)) == data[:4]
        server.stop()
        restart = threading.Timer(3.0, server.start)
        restart.start()
        try:
            views = bounded(
                lambda: cache.read_batch(
                    [(url, ByteRange(10, 20)), (url, ByteRange(9000, 9100))], max_gap=0
                )
            )
        finally:
            restart.join(30)
    assert [bytes(v) for v in views] == [data[10:20], data[9000:9100]]
    assert _retries(caplog) >= 1


def test_a_store_that_never_comes_back_fails_typed_within_the_deadline(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    transport: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, options = store
    url = f"s3://{bucket}/ds/train-000000.shard"
    _write(url, options)
    shardcat.config.set(storage_retry_deadline=2)
    with shardcat.ShardReader(url, storage_options=options) as reader:
        assert bytes(reader.read(3)["bin"].data) == _value(3)
        server.stop()
        with (
            caplog.at_level(logging.DEBUG, logger=RETRY_LOG),
            pytest.raises(StorageUnreachableError) as err,
        ):
            bounded(lambda: reader.read(200))
    message = str(err.value)
    assert message.startswith(f"cannot reach {server.endpoint}/ (connection refused); still")
    assert "check the endpoint" in message
    assert "SHARDCAT_STORAGE_RETRY_DEADLINE, now 2 s" in message
    assert err.value.path == url
    told = [r for r in caplog.records if r.name == RETRY_LOG and r.levelno >= logging.INFO]
    assert len(told) == 1  # one record per read (INFO), not one per try


def test_a_hung_store_fails_typed_within_the_deadline_and_says_what_to_check(
    transport: str,
) -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    shardcat.config.set(storage_retry_deadline=2)
    with silent_store() as endpoint:
        src = open_source("s3://bucket/ds/x.shard", _options(endpoint))
        assert src.transport == transport  # type: ignore[attr-defined]
        with pytest.raises(StorageUnreachableError) as err:
            bounded(lambda: src.read(0, 100))
    message = str(err.value)
    assert message.startswith("s3://bucket/ds/x.shard: no answer")
    assert "check the endpoint and that the store is up and reachable from here" in message
    assert "wait longer (SHARDCAT_STORAGE_RETRY_DEADLINE, now 2 s)" in message
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("missing", ["bucket", "object"])
def test_a_permanent_error_fails_at_its_first_try(
    transport: str, missing: str, caplog: pytest.LogCaptureFixture
) -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    shardcat.config.set(storage_retry_deadline=60)  # long: a retry would show in the count
    with counting_moto() as endpoint:
        moto_client(endpoint).create_bucket(Bucket="here")
        bucket = "here" if missing == "object" else "not-here"
        src = open_source(f"s3://{bucket}/x.shard", _options(endpoint))
        assert src.transport == transport  # type: ignore[attr-defined]
        requests_seen(endpoint)  # forget the set-up
        expected = BucketNotFoundError if missing == "bucket" else ShardNotFoundError
        with caplog.at_level(logging.DEBUG, logger=RETRY_LOG), pytest.raises(expected) as err:
            bounded(lambda: src.read(0, 10))
        reads = [r for r in requests_seen(endpoint) if r["path"] == f"/{bucket}/x.shard"]
    assert missing == "bucket" or not isinstance(err.value, BucketNotFoundError)
    assert len(reads) == 1, reads  # one GET: no retry of a missing bucket or object
    assert not [r for r in caplog.records if r.name == RETRY_LOG]
    s3fs.S3FileSystem.clear_instance_cache()
