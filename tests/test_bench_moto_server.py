"""The benchmarks' moto server (benchmarks/moto_server.py), in its own process and in this one.

It must serve ranges, count what it sent where the client can read it, stop
when asked (or when its client goes away) and fail start-up with a clear
error. Every wait is bounded (the module's start and stop timeouts).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a package of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")

from benchmarks.moto_server import STOP_TIMEOUT, MotoServer, MotoServerError  # noqa: E402

BLOB = bytes(range(256)) * 4096  # 1 MiB


def _refuses(endpoint: str) -> bool:
    host, port = endpoint.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError:
        return True
    return False


@pytest.mark.parametrize("mode", ["process", "in-process"])
def test_serves_ranges_counts_what_it_sent_and_stops(mode):
    server = MotoServer(mode)
    try:
        assert server.running and server.endpoint.startswith("http://127.0.0.1:")
        fs = s3fs.S3FileSystem(**server.storage_options())
        fs.pipe_file("bench/blob.bin", BLOB)
        b0, g0 = server.bytes_sent(), server.gets()
        assert fs.cat_file("bench/blob.bin", start=1000, end=6000) == BLOB[1000:6000]
        # One GET, and the server sent the range, not the object.
        assert (server.bytes_sent() - b0, server.gets() - g0) == (5000, 1)
        assert fs.cat_file("bench/blob.bin") == BLOB
        assert server.bytes_sent() - b0 == 5000 + len(BLOB)
    finally:
        server.stop()
    server.stop()  # idempotent
    assert not server.running and _refuses(server.endpoint)
    if mode == "process":
        assert server.exitcode == 0  # it stopped on its own, not killed
    assert server.bytes_sent() >= 5000 + len(BLOB)  # the counters outlive the server


def test_the_server_process_stops_when_its_client_goes_away():
    server = MotoServer("process", bucket=None)
    proc = server._proc
    assert proc is not None and proc.stdin is not None
    proc.stdin.close()  # what the kernel does when the client process dies
    assert proc.wait(STOP_TIMEOUT) == 0
    server.stop()
    assert _refuses(server.endpoint)


def test_stock_moto_still_answers_ranges_correctly():
    with MotoServer("process", ranges=False) as server:
        fs = s3fs.S3FileSystem(**server.storage_options())
        fs.pipe_file("bench/blob.bin", BLOB)
        b0 = server.bytes_sent()
        assert fs.cat_file("bench/blob.bin", start=7, end=4103) == BLOB[7:4103]
        assert server.bytes_sent() - b0 == 4096
    assert not server.running


def test_a_server_that_does_not_start_in_time_is_ended_with_a_clear_error():
    with pytest.raises(MotoServerError, match=r"did not serve within 0 s"):
        MotoServer("process", start_timeout=0.001)


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="'threads'"):
        MotoServer("threads")
