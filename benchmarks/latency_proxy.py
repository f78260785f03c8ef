"""A TCP proxy that makes a server on 127.0.0.1 answer like an object store across a network.

moto on loopback answers a GET in a few milliseconds at hundreds of MB/s; a
real object store takes 10-50 ms to the first byte and gives each connection
tens to a hundred MB/s. Put this proxy in front of the benchmarks' moto server
(``benchmarks/moto_server.py``) and every client through it sees:

- **first-byte latency**: the first byte of each response leaves the proxy no
  earlier than ``latency`` after the request's first byte reached it. The
  server's own time to answer is inside that delay, as a real store's is inside
  its time to first byte; a server slower than ``latency`` adds nothing more.
  Requests are told apart simply (HTTP/1.1 keep-alive, no pipelining): each
  time the client sends bytes after the server has answered, a new request
  starts. A ``100 Continue`` exchange therefore counts as a request of its own,
  and pays a latency, as it does on a real network.
- **bandwidth per connection**: a token bucket on each connection's response
  stream (``BURST`` bytes deep, refilled at the profile's rate). Requests
  (uploads) are not capped.

Profiles (:data:`PROFILES`): ``loopback`` (0 ms, unlimited: the proxy's own
cost only), ``same-region`` (20 ms, 90 MB/s per connection: S3 from an
instance in the bucket's region), ``cross-region`` (80 ms, 30 MB/s). It counts
connections, requests and bytes each way (:class:`Counts`), and keeps each
response's span (:class:`Response`: from its request's first byte to its own
last byte) so that a benchmark can tell how many connections a read kept busy
at once (:func:`peak_concurrency`).

It listens on 127.0.0.1 only and forwards to 127.0.0.1 only. In tests it
runs on a thread of the calling process (:class:`LatencyProxy`); in the
benchmarks in a process of its own (:class:`ProxyProcess`, the same
interface), because on a thread its Python callbacks (one per 64 KiB chunk
paced, ~1,400 a second per connection at 90 MB/s) share the GIL with the
client being measured: a Python client (s3fs, shardcat's decoding) then
waits on the proxy's work as it never waits on a real network's. As a program::

    python benchmarks/latency_proxy.py --target 127.0.0.1:PORT --profile same-region [--port 0]

prints ``{"port": N}`` once it listens and serves until Ctrl-C, then prints its counts.
With ``--control`` it serves until its stdin closes and answers one JSON
line per command line read there: ``counts`` (:class:`Counts`) and
``responses SINCE`` (:meth:`LatencyProxy.responses`: ``time.monotonic()``
is the system's monotonic clock, the same in both processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

HOST = "127.0.0.1"
BURST = 64 * 1024
"""Depth of each connection's token bucket (bytes): what a response may send at once."""
CHUNK = 64 * 1024
"""Bytes read from a socket at a time (and the most sent per bucket withdrawal)."""
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


@dataclass(frozen=True)
class Profile:
    """What a network between the client and the store adds.

    ``latency``: seconds from a request's first byte to its response's first
    byte, at least. ``bandwidth``: bytes per second per connection on the
    response stream (``None``: unlimited).
    """

    name: str
    latency: float
    bandwidth: float | None
    models: str

    def describe(self) -> str:
        rate = "unlimited" if self.bandwidth is None else f"{self.bandwidth / 1e6:g} MB/s"
        return f"{self.name} ({self.latency * 1e3:g} ms, {rate} per connection)"


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("loopback", 0.0, None, "moto on 127.0.0.1 as it is (the proxy's own cost only)"),
        Profile(
            "same-region",
            0.020,
            90e6,
            "S3 from an instance in the bucket's region: ~20 ms to the first byte,"
            " ~90 MB/s per connection",
        ),
        Profile(
            "cross-region",
            0.080,
            30e6,
            "S3 in another region (or over a WAN): ~80 ms to the first byte, ~30 MB/s per connection",
        ),
    )
}


