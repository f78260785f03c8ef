"""Batch reads of many S3 files at once: order, the bound on requests in flight, failures.

A batch's merged reads of many files go out together (obstore: storage/fanout.py;
s3fs: one ``cat_ranges`` over a pool sized to ``remote_in_flight``). Through
the benchmarks' latency proxy (a first-byte latency long enough that requests
overlap whenever the client lets them), the proxy's own record of its
responses says how many were in flight at once: never more than the setting,
and more than one, across files. Failures go through a proxy that cuts
answers (a transient failure: retried) or a file that is not there (a
permanent one: the file's typed error). Counts, never timings; every wait is bounded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The benchmarks are a package of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

s3fs = pytest.importorskip("s3fs")

from benchmarks.latency_proxy import LatencyProxy, Profile, peak_concurrency  # noqa: E402

import shardcat  # noqa: E402
from _servers import OutageProxy, moto_bucket, moto_client  # noqa: E402
from _threads import bounded  # noqa: E402
from shardcat._types import ByteRange  # noqa: E402
from shardcat.errors import ShardNotFoundError  # noqa: E402
from shardcat.storage import SourceCache  # noqa: E402

FILES = 8
SIZE = 64 * 1024
# Long enough that requests the client sends together overlap at the proxy, whatever the load.
SLOW = Profile("slow", 0.15, None, "a long first-byte latency, no bandwidth cap")


def _blob(i: int) -> bytes:
    return bytes((i * 31 + j) % 251 for j in range(SIZE))


@pytest.fixture(scope="module")
def files(s3_endpoint: str) -> tuple[str, str, dict[str, Any]]:
    """``FILES`` objects of ``SIZE`` bytes in a new bucket: the endpoint, the bucket, options."""
    bucket, options = moto_bucket(s3_endpoint, "fanout")
    client = moto_client(s3_endpoint)
    for i in range(FILES):
        client.put_object(Bucket=bucket, Key=f"f{i}", Body=_blob(i))
    return s3_endpoint, bucket, options


@pytest.fixture(params=["obstore", "fsspec"])
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "obstore":
        pytest.importorskip("obstore")
    s3fs.S3FileSystem.clear_instance_cache()
    with shardcat.config.set(s3_transport=request.param):
        yield str(request.param)
    s3fs.S3FileSystem.clear_instance_cache()


def _through(options: dict[str, Any], endpoint: str) -> dict[str, Any]:
    return {**options, "client_kwargs": {**options["client_kwargs"], "endpoint_url": endpoint}}


def _requests(bucket: str) -> list[tuple[str, ByteRange]]:
    """Three ranges per file, far apart (never merged), files interleaved, some backwards."""
    out = []
    for part in (2, 0, 1):
        for i in reversed(range(FILES)) if part == 1 else range(FILES):
            start = part * (SIZE // 3) + i
            out.append((f"s3://{bucket}/f{i}", ByteRange(start, start + 1000 + i)))
    return out


def _expected(requests: list[tuple[str, ByteRange]]) -> list[bytes]:
    return [_blob(int(url.rsplit("f", 1)[1]))[r.start : r.end] for url, r in requests]


@pytest.mark.parametrize("limit", [1, 3])
def test_a_batch_of_many_files_keeps_at_most_the_setting_in_flight_across_files(
    files, transport, limit
):
    endpoint, bucket, options = files
    requests = _requests(bucket)
    # s3fs's retry deadline bounds a whole cat_ranges call: 24 requests one at a time at
    # 150 ms each outlast the suite's 3 s.
    settings = {"remote_in_flight": limit, "storage_retry_deadline": 30}
    with shardcat.config.set(settings), LatencyProxy(endpoint, SLOW) as proxy:
        with SourceCache(_through(options, proxy.endpoint)) as cache:
            for i in range(FILES):  # every file opened, its client set up: not counted
                assert bytes(cache.read(f"s3://{bucket}/f{i}", 0, 10)) == _blob(i)[:10]
            since = time.monotonic()
            views = bounded(lambda: cache.read_batch(requests, max_gap=0))
        responses = proxy.responses(since)
    assert [bytes(v) for v in views] == _expected(requests)  # in the order asked
    assert len(responses) == len(requests)  # ranges far apart: one request each
    peak = peak_concurrency(responses)
    assert peak <= limit
    if limit > 1:
        # The files' requests overlap (each waits 150 ms at the proxy): not one file after another.
        assert peak > 1


def test_s3fs_pools_as_many_connections_as_requests_in_flight(files):
    _, bucket, options = files
    from shardcat.storage import resolve
    from shardcat.storage.sources import in_flight

    with shardcat.config.set(remote_in_flight=7):
        fs, _ = resolve(f"s3://{bucket}/f0", options)
        assert fs.config_kwargs["max_pool_connections"] == 7
        assert in_flight(fs) == 7
        # The options' own pool wins.
        mine = {**options, "config_kwargs": {"max_pool_connections": 3}}
        fs, _ = resolve(f"s3://{bucket}/f0", mine)
        assert in_flight(fs) == 3


def test_read_sorted_reads_the_files_at_once_in_order(files, transport):
    np = pytest.importorskip("numpy")
    endpoint, bucket, options = files
    urls = [f"s3://{bucket}/f{i}" for i in range(FILES)]
    # One range per file: only reading files at once puts two requests in flight.
    file = np.arange(FILES)
    start = 100 + 1000 * file
    end = start + 500
    with shardcat.config.set(remote_in_flight=4), LatencyProxy(endpoint, SLOW) as proxy:
        with SourceCache(_through(options, proxy.endpoint)) as cache:
            since = time.monotonic()
            buffers, merged = bounded(lambda: cache.read_sorted(urls, file, start, end, max_gap=0))
        peak = peak_concurrency(proxy.responses(since))
    assert 1 < peak <= 4
    for k in range(len(start)):
        r = int(merged.read[k])
        at = int(start[k] - merged.start[r])
        got = bytes(memoryview(buffers[r])[at : at + 500])
        assert got == _blob(int(file[k]))[int(start[k]) : int(end[k])]


def test_a_missing_file_fails_the_batch_naming_it(files, transport):
    _, bucket, options = files
    requests = [*_requests(bucket), (f"s3://{bucket}/gone", ByteRange(0, 10))]
    with SourceCache(options) as cache:
        with pytest.raises(ShardNotFoundError) as caught:
            bounded(lambda: cache.read_batch(requests, max_gap=0))
        assert caught.value.path == f"s3://{bucket}/gone"
        # The cache still serves the other files.
        views = bounded(lambda: cache.read_batch(_requests(bucket), max_gap=0))
    assert [bytes(v) for v in views] == _expected(_requests(bucket))


def test_a_range_whose_answer_is_lost_is_read_again(files, transport):
    endpoint, bucket, options = files
    port = int(endpoint.rsplit(":", 1)[1])
    proxy = OutageProxy(port)
    # botocore's own retries off: what reads the range again is shardcat's.
    through = {
        **_through(options, proxy.endpoint),
        "config_kwargs": {"retries": {"max_attempts": 1}},
    }
    requests = _requests(bucket)
    try:
        with shardcat.config.set(storage_retry_deadline=30), SourceCache(through) as cache:
            for i in range(FILES):
                assert bytes(cache.read(f"s3://{bucket}/f{i}", 0, 10)) == _blob(i)[:10]
            proxy.lose_answers(1, f"GET /{bucket}/f3".encode())
            views = bounded(lambda: cache.read_batch(requests, max_gap=0))
    finally:
        proxy.close()
    assert proxy.lost == 1
    assert [bytes(v) for v in views] == _expected(requests)
