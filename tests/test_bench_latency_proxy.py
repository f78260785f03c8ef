"""The benchmarks' latency proxy (benchmarks/latency_proxy.py) in front of a real moto server.

s3fs reads through it must get the profile's first-byte latency and be held
to its bandwidth per connection, the counts must be right, and the loopback
profile must add next to nothing. Timing assertions are banned elsewhere in
the suite; here the timings are the tool's own delays, so the LOWER bounds
(at least the latency, at least size / bandwidth) are strict and the upper
bounds are generous enough for a loaded machine. Every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a package of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

from benchmarks.latency_proxy import (  # noqa: E402
    BURST,
    PROFILES,
    LatencyProxy,
    Profile,
    ProxyProcess,
    parse_target,
    profile,
)
from benchmarks.moto_server import MotoServer  # noqa: E402

from _servers import ranged_http_server  # noqa: E402

SMALL = bytes(range(256)) * 16  # 4 KiB
BIG = bytes(range(256)) * (24 << 12)  # 24 MiB
SLACK = 2.0  # seconds of generous upper bound: only catches a proxy that never answers on time


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    with MotoServer("process") as server:
        fs = s3fs.S3FileSystem(**server.storage_options())
        fs.pipe_file("bench/small.bin", SMALL)
        fs.pipe_file("bench/big.bin", BIG)
        yield server


def _fs(server: MotoServer, proxy: LatencyProxy) -> Any:
    opts = server.storage_options()
    opts["client_kwargs"] = dict(opts["client_kwargs"], endpoint_url=proxy.endpoint)
    # A fresh client: s3fs caches instances by their options, connections included.
    return s3fs.S3FileSystem(skip_instance_cache=True, **opts)


def _median_get(fs: Any, n: int = 9) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        assert fs.cat_file("bench/small.bin", start=100, end=1100) == SMALL[100:1100]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


@pytest.mark.parametrize("name", ["same-region", "cross-region"])
def test_each_small_get_waits_the_profiles_first_byte_latency_and_is_counted(moto, name):
    prof = PROFILES[name]
    with LatencyProxy(moto.endpoint, name) as proxy:
        fs = _fs(moto, proxy)
        fs.cat_file("bench/small.bin", start=0, end=10)  # the connection, outside the count
        before, gets0 = proxy.snapshot(), moto.gets()
        median = _median_get(fs)
        diff = proxy.snapshot() - before
    assert prof.latency <= median < prof.latency + SLACK
    # Nine GETs: nine requests through the proxy, as moto saw. (moto's werkzeug server
    # answers "Connection: close", so each came on a connection of its own.)
    assert diff.requests == moto.gets() - gets0 == 9
    assert 1 <= diff.connections <= 9
    # Each answer carried the 1,000 bytes asked for, plus its headers (and no more than that).
    assert 9 * 1000 < diff.bytes_down < 9 * (1000 + 2000)
    assert diff.bytes_up > 0


def test_requests_on_a_kept_alive_connection_each_wait_the_latency(tmp_path):
    # moto closes every connection; a server that keeps them alive (HTTP/1.1) shows the
    # proxy tells requests apart on one connection.
    (tmp_path / "f.bin").write_bytes(SMALL)
    with ranged_http_server(tmp_path) as url, LatencyProxy(url, "same-region") as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        try:
            times = []
            for i in range(5):
                t = time.perf_counter()
                conn.request("GET", "/f.bin", headers={"Range": f"bytes={i}-{i + 99}"})
                response = conn.getresponse()
                assert response.read() == SMALL[i : i + 100]
                times.append(time.perf_counter() - t)
        finally:
            conn.close()
        counts = proxy.snapshot()
    assert min(times) >= PROFILES["same-region"].latency
    assert statistics.median(times) < PROFILES["same-region"].latency + SLACK
    assert (counts.connections, counts.requests) == (1, 5)


def test_a_big_get_is_held_to_the_bandwidth_of_its_connection(moto):
    prof = Profile("test", latency=0.0, bandwidth=40e6, models="a 40 MB/s link")
    with LatencyProxy(moto.endpoint, prof) as proxy:
        fs = _fs(moto, proxy)
        fs.cat_file("bench/small.bin", start=0, end=10)
        before, sent0 = proxy.snapshot(), moto.bytes_sent()
        t = time.perf_counter()
        assert fs.cat_file("bench/big.bin") == BIG
        took = time.perf_counter() - t
        diff = proxy.snapshot() - before
    # The bucket lets BURST bytes go at once, then the rate: never faster than that.
    assert took >= (len(BIG) - BURST) / prof.bandwidth  # 0.63 s
    assert took < len(BIG) / prof.bandwidth + SLACK + 5  # a loaded machine's moto is slow too
    # Every byte moto sent reached the client through the proxy, headers on top.
    assert moto.bytes_sent() - sent0 == len(BIG)
    assert len(BIG) < diff.bytes_down < len(BIG) + 8192


def test_concurrent_gets_each_get_a_connection_of_their_own_held_to_the_rate(moto):
    with LatencyProxy(moto.endpoint, "same-region") as proxy:
        fs = _fs(moto, proxy)
        half = len(BIG) // 2
        before = proxy.snapshot()
        t = time.perf_counter()
        got = fs.cat_ranges(["bench/big.bin"] * 2, [0, half], [half, len(BIG)])
        took = time.perf_counter() - t
        diff = proxy.snapshot() - before
    assert b"".join(got) == BIG
    bandwidth = PROFILES["same-region"].bandwidth
    assert bandwidth is not None
    assert took >= PROFILES["same-region"].latency + (half - BURST) / bandwidth
    assert diff.connections == 2 and diff.requests == 2


def test_the_loopback_profile_adds_next_to_nothing(moto):
    direct = s3fs.S3FileSystem(skip_instance_cache=True, **moto.storage_options())
    direct.cat_file("bench/small.bin", start=0, end=10)
    with LatencyProxy(moto.endpoint, "loopback") as proxy:
        fs = _fs(moto, proxy)
        fs.cat_file("bench/small.bin", start=0, end=10)
        before = proxy.snapshot()
        through = min(_median_get(fs), _median_get(fs))
        assert (proxy.snapshot() - before).requests == 18
        assert fs.cat_file("bench/big.bin") == BIG  # unlimited: no bucket to hold it
    # Only a proxy that holds responses back fails this: what the proxy itself costs per
    # request is a benchmark's figure (bench_s3_read.py --profile loopback), not a test's.
    alone = min(_median_get(direct), _median_get(direct))
    assert through < alone + SLACK


def test_the_proxy_stops_closes_its_port_and_refuses_anything_but_loopback(moto):
    proxy = LatencyProxy(moto.endpoint, "loopback")
    port = proxy.port
    proxy.stop()
    proxy.stop()  # idempotent
    assert not proxy.running
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with pytest.raises(ValueError, match=r"127\.0\.0\.1 only"):
        parse_target("10.0.0.1:9000")
    with pytest.raises(ValueError, match=r"expected 127\.0\.0\.1:PORT"):
        parse_target("127.0.0.1")
    with pytest.raises(ValueError, match=r"'moon'.*loopback, same-region, cross-region"):
        profile("moon")
    assert profile("same-region").describe() == "same-region (20 ms, 90 MB/s per connection)"


def test_a_server_that_is_down_closes_the_clients_connection():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with LatencyProxy(f"127.0.0.1:{dead}", "same-region") as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as c:
            c.settimeout(10)
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert c.recv(100) == b""  # closed, not hung
        assert proxy.counts.connections == 0


def test_the_command_line_proxy_says_its_port_and_serves(moto):
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "latency_proxy.py"),
            "--target",
            moto.endpoint,
            "--profile",
            "same-region",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        said = json.loads(proc.stdout.readline())
        assert said["profile"] == "same-region (20 ms, 90 MB/s per connection)"
        opts = moto.storage_options()
        opts["client_kwargs"] = dict(
            opts["client_kwargs"], endpoint_url=f"http://127.0.0.1:{said['port']}"
        )
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **opts)
        t = time.perf_counter()
        assert fs.cat_file("bench/small.bin", start=5, end=50) == SMALL[5:50]
        assert time.perf_counter() - t >= 0.020
    finally:
        proc.send_signal(2)  # Ctrl-C: it stops and prints its counts
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts["requests"] >= 1 and counts["bytes_down"] > 45


def test_a_bad_target_on_the_command_line_is_a_clear_error():
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "latency_proxy.py"),
            "--target",
            "example.com:80",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode != 0
    assert "127.0.0.1 only" in out.stderr


def test_each_response_is_kept_with_its_span_and_bytes(moto):
    """What the peers harness counts streaming connections from: concurrent GETs overlap."""
    from benchmarks.latency_proxy import Response, peak_concurrency

    with LatencyProxy(moto.endpoint, "same-region") as proxy:
        fs = _fs(moto, proxy)
        fs.cat_file("bench/small.bin", start=0, end=10)
        since = time.monotonic()
        half = len(BIG) // 2
        fs.cat_ranges(["bench/big.bin"] * 2, [0, half], [half, len(BIG)])
        big = [r for r in proxy.responses(since) if r.nbytes >= 1 << 20]
    assert len(big) == 2 and all(half < r.nbytes < half + 8192 for r in big)
    assert all(r.end - r.start >= PROFILES["same-region"].latency for r in big)
    assert peak_concurrency(big) == 2
    # Back to back is not at once.
    assert peak_concurrency([Response(0.0, 1.0, 1), Response(1.0, 2.0, 1)]) == 1
    assert peak_concurrency([]) == 0


def test_the_proxy_in_a_process_of_its_own_counts_and_keeps_spans_as_on_a_thread(moto):
    # The benchmarks' default: the proxy's pacing does not share the client's GIL.
    with ProxyProcess(moto.endpoint, "same-region") as proxy:
        assert proxy.running and proxy.profile is PROFILES["same-region"]
        fs = _fs(moto, proxy)  # type: ignore[arg-type]
        fs.cat_file("bench/small.bin", start=0, end=10)
        before, since = proxy.snapshot(), time.monotonic()
        assert fs.cat_ranges(["bench/small.bin"] * 3, [0, 100, 200], [10, 110, 210]) == [
            SMALL[0:10],
            SMALL[100:110],
            SMALL[200:210],
        ]
        diff = proxy.snapshot() - before
        spans = proxy.responses(since)
    assert not proxy.running
    assert diff.requests == 3 and diff.bytes_down > 30
    assert len(spans) == 3
    # The other process's monotonic clock is this one's: each span starts after `since`
    # and lasts at least the latency.
    assert all(
        r.start >= since and r.end - r.start >= PROFILES["same-region"].latency for r in spans
    )
    with pytest.raises(ValueError, match="named profile"):
        ProxyProcess(moto.endpoint, Profile("x", 0.1, None, "not named"))
