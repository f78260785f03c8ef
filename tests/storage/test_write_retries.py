"""Uploads ride out a store that goes away for a few seconds, and give up, typed, at the deadline.

The writes' side of tests/storage/test_read_retries.py, with its servers: a
real moto server on 127.0.0.1 stopped and started again on the same port
(``RestartableMoto``), one that counts the requests it answers
(``counting_moto``) and a proxy that lets a request through and loses its
answer (``OutageProxy.lose_answers``). botocore's own retries are off, so
what rides an outage out is shardcat's (storage/retry.py). Attempts are
counted (requests the server saw, the retry log's records, answers lost),
never timed; each wait is bounded.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import test_read_retries as reads
from test_read_retries import RETRY_LOG, _options, _retries

import shardcat
from _servers import OutageProxy, RestartableMoto, counting_moto, moto_client, requests_seen
from _threads import bounded
from shardcat.errors import BucketNotFoundError, ObjectExistsError, StorageUnreachableError
from shardcat.orchestration.gc import delete_dataset, gc
from shardcat.storage import multipart
from shardcat.storage.atomic import open_pending
from shardcat.storage.removal import remove_files
from shardcat.storage.small import put

pytest.importorskip("obstore")


# The read tests' fixtures: the transport (each test runs on both), a moto server of the test's own.
transport = reads.transport
store = reads.store

MIB = 1 << 20


def _body(endpoint: str, bucket: str, key: str) -> bytes:
    return bytes(moto_client(endpoint).get_object(Bucket=bucket, Key=key)["Body"].read())


def _keys(endpoint: str, bucket: str) -> list[str]:
    found = moto_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])
    return sorted(o["Key"] for o in found)


@pytest.fixture
def outage() -> Iterator[Any]:
    """``outage(server)``: stops ``server`` now and starts it again 3 s later (on a timer)."""
    timers: list[threading.Timer] = []

    def start(server: RestartableMoto) -> threading.Timer:
        server.stop()
        timer = threading.Timer(3.0, server.start)
        timers.append(timer)
        timer.start()
        return timer

    yield start
    for timer in timers:
        timer.join(30)


@pytest.mark.parametrize("exclusive", [True, False], ids=["exclusive", "plain"])
def test_a_multipart_sized_write_rides_out_a_store_stopped_for_3s(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    transport: str,
    exclusive: bool,
    outage: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, options = store
    shardcat.config.set(storage_retry_deadline=60)
    data = os.urandom(28 * MIB)  # over two 8 MiB parts: s3fs and obstore (plain) send parts
    pending = open_pending(f"s3://{bucket}/ds/big.shard", options, exclusive=exclusive)
    assert pending.transport == transport
    with caplog.at_level(logging.DEBUG, logger=RETRY_LOG):
        for i in range(0, len(data), 4 * MIB):
            if i == 20 * MIB:  # s3fs has parts in flight; obstore sends all at commit
                outage(server)
            pending.write(data[i : i + 4 * MIB])
        bounded(pending.commit)
    assert _body(server.endpoint, bucket, "ds/big.shard") == data
    if not (transport == "obstore" and not exclusive):
        # obstore's parts are sent again by object_store, which logs nothing of ours; the
        # store was away when the commit began, so that one too met the outage.
        assert _retries(caplog) >= 1, "no request met the outage: the test tests nothing"


def test_a_shard_writer_rides_out_a_store_stopped_for_3s(
    store: tuple[RestartableMoto, str, dict[str, Any]], transport: str, outage: Any
) -> None:
    server, bucket, options = store
    shardcat.config.set(storage_retry_deadline=60)
    url = f"s3://{bucket}/ds/train-000000.shard"
    values = [os.urandom(64 << 10) for _ in range(300)]  # ~19 MiB
    with shardcat.ShardWriter(url, storage_options=options, exclusive=True) as w:
        for i, value in enumerate(values):
            if i == 280:
                outage(server)
            w.add(f"k/{i:04d}", {"bin": value})
        bounded(w.close)
    with shardcat.ShardReader(url, storage_options=options) as r:
        assert [bytes(r.read(i)["bin"].data) for i in range(len(values))] == values


def test_a_small_put_rides_out_a_store_stopped_for_3s(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    transport: str,
    outage: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, options = store
    shardcat.config.set(storage_retry_deadline=60)
    data = b'{"refs": {"main": 3}}'
    outage(server)
    with caplog.at_level(logging.DEBUG, logger=RETRY_LOG):
        assert bounded(lambda: put(f"s3://{bucket}/h/refs.json", data, options, once=True))
    assert _body(server.endpoint, bucket, "h/refs.json") == data
    assert _retries(caplog) >= 1


def test_a_store_that_never_comes_back_fails_a_write_typed_within_the_deadline(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    transport: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, options = store
    # Long enough for one s3fs try (its own retries of a refused connection, ~2 s) to end
    # before the deadline, so that shardcat's policy is seen to retry.
    shardcat.config.set(storage_retry_deadline=6)
    url = f"s3://{bucket}/ds/train-000000.shard"
    w = shardcat.ShardWriter(url, storage_options=options, exclusive=True)
    w.add("k", {"bin": b"x" * 1000})
    server.stop()
    with (
        caplog.at_level(logging.DEBUG, logger=RETRY_LOG),
        pytest.raises(StorageUnreachableError) as err,
    ):
        bounded(w.close)
    message = str(err.value)
    assert message.startswith(f"cannot reach {server.endpoint}/ (connection refused); still")
    assert "check the endpoint and that the store is up and reachable from here" in message
    assert "SHARDCAT_STORAGE_RETRY_DEADLINE, now 6 s" in message
    assert _retries(caplog) >= 1
    told = [r for r in caplog.records if r.name == RETRY_LOG and r.levelno >= logging.INFO]
    assert len(told) == 1  # one record per request (INFO), not one per try
    server.start()
    assert _keys(server.endpoint, bucket) == []  # nothing was published


@pytest.mark.parametrize("size", [1000, 20 * MIB], ids=["put", "parts"])
def test_a_missing_bucket_fails_a_write_at_its_first_try(
    transport: str, size: int, caplog: pytest.LogCaptureFixture
) -> None:
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    shardcat.config.set(storage_retry_deadline=60)  # long: a retry would show in the count
    with counting_moto() as endpoint:
        moto_client(endpoint).create_bucket(Bucket="here")
        pending = open_pending("s3://not-here/x.shard", _options(endpoint), exclusive=False)
        assert pending.transport == transport
        requests_seen(endpoint)  # forget the set-up

        def publish() -> None:
            pending.write(os.urandom(size))  # s3fs starts a multipart upload here
            pending.commit()

        with caplog.at_level(logging.DEBUG, logger=RETRY_LOG), pytest.raises(BucketNotFoundError):
            bounded(publish)
        sent = [r for r in requests_seen(endpoint) if r["path"].startswith("/not-here")]
    assert len(sent) == 1, sent  # one request: no retry of a missing bucket
    assert not [r for r in caplog.records if r.name == RETRY_LOG]
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def lossy() -> Iterator[tuple[RestartableMoto, OutageProxy, str, dict[str, Any]]]:
    """A moto server of its own behind a proxy that can lose answers; a bucket; options."""
    import s3fs

    server = RestartableMoto()
    proxy = OutageProxy(server.port)
    bucket = f"lossy-{uuid.uuid4().hex[:12]}"  # moto's backend outlives the server
    moto_client(server.endpoint).create_bucket(Bucket=bucket)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield server, proxy, bucket, _options(proxy.endpoint)
    finally:
        proxy.close()
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize("size", [1000, 24 * MIB], ids=["put", "parts"])
def test_a_publication_applied_but_unanswered_is_not_a_conflict(
    lossy: tuple[RestartableMoto, OutageProxy, str, dict[str, Any]], transport: str, size: int
) -> None:
    server, proxy, bucket, options = lossy
    shardcat.config.set(storage_retry_deadline=60)
    data = os.urandom(size)
    pending = open_pending(f"s3://{bucket}/x.shard", options, exclusive=True)
    assert pending.transport == transport
    pending.write(data)
    if transport == "fsspec" and size > 2 * multipart.PART_BYTES:
        # Three whole parts, sent as written: the commit sends only the completion.
        pending.file._file._wait(0)  # type: ignore[attr-defined]
    # The publishing request (the PUT, or the completion) is applied; its answer is lost.
    proxy.lose_answers(1)
    bounded(pending.commit)  # the retry is refused ("exists"): the object is ours
    assert proxy.lost == 1, "no answer was lost: the test tests nothing"
    assert _body(server.endpoint, bucket, "x.shard") == data
    head = moto_client(server.endpoint).head_object(Bucket=bucket, Key="x.shard")
    assert set(head["Metadata"]) == {multipart.TOKEN}


def test_another_writers_object_is_still_a_conflict(
    lossy: tuple[RestartableMoto, OutageProxy, str, dict[str, Any]], transport: str
) -> None:
    server, _, bucket, options = lossy
    shardcat.config.set(storage_retry_deadline=60)
    theirs = open_pending(f"s3://{bucket}/x.shard", options, exclusive=True)
    theirs.write(b"theirs")
    theirs.commit()
    pending = open_pending(f"s3://{bucket}/x.shard", options, exclusive=True)
    pending.write(b"ours")
    with pytest.raises(ObjectExistsError):
        bounded(pending.commit)
    assert _body(server.endpoint, bucket, "x.shard") == b"theirs"


# --- deletes: gc and delete of a dataset ---------------------------------------------------


def _shard(url: str, options: dict[str, Any], tag: str) -> Any:
    with shardcat.ShardWriter(url, storage_options=options, exclusive=True) as w:
        for i in range(20):
            w.add(f"{tag}/{i:03d}", {"txt": f"{tag} {i}"})
    return w.close()


@pytest.fixture
def leftovers(
    store: tuple[RestartableMoto, str, dict[str, Any]], tmp_path: Any
) -> Iterator[tuple[Any, str, list[str], list[str]]]:
    """Dataset ``d`` in the bucket: 3 committed shards (and their version's manifest), 2 of an
    aborted job (``deleted`` rows) and an orphan file. Yields ``(catalog, root, committed,
    garbage)``: garbage is what gc removes (the aborted job's shards, then the orphan)."""
    _, bucket, options = store
    root = f"s3://{bucket}/ds"
    cat = shardcat.Catalog(f"sqlite:///{tmp_path / 'c.db'}", storage_options=options, create=True)
    cat.create_dataset("d", root)
    committed = [f"{root}/ok-{n}.shard" for n in range(3)]
    job = cat.begin_job("d")
    for url in committed:
        cat.register_shard("d", _shard(url, options, url), job=job)
    cat.commit_job(job)
    aborted = [f"{root}/bad-{n}.shard" for n in range(2)]
    job = cat.begin_job("d")
    for url in aborted:
        cat.register_shard("d", _shard(url, options, url), job=job)
    cat.abort_job(job)
    orphan = f"{root}/lost-0.shard"
    _shard(orphan, options, "lost")  # written, never registered
    try:
        yield cat, root, committed, [*aborted, orphan]
    finally:
        cat.close()


def _gc(cat: Any) -> Any:
    return gc(cat, "d", grace=dt.timedelta(0))


def test_gc_rides_out_a_store_stopped_for_3s(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    leftovers: tuple[Any, str, list[str], list[str]],
    outage: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, _ = store
    cat, _, committed, garbage = leftovers
    shardcat.config.set(storage_retry_deadline=60)
    outage(server)  # gc's first request meets it
    with caplog.at_level(logging.DEBUG, logger=RETRY_LOG):
        report = bounded(lambda: _gc(cat))
    assert _retries(caplog) >= 1, "no request met the outage: the test tests nothing"
    assert report.errors == []
    assert sorted([*report.deleted_shards, *report.orphans]) == sorted(garbage)
    assert cat.shards("d", state="deleted") == []
    shards = [k for k in _keys(server.endpoint, bucket) if k.endswith(".shard")]
    assert shards == sorted(u.split(f"{bucket}/", 1)[1] for u in committed)


def test_delete_of_a_dataset_rides_out_a_store_stopped_for_3s(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    leftovers: tuple[Any, str, list[str], list[str]],
    outage: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, _ = store
    cat, _, committed, garbage = leftovers
    assert any("/_versions/" in k for k in _keys(server.endpoint, bucket))  # its history
    shardcat.config.set(storage_retry_deadline=60)
    outage(server)
    with caplog.at_level(logging.DEBUG, logger=RETRY_LOG):
        report = bounded(lambda: delete_dataset(cat, "d"))
    assert _retries(caplog) >= 1, "no request met the outage: the test tests nothing"
    assert report.errors == []
    # Every row's file (the orphan has no row: a later gc of the folder would take it).
    assert sorted(report.removed) == sorted([*committed, *garbage[:2]])
    assert [d.name for d in cat.datasets()] == []
    assert _keys(server.endpoint, bucket) == ["ds/lost-0.shard"]


@pytest.mark.parametrize("operation", ["gc", "delete"])
def test_a_store_that_never_comes_back_fails_gc_and_delete_typed_keeping_the_rows(
    store: tuple[RestartableMoto, str, dict[str, Any]],
    leftovers: tuple[Any, str, list[str], list[str]],
    operation: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, bucket, _ = store
    cat, _, _, garbage = leftovers
    before = _keys(server.endpoint, bucket)
    rows = sorted(s.url for s in cat.shards("d", state=None))
    shardcat.config.set(storage_retry_deadline=2)
    run = (lambda: _gc(cat)) if operation == "gc" else (lambda: delete_dataset(cat, "d"))
    server.stop()
    with (
        caplog.at_level(logging.DEBUG, logger=RETRY_LOG),
        pytest.raises(StorageUnreachableError) as err,
    ):
        bounded(run)
    message = str(err.value)
    assert f"run {operation} again" in message and "catalog rows" in message
    assert "SHARDCAT_STORAGE_RETRY_DEADLINE, now 2 s" in message
    # It stopped at the first request that gave up: one deadline, not one per request.
    told = [r for r in caplog.records if r.name == RETRY_LOG and r.levelno >= logging.INFO]
    assert len(told) == 1, [r.message for r in told]
    assert sorted(s.url for s in cat.shards("d", state=None)) == rows  # every row kept
    server.start()
    assert _keys(server.endpoint, bucket) == before
    shardcat.config.set(storage_retry_deadline=60)
    if operation == "gc":  # run again, it finishes the job
        assert sorted([*(r := _gc(cat)).deleted_shards, *r.orphans]) == sorted(garbage)
    else:
        delete_dataset(cat, "d")
        assert [d.name for d in cat.datasets()] == []


def test_a_delete_applied_but_unanswered_is_no_error(
    lossy: tuple[RestartableMoto, OutageProxy, str, dict[str, Any]],
) -> None:
    server, proxy, bucket, options = lossy
    shardcat.config.set(storage_retry_deadline=60)
    urls = [f"s3://{bucket}/ds/s-{n}.shard" for n in range(5)]
    for url in urls[:4]:
        put(url, b"x", options, once=True)
    # The batched delete (DeleteObjects) is applied; its answer is lost.
    proxy.lose_answers(1, request=f"POST /{bucket}?delete".encode())
    result = bounded(lambda: remove_files(urls, options))
    # Sent again (by s3fs within a try, or by ours): a delete may be, and a key gone is no error.
    assert proxy.lost == 1, "no answer was lost: the test tests nothing"
    assert result.failed == {} and result.unreachable is None
    assert sorted(result.removed) == urls[:4] and result.missing == urls[4:]  # missing: no error
    assert _keys(server.endpoint, bucket) == []
