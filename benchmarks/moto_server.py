"""S3 for the benchmarks: a moto server on 127.0.0.1 that serves ranged GETs by seek + read.

Stock moto reads (and copies) the whole object to answer a ranged GET, which
makes every ranged read cost as much as the whole shard;
``serve_ranges_properly`` makes it read only the range. Every GET the server
answers is counted server side (requests and body bytes, after moto has cut
the body to the requested range), so "bytes fetched" is measured alike for
every client.

``MotoServer(mode="process")`` (the default) runs the server in its own
process (``python -m benchmarks.moto_server``), so its request handling does
not share the GIL with the client being measured, as with a real S3. The
counters live in a small memory-mapped file both processes map: reading them
is a memory read, not a request. ``mode="in-process"`` runs it on threads of
this process, as the benchmarks did before (its Python code then competes
with Python clients for the GIL; clients that release it, such as Lance's
Rust one, are less affected).

The server process is started once and stops when ``stop()`` (idempotent, also
run at interpreter exit) closes its stdin, or when this process dies (its
stdin closes then too). It ignores Ctrl-C: the benchmark's ``finally``
blocks stop it. A plain subprocess rather than ``multiprocessing``: spawn
would re-run the calling script's top level in the server.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import json
import logging
import mmap
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

MODES = ("process", "in-process")
START_TIMEOUT = 60.0  # seconds: the server process imports moto afresh, slow on a loaded machine
STOP_TIMEOUT = 10.0
QUIET_LOGGERS = ("werkzeug", "moto", "botocore", "urllib3")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_Counts = ctypes.c_uint64 * 2  # [body bytes, requests] of the GETs answered


class MotoServerError(RuntimeError):
    """The moto server did not start (or died); the message says why and what to check."""


# --- moto, serving ranges by seek + read ------------------------------------


class _LazyValue:
    """An S3 object's bytes, read only where sliced (from moto's spooled buffer)."""

    def __init__(self, key: Any) -> None:
        self.key = key
        self.size = int(key.size)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __getitem__(self, item: slice) -> bytes:
        start, stop, _ = item.indices(self.size)
        with self.key.lock:
            self.key._value_buffer.seek(start)
            return bytes(self.key._value_buffer.read(max(0, stop - start)))


def serve_ranges_properly() -> None:
    """Make moto (in this process) answer a ranged GET by reading only the range.

    Stock moto reads (and copies) the whole object for every ranged GET: 39 ms
    for 5 KiB of a 64 MiB object. Here ``get_object`` hands the range
    handler a lazy value when the request has a single byte range.
    """
    from moto.s3.models import FakeKey
    from moto.s3.responses import S3Response

    if getattr(S3Response, "_shardcat_ranges", False):
        return
    state = threading.local()
    value = FakeKey.value

    def value_get(key: Any) -> Any:
        return _LazyValue(key) if getattr(state, "lazy", False) else value.fget(key)

    FakeKey.value = property(value_get, value.fset)  # type: ignore[method-assign,assignment]
    get_object = S3Response.get_object
    handle_range = S3Response._handle_range_header

    def lazy_get_object(self: Any) -> Any:
        rng = self.headers.get("range") or ""
        state.lazy = (
            rng.startswith("bytes=") and "," not in rng and not self._get_int_param("partNumber")
        )
        try:
            return get_object(self)
        finally:
            state.lazy = False

    def range_header(self: Any, request: Any, headers: Any, content: Any) -> Any:
        status, headers, body = handle_range(self, request, headers, content)
        if isinstance(body, _LazyValue):  # moto fell back to a whole-object answer
            body = body[0 : len(body)]
        return status, headers, body

    S3Response.get_object = lazy_get_object  # type: ignore[method-assign]
    S3Response._handle_range_header = range_header  # type: ignore[method-assign]
    S3Response._shardcat_ranges = True  # type: ignore[attr-defined]


# --- counting GETs, server side ---------------------------------------------

# The counters moto's patched handler adds to; in the server process they are
# mapped from the file the client reads.
_counts: Any = _Counts()
_count_lock = threading.Lock()


def _count_gets() -> None:
    """Count every GET's body bytes and requests into ``_counts`` (moto in this process)."""
    from moto.s3.responses import S3Response

    if getattr(S3Response, "_shardcat_counted", False):
        return
    key_response = S3Response.key_response

    def counted(self: Any, request: Any, full_url: str, headers: Any) -> Any:
        status, out_headers, body = key_response(self, request, full_url, headers)
        if request.method == "GET":
            with _count_lock:
                _counts[0] += len(body) if body is not None else 0
                _counts[1] += 1
        return status, out_headers, body

    S3Response.key_response = counted  # type: ignore[method-assign]
    S3Response._shardcat_counted = True  # type: ignore[attr-defined]


def _start_threaded(ranges: bool) -> Any:
    """Patch moto in this process and start its threaded server on a free port."""
    from moto.server import ThreadedMotoServer

    if ranges:
        serve_ranges_properly()
    _count_gets()
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    return server


def _map_counts(path: str) -> tuple[mmap.mmap, Any]:
    """The counters in the file at ``path`` (16 bytes), mapped shared."""
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), ctypes.sizeof(_Counts))
    return mm, _Counts.from_buffer(mm)