def profile(name: str) -> Profile:
    """The profile named ``name``.

    Raises
    ------
    ValueError
        No such profile (the message lists them).
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(
            f"no latency profile {name!r}: expected one of {', '.join(PROFILES)}"
        ) from None


@dataclass
class Counts:
    """What went through the proxy (updated on its loop's thread; read from any)."""

    connections: int = 0
    requests: int = 0
    bytes_up: int = 0  # client -> server (requests, headers included)
    bytes_down: int = 0  # server -> client (responses, headers included)

    def snapshot(self) -> Counts:
        return Counts(self.connections, self.requests, self.bytes_up, self.bytes_down)

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.connections - other.connections,
            self.requests - other.requests,
            self.bytes_up - other.bytes_up,
            self.bytes_down - other.bytes_down,
        )


@dataclass(frozen=True)
class Response:
    """One response as the proxy saw it: ``time.monotonic()`` of its request's first byte
    (``start``) and of its own last byte (``end``), and its bytes (headers included)."""

    start: float
    end: float
    nbytes: int


def peak_concurrency(responses: list[Response]) -> int:
    """The most of ``responses`` in flight at once (a response ending as another starts: not both)."""
    events = sorted([(r.start, 1) for r in responses] + [(r.end, -1) for r in responses])
    peak = now = 0
    for _, step in events:  # at equal times the end (-1) sorts first
        now += step
        peak = max(peak, now)
    return peak