def serve(argv: list[str] | None = None) -> None:
    """The server process: say the port on stdout, serve until stdin closes."""
    global _counts
    parser = argparse.ArgumentParser(
        description="moto S3 for the benchmarks (started by MotoServer)"
    )
    parser.add_argument("--counts", required=True, help="file of the shared GET counters")
    parser.add_argument("--stock-moto", action="store_true")
    args = parser.parse_args(argv)
    # Ctrl-C reaches the whole process group; the client stops us from its finally blocks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = None
    try:
        _mm, _counts = _map_counts(args.counts)
        server = _start_threaded(ranges=not args.stock_moto)
        print(json.dumps({"port": server.get_host_and_port()[1]}), flush=True)
        sys.stdin.buffer.read()  # returns at EOF: stop(), or the client process has gone
    except BaseException:
        with contextlib.suppress(OSError):
            print(json.dumps({"error": traceback.format_exc()}), flush=True)
    finally:
        if server is not None:
            server.stop()


class MotoServer:
    """A moto S3 server on 127.0.0.1 (a free port) with one bucket, in its own process or this one.

    Parameters
    ----------
    mode
        ``"process"`` (its own process) or ``"in-process"`` (threads of this process).
    ranges
        Serve ranged GETs by seek + read (``False``: stock moto, whole object per ranged GET).
    bucket
        Created at start; ``None`` creates none.
    start_timeout
        Seconds to wait for the server process to serve.

    Raises
    ------
    MotoServerError
        The server process did not serve within ``start_timeout`` or exited first.
    ValueError
        ``mode`` is not one of ``MODES``.
    """

    def __init__(
        self,
        mode: str = "process",
        *,
        ranges: bool = True,
        bucket: str | None = "bench",
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"moto mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.ranges = ranges
        self._server: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._mm: mmap.mmap | None = None
        self.exitcode: int | None = None  # the server process's, once stopped
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
        if mode == "in-process":
            self._server = _start_threaded(ranges)
            self._counts = _counts
            port = self._server.get_host_and_port()[1]
        else:
            port = self._spawn(start_timeout)
        atexit.register(self.stop)
        self.endpoint = f"http://127.0.0.1:{port}"
        if bucket is not None:
            try:
                self._client().create_bucket(Bucket=bucket)
            except BaseException:
                self.stop()
                raise

    def _spawn(self, timeout: float) -> int:
        fd, path = tempfile.mkstemp(
            prefix="shardcat-moto-counts-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None
        )
        try:
            os.ftruncate(fd, ctypes.sizeof(_Counts))
            os.close(fd)
            self._mm, self._counts = _map_counts(path)
            path_dirs = [REPO, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(path_dirs))
            cmd = [sys.executable, "-m", "benchmarks.moto_server", "--counts", path]
            self._proc = subprocess.Popen(
                [*cmd, *([] if self.ranges else ["--stock-moto"])],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                cwd=REPO,
            )
            return self._await_port(self._proc, timeout)
        finally:
            os.unlink(path)  # both processes have it mapped (or the start failed)

    def _await_port(self, proc: subprocess.Popen[bytes], timeout: float) -> int:
        """The port the server process prints once it serves; bounded by ``timeout``."""
        if proc.stdout is None:
            raise MotoServerError("the moto server process has no stdout to say its port on")
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 0.5))
            if ready:
                line = proc.stdout.readline()
                said = json.loads(line) if line.strip() else {}
                if "port" in said:
                    return int(said["port"])
                self._kill()
                raise MotoServerError(
                    "the moto server process failed to start (exit code"
                    f" {self.exitcode}): {said.get('error', 'it said nothing')}"
                )
            if proc.poll() is not None:
                self._kill()
                raise MotoServerError(
                    f"the moto server process exited with code {self.exitcode} before serving"
                    " (its error is above); --moto in-process runs it in this process"
                )
        self._kill()
        raise MotoServerError(
            f"the moto server process did not serve within {timeout:.0f} s; is the machine"
            " overloaded, or does `python -c 'import moto.server'` hang?"
        )

    def _kill(self) -> None:
        """End a server process that failed to start: it may be anywhere in its start-up."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.kill()
        proc.wait(STOP_TIMEOUT)
        self._close_pipes(proc)
        self.exitcode = proc.returncode

    @staticmethod
    def _close_pipes(proc: subprocess.Popen[bytes]) -> None:
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def _client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def storage_options(self) -> dict[str, Any]:
        """fsspec/s3fs options that reach this server."""
        return {
            "key": "testing",
            "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
            "use_listings_cache": False,
        }

    def bytes_sent(self) -> int:
        """Body bytes of every GET the server answered so far (a memory read, not a request)."""
        return int(self._counts[0])

    def gets(self) -> int:
        """GET requests the server answered so far."""
        return int(self._counts[1])

    @property
    def running(self) -> bool:
        if self.mode == "in-process":
            return self._server is not None
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """Stop the server (idempotent); a server process that does not exit in time is killed."""
        atexit.unregister(self.stop)
        if self._server is not None:
            server, self._server = self._server, None
            server.stop()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._close_pipes(proc)  # its stdin's EOF tells it to stop
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
        self.exitcode = proc.returncode

    def __enter__(self) -> MotoServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    serve()