class _Bucket:
    """A token bucket: ``take(n)`` waits until ``n`` bytes may go at ``rate`` bytes/s."""

    def __init__(self, rate: float, depth: int = BURST) -> None:
        self.rate = rate
        self.depth = depth
        self.tokens = float(depth)
        self.stamp = time.monotonic()

    async def take(self, n: int) -> None:
        now = time.monotonic()
        self.tokens = min(self.depth, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        if self.tokens < 0:
            # In debt: wait until the rate has paid it back (the bucket is empty then).
            await asyncio.sleep(-self.tokens / self.rate)


class _Connection:
    """One client connection and its upstream one: the request/response state between the pumps."""

    def __init__(self, prof: Profile, counts: Counts, done: list[Response]) -> None:
        self.profile = prof
        self.counts = counts
        self.answered = True  # before the first request, as after a response
        self.request_at = 0.0
        self.last_byte_at = 0.0
        self.response_bytes = 0
        self.done = done  # the proxy's finished responses
        self.bucket = None if prof.bandwidth is None else _Bucket(prof.bandwidth)

    def current(self) -> Response | None:
        """The response this connection sent last (or is sending), if it sent any byte."""
        if not self.response_bytes:
            return None
        return Response(self.request_at, self.last_byte_at, self.response_bytes)

    def finish(self) -> None:
        """Its response is complete (the next request began, or the connection ended)."""
        if (r := self.current()) is not None:
            self.done.append(r)
        self.response_bytes = 0

    async def upstream(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Client -> server: each send after an answer starts a request."""
        while data := await src.read(CHUNK):
            if self.answered:
                self.finish()
                self.answered = False
                self.request_at = time.monotonic()
                self.counts.requests += 1
            self.counts.bytes_up += len(data)
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()

    async def downstream(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Server -> client: the first byte after a request waits out the latency; all is paced."""
        while data := await src.read(CHUNK):
            if not self.answered:
                self.answered = True
                wait = self.request_at + self.profile.latency - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
            if self.bucket is not None:
                await self.bucket.take(len(data))
            self.counts.bytes_down += len(data)
            self.response_bytes += len(data)
            self.last_byte_at = time.monotonic()
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()


class LatencyProxy:
    """The proxy on a thread of this process, listening on 127.0.0.1 (``port=0``: a free port).

    Parameters
    ----------
    target
        ``"127.0.0.1:PORT"`` or ``"http://127.0.0.1:PORT"``: the server to forward to.
    prof
        A :class:`Profile` or a profile's name.
    port
        Where to listen; 0 picks a free port (``self.port``, ``self.endpoint``).

    Raises
    ------
    ValueError
        The target is not on 127.0.0.1 (or ``localhost``), or the profile is unknown.
    RuntimeError
        The proxy did not listen within ``START_TIMEOUT`` seconds (the cause is chained).
    """

    def __init__(self, target: str, prof: Profile | str = "loopback", port: int = 0) -> None:
        self.target_host, self.target_port = parse_target(target)
        self.profile = profile(prof) if isinstance(prof, str) else prof
        self.counts = Counts()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._done: list[Response] = []
        self._open: set[_Connection] = set()
        self.port = port
        self._thread = threading.Thread(target=self._run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            raise RuntimeError(f"the latency proxy did not listen within {START_TIMEOUT:.0f} s")
        if self._failed is not None:
            self._thread.join(STOP_TIMEOUT)
            raise RuntimeError(
                f"the latency proxy could not listen on {HOST}:{port}: {self._failed}"
            ) from self._failed

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, HOST, self.port)
            )
        except BaseException as e:
            self._failed = e
            self._ready.set()
            self._loop.close()
            return
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._shutdown())
            self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            # After the connections: from Python 3.12 this waits for them to close.
            await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                server_r, server_w = await asyncio.open_connection(
                    self.target_host, self.target_port
                )
            except OSError:
                return  # the client sees its connection closed, as with a store that is down
            self.counts.connections += 1
            conn = _Connection(self.profile, self.counts, self._done)
            self._open.add(conn)
            pumps = [
                asyncio.ensure_future(conn.upstream(client_r, server_w)),
                asyncio.ensure_future(conn.downstream(server_r, client_w)),
            ]
            try:
                # Until both directions end; a reset on either side ends both.
                _, pending = await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
                for p in pending:
                    p.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
            finally:
                for p in pumps:
                    p.cancel()
                # Reaped before the loop closes (else: "Task was destroyed but it is pending").
                await asyncio.gather(*pumps, return_exceptions=True)
                server_w.close()
                self._open.discard(conn)
                conn.finish()
        except asyncio.CancelledError:
            pass  # stop(): asyncio's stream callback would log a cancelled handler as an error
        finally:
            client_w.close()
            self._tasks.discard(task)

    def snapshot(self) -> Counts:
        """The counts so far (a copy: subtract two to count what happened between them)."""
        return self.counts.snapshot()

    def responses(self, since: float = 0.0) -> list[Response]:
        """Every response whose request began at or after ``since`` (``time.monotonic()``),
        finished or still being sent (up to its last byte so far), in no particular order."""
        # Copies first: the loop's thread appends and adds while this runs (each copy is atomic).
        done = list(self._done)
        sending = [c.current() for c in list(self._open)]
        return [r for r in done + sending if r is not None and r.start >= since]

    def stop(self) -> None:
        """Close the listener and every connection; idempotent."""
        if self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed in between
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_TIMEOUT)

    def __enter__(self) -> LatencyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProxyProcess:
    """:class:`LatencyProxy` in a process of its own (``python latency_proxy.py --control``):
    the same ``port``, ``endpoint``, ``profile``, ``snapshot()``, ``responses()`` and ``stop()``,
    without sharing the caller's GIL. It also stops when the caller dies (its stdin closes).

    Raises
    ------
    ValueError
        As :class:`LatencyProxy` (checked here first).
    RuntimeError
        The process did not say it listens within ``START_TIMEOUT`` seconds (its stderr is in the message).
    """

    def __init__(self, target: str, prof: Profile | str = "loopback", port: int = 0) -> None:
        host, target_port = parse_target(target)
        self.profile = profile(prof) if isinstance(prof, str) else prof
        if self.profile.name not in PROFILES or PROFILES[self.profile.name] != self.profile:
            raise ValueError(f"a proxy process takes a named profile ({', '.join(PROFILES)})")
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--control",
                "--target",
                f"{host}:{target_port}",
                "--profile",
                self.profile.name,
                "--port",
                str(port),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        ready: dict[str, object] = {}

        def first_line() -> None:
            assert self._proc.stdout is not None
            line = self._proc.stdout.readline()
            if line:
                ready.update(json.loads(line))

        waiter = threading.Thread(target=first_line, daemon=True)
        waiter.start()
        waiter.join(START_TIMEOUT)
        if "port" not in ready:
            self._proc.kill()
            _, err = self._proc.communicate(timeout=STOP_TIMEOUT)
            raise RuntimeError(f"the latency proxy process did not start: {err.strip()[-2000:]}")
        self.port = int(ready["port"])  # type: ignore[call-overload]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc.poll() is None

    def _ask(self, command: str) -> object:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(command + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the latency proxy process ended")
        return json.loads(line)

    def snapshot(self) -> Counts:
        """The counts so far (as :meth:`LatencyProxy.snapshot`)."""
        return Counts(**self._ask("counts"))  # type: ignore[arg-type]

    def responses(self, since: float = 0.0) -> list[Response]:
        """As :meth:`LatencyProxy.responses`."""
        return [Response(*r) for r in self._ask(f"responses {since!r}")]  # type: ignore[union-attr]

    def stop(self) -> None:
        """Close its stdin (it stops) and wait for it; idempotent."""
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.close()
            try:
                self._proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(STOP_TIMEOUT)
        for stream in (self._proc.stdout, self._proc.stderr):
            if stream is not None:
                stream.close()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


PROXY_MODES = ("process", "in-process")
"""Where a benchmark's proxy runs: :class:`ProxyProcess` or :class:`LatencyProxy`."""


def start_proxy(
    target: str, prof: Profile | str, mode: str = "process"
) -> LatencyProxy | ProxyProcess:
    """A proxy in front of ``target`` with profile ``prof``, run as ``mode`` says (:data:`PROXY_MODES`)."""
    if mode not in PROXY_MODES:
        raise ValueError(f"proxy mode {mode!r}: expected one of {', '.join(PROXY_MODES)}")
    return ProxyProcess(target, prof) if mode == "process" else LatencyProxy(target, prof)


def _control(proxy: LatencyProxy) -> None:
    """Answer the commands of stdin (``counts``, ``responses SINCE``) until it closes."""
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "counts":
            answer: object = proxy.snapshot().__dict__
        elif command == "responses":
            answer = [[r.start, r.end, r.nbytes] for r in proxy.responses(float(arg or 0))]
        else:
            answer = {"error": f"unknown command {command!r}"}
        print(json.dumps(answer), flush=True)


def parse_target(target: str) -> tuple[str, int]:
    """``(host, port)`` of ``"[http://]127.0.0.1:PORT"``.

    Raises
    ------
    ValueError
        Not ``HOST:PORT``, or a host other than 127.0.0.1 / localhost.
    """
    rest = target.removeprefix("http://").rstrip("/")
    host, sep, port = rest.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"proxy target {target!r}: expected 127.0.0.1:PORT")
    if host not in (HOST, "localhost"):
        raise ValueError(
            f"proxy target {target!r}: the latency proxy forwards to 127.0.0.1 only"
            " (it models a network in front of a local test server)"
        )
    return HOST, int(port)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the server: 127.0.0.1:PORT")
    parser.add_argument("--profile", default="same-region", choices=list(PROFILES))
    parser.add_argument("--port", type=int, default=0, help="where to listen (0: a free port)")
    parser.add_argument(
        "--control",
        action="store_true",
        help="serve until stdin closes, answering its commands (counts, responses SINCE)",
    )
    args = parser.parse_args(argv)
    try:
        proxy = LatencyProxy(args.target, args.profile, args.port)
    except (ValueError, RuntimeError) as e:
        sys.exit(f"latency_proxy: {e}")
    print(json.dumps({"port": proxy.port, "profile": proxy.profile.describe()}), flush=True)
    if args.control:
        try:
            _control(proxy)
        finally:
            proxy.stop()
        return
    try:
        while proxy.running:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        proxy.stop()
        print(json.dumps(proxy.counts.__dict__), flush=True)


if __name__ == "__main__":
    main()
