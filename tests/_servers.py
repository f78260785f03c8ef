"""Real servers for the storage tests, on 127.0.0.1 and free ports: Azurite, a GCS emulator and a
ranged HTTP server.

Used by the fixtures in ``tests/conftest.py``; each start is bounded in time
and each server is stopped by its fixture.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any


def stop(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """End a server process: asked to stop, killed if it has not within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout)


def moto_bucket(endpoint: str, prefix: str = "test") -> tuple[str, dict[str, Any]]:
    """A new bucket on the moto server at ``endpoint``: its name and s3fs's options for it."""
    import uuid

    bucket = f"{prefix}-{uuid.uuid4().hex[:12]}"
    moto_client(endpoint).create_bucket(Bucket=bucket)
    options = {
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
        "use_listings_cache": False,
    }
    return bucket, options


def moto_client(endpoint: str, service: str = "s3") -> Any:
    """A boto3 client of ``service`` on the moto server at ``endpoint`` (moto's test keys)."""
    import boto3

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


# --- Azurite (the Azure Storage emulator, npm package "azurite") ----------------------

AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's well-known development key (published in its README; not a secret).
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
REPO = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(r"listens on http://127\.0\.0\.1:(\d+)")


def azurite_binary() -> str | None:
    """``$SHARDCAT_AZURITE``, the copy scripts/test.sh installs, or one on PATH."""
    for candidate in (
        os.environ.get("SHARDCAT_AZURITE"),
        str(REPO / ".cache" / "node" / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def azurite_connection_string(port: int) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{AZURITE_ACCOUNT};"
    )


@contextmanager
def azurite(binary: str, workdir: Path, timeout: float = 60.0) -> Iterator[int]:
    """Run Azurite's blob service on 127.0.0.1 and a free port; yields the port.

    Raises
    ------
    RuntimeError
        If it does not report its port within ``timeout`` seconds (its output is quoted).
    """
    args = [
        binary,
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        "0",  # Azurite reports the port it got: "listens on http://127.0.0.1:<port>"
        "--location",
        str(workdir),
        "--skipApiVersionCheck",  # adlfs's SDK may be newer than the emulator
        "--loose",
        "--silent",
        "--disableTelemetry",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    found = threading.Event()
    port: list[int] = []

    def drain(out: IO[str]) -> None:
        # Read until EOF, so the emulator never blocks on a full pipe.
        for line in out:
            lines.append(line)
            m = _LISTENING.search(line)
            if m and not port:
                port.append(int(m.group(1)))
                found.set()
        found.set()

    assert proc.stdout is not None
    reader = threading.Thread(target=drain, args=(proc.stdout,), daemon=True)
    reader.start()
    try:
        found.wait(timeout)
        if not port:
            raise RuntimeError(
                f"azurite did not start within {timeout:.0f}s (exit code {proc.poll()}): "
                + "".join(lines[-20:]).strip()
            )
        yield port[0]
    finally:
        stop(proc)
        reader.join(5)


# --- a Google Cloud Storage emulator (PyPI package "gcp-storage-emulator") --------------

# The emulator logs each request it answers (http.server's log line, at DEBUG): counted by tests.
_GCS_REQUEST = re.compile(r'"(GET|POST|PUT|PATCH|DELETE|HEAD) (\S+) HTTP/1\.[01]" (\d{3})')


class GcsEmulator:
    """gcp-storage-emulator in a process of its own on 127.0.0.1 (in memory), started by
    :func:`gcs_emulator`. Its log (stderr, to a file) names every request it answered."""

    def __init__(self, port: int, log: Path) -> None:
        self.port = port
        self.log = log

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def mark(self) -> int:
        """Where the log ends now: :meth:`requests_since` that mark counts what came after."""
        return self.log.stat().st_size

    def requests_since(self, mark: int) -> list[tuple[str, str]]:
        """``(method, path)`` of each request answered since :meth:`mark`."""
        with self.log.open("rb") as f:
            f.seek(mark)
            text = f.read().decode("utf-8", "replace")
        return [(m.group(1), m.group(2)) for m in _GCS_REQUEST.finditer(text)]

    def create_bucket(self, name: str) -> None:
        """Create a bucket through the emulator's JSON API (as ``gcloud storage buckets create``)."""
        import json
        import urllib.request

        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            assert r.status == 200, r.status


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gcs_emulator(workdir: Path, timeout: float = 60.0) -> Iterator[GcsEmulator]:
    """Run ``gcp-storage-emulator start --in-memory`` on 127.0.0.1 and a free port.

    Raises
    ------
    RuntimeError
        If it does not answer its health check within ``timeout`` seconds (its log is quoted).
    """
    import sys
    import time
    import urllib.error
    import urllib.request

    last = ""
    for attempt in range(3):  # the free port may be taken between the check and the start
        port = free_port()
        log = workdir / f"gcs-emulator-{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gcp_storage_emulator",
                    "start",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--in-memory",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + timeout
            up = False
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                        up = r.read() == b"OK"
                except (urllib.error.URLError, OSError):
                    pass
                if up:
                    break
                time.sleep(0.1)
            if up:
                yield GcsEmulator(port, log)
                return
            last = log.read_text(errors="replace")[-2000:]
        finally:
            stop(proc)
        if "Address already in use" not in last:
            break
    raise RuntimeError(f"the GCS emulator did not start within {timeout:.0f}s: {last.strip()}")


# --- a read-only HTTP server that answers ranged requests -------------------------------

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")
_STATUS_PATH = re.compile(r"^/status/(\d{3})/")


class RangedHandler(http.server.BaseHTTPRequestHandler):
    """GET and HEAD of the files under ``server.root``, with ``Range: bytes=`` support.

    What fsspec's HTTPFileSystem needs: ``Content-Length`` on HEAD, ``206``
    with ``Content-Range`` for a range (suffix ranges too), ``416`` past the
    end. A path ``/status/<code>/...`` answers with that status (403, 500, ...).
    """

    protocol_version = "HTTP/1.1"

    def do_HEAD(self) -> None:
        self._serve(body=False)

    def do_GET(self) -> None:
        self._serve(body=True)

    def _serve(self, body: bool) -> None:
        m = _STATUS_PATH.match(self.path)
        if m:
            self._empty(int(m.group(1)))
            return
        root: Path = self.server.root  # type: ignore[attr-defined]
        path = (root / self.path.split("?", 1)[0].lstrip("/")).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            self._empty(404)
            return
        data = path.read_bytes()
        size = len(data)
        start, end, status = 0, size, 200
        header = self.headers.get("Range")
        if header:
            r = _RANGE.fullmatch(header.strip())
            if r is None or (not r.group(1) and not r.group(2)):
                self._empty(416, {"Content-Range": f"bytes */{size}"})
                return
            if not r.group(1):  # a suffix: the last N bytes (all of them if N > size)
                start = max(0, size - int(r.group(2)))
            else:
                start = int(r.group(1))
                end = min(size, int(r.group(2)) + 1) if r.group(2) else size
            if start >= size and size > 0:
                self._empty(416, {"Content-Range": f"bytes */{size}"})
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{max(start, end - 1)}/{size}")
        self.end_headers()
        if body:
            self.wfile.write(data[start:end])

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: pytest shows failures, not every request


@contextmanager
def ranged_http_server(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1 and a free port; yields the base URL (no trailing slash)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangedHandler)
    server.daemon_threads = True
    server.root = root.resolve()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# --- an S3 server that checks credentials (moto with IAM enforcement) -----------------


@contextmanager
def moto_enforcing_auth(free_actions: int, timeout: float = 60.0) -> Iterator[str]:
    """A moto server in its own process that enforces IAM after ``free_actions`` requests.

    moto checks signatures and IAM policies only when
    ``INITIAL_NO_AUTH_ACTION_COUNT`` is set in the server's environment; the
    first ``free_actions`` requests are let through so that the test can set
    up buckets and IAM users. Yields the endpoint URL.
    """
    import socket
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT=str(free_actions))
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start on 127.0.0.1:{port}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@contextmanager
def iam_world(bucket: str, body: bytes = b"\0" * 100) -> Iterator[tuple[str, str, str]]:
    """:func:`moto_enforcing_auth` with bucket ``bucket`` holding ``x.shard`` (``body``) and a
    user ``reader`` who has keys but no policy. Yields ``(endpoint, key id, secret)`` of
    ``reader``; the four set-up requests are the free ones, every later one is checked."""
    with moto_enforcing_auth(free_actions=4) as endpoint:
        s3, iam = moto_client(endpoint), moto_client(endpoint, "iam")
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="x.shard", Body=body)
        iam.create_user(UserName="reader")
        key = iam.create_access_key(UserName="reader")["AccessKey"]
        yield endpoint, key["AccessKeyId"], key["SecretAccessKey"]


# --- an S3 server in its own process that counts the requests it answers ---------------

_COUNTING_MOTO = r"""
import json, sys, threading
from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

seen, lock = [], threading.Lock()
inner = DomainDispatcherApplication(create_backend_app)


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/__requests__":  # the test asks what came, and forgets it
        with lock:
            body = json.dumps(seen).encode()
            seen.clear()
        start_response("200 OK", [("Content-Type", "application/json")])
        return [body]
    auth = environ.get("HTTP_AUTHORIZATION", "")
    scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/") if "Credential=" in auth else []
    with lock:
        seen.append({
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO"),
            "host": environ.get("HTTP_HOST"),
            "key": scope[0] if scope else None,
            "region": scope[2] if len(scope) > 2 else None,
        })
    return inner(environ, start_response)


server = make_server("127.0.0.1", 0, app, threaded=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def counting_moto(timeout: float = 60.0) -> Iterator[str]:
    """A moto S3 server in a process of its own (so its buckets are its own), which records the
    requests it answers: ``GET {endpoint}/__requests__`` returns them (method, path, host,
    the signing key id and region) and forgets them. Yields the endpoint URL."""
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", _COUNTING_MOTO],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # bounded: the port, or EOF when the watchdog fires
        watchdog.cancel()
        if not line.strip():
            raise RuntimeError("the counting moto server did not start")
        yield f"http://127.0.0.1:{int(line)}"
    finally:
        watchdog.cancel()
        stop(proc)


def requests_seen(endpoint: str) -> list[dict[str, Any]]:
    """What a :func:`counting_moto` server answered since it was last asked."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"{endpoint}/__requests__", timeout=30) as r:
        return list(json.loads(r.read()))


# --- a TCP proxy that can take a server away and bring it back --------------------------


class OutageProxy:
    """Forwards 127.0.0.1:<port> to a server; :meth:`down` drops every connection and refuses
    new ones (the server "goes away" without losing its state), :meth:`up` brings it back.
    :meth:`lose_answers` lets requests through but cuts the connection instead of passing
    the server's next answers on (a request applied whose answer never came back).
    :meth:`hold_answer` keeps the answer to a request back until :meth:`release` (a request
    in flight for as long as the test needs it to be, without a sleep)."""

    def __init__(self, target_port: int) -> None:
        import socket

        self.target_port = target_port
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._available = threading.Event()
        self._available.set()
        self._closed = False
        self.refused = 0
        self._to_lose = 0
        self._lose_to: bytes | None = None  # only answers to requests starting so are lost
        self.lost = 0
        self._hold: bytes | None = None  # the request line (its start) whose answer is held
        self._held = threading.Event()  # an answer is being held
        self._released = threading.Event()
        self._released.set()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        import socket

        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._available.is_set():
                self.refused += 1
                client.close()  # connection reset: what a dead server's host answers
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open.update((client, upstream))
            # Per connection: whether the answer to its latest request is to be held, or lost.
            held: dict[str, bool] = {"next": False, "lose": False}
            for a, b, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(a, b, answers, held), daemon=True).start()

    def lose_answers(self, n: int, request: bytes | None = None) -> None:
        """The server's next ``n`` answers are not passed on: their connections are cut.
        ``request``: only answers to requests whose first line starts so (``b"POST /b?delete"``)."""
        with self._lock:
            self._to_lose = n
            self._lose_to = request

    def hold_answer(self, request: bytes) -> None:
        """The answer to the next request whose first line starts with ``request`` (e.g.
        ``b"PUT /bucket/key"``) is held back until :meth:`release`; the request itself goes
        through (the store applies it). :meth:`wait_held` tells when it is being held."""
        with self._lock:
            self._hold = request
            self._held.clear()
            self._released.clear()

    def wait_held(self, timeout: float = 60.0) -> bool:
        """Whether the answer :meth:`hold_answer` asked for is held (waits up to ``timeout``)."""
        return self._held.wait(timeout)

    def release(self) -> None:
        """Pass the held answer on."""
        self._released.set()

    def _pump(self, src: Any, dst: Any, answers: bool, held: dict[str, bool]) -> None:
        import socket

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not answers:
                    with self._lock:
                        if self._hold is not None and data.startswith(self._hold):
                            self._hold = None
                            held["next"] = True
                        if self._lose_to is not None:
                            held["lose"] = data.startswith(self._lose_to)
                # "100 Continue" (botocore's Expect: 100-continue) is not an answer: the body follows.
                if answers and not data.startswith(b"HTTP/1.1 100 "):
                    with self._lock:
                        lose = self._to_lose > 0 and (self._lose_to is None or held["lose"])
                        if lose:
                            self._to_lose -= 1
                            self.lost += 1
                    if lose:  # the request was applied; its answer is dropped with the connection
                        for s in (src, dst):
                            with suppress(OSError):
                                s.shutdown(socket.SHUT_RDWR)
                        break
                    if held["next"]:
                        held["next"] = False
                        self._held.set()
                        self._released.wait(60)  # bounded: a test that never releases ends
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with self._lock:
                    self._open.discard(s)
                with suppress(OSError):
                    s.close()

    def down(self) -> None:
        import socket

        self._available.clear()
        with self._lock:
            sockets = list(self._open)
        for s in sockets:
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def up(self) -> None:
        self._available.set()

    def close(self) -> None:
        self._closed = True
        self._released.set()
        self.down()
        self._listener.close()


# --- a moto server that can be stopped and started again on the same port ---------------


class RestartableMoto:
    """moto's S3 app on 127.0.0.1, in this process, that :meth:`stop` takes down for real (the
    port refuses connections, open ones are cut) and :meth:`start` brings back on the same
    port. Its buckets and objects live in moto's in-process backend, so they outlast a
    restart, as a real store's do."""

    def __init__(self) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import ThreadedWSGIServer

        class Server(ThreadedWSGIServer):  # type: ignore[misc]
            """Remembers its connections, so that stopping can cut them."""

            def __init__(self, *args: Any) -> None:
                super().__init__(*args)
                self.open: set[Any] = set()

            def process_request(self, request: Any, client_address: Any) -> None:
                self.open.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request: Any) -> None:
                self.open.discard(request)
                super().shutdown_request(request)

        app = DomainDispatcherApplication(create_backend_app)
        self._server = Server("127.0.0.1", self.port, app)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        import socket

        if self._server is None:
            return
        server, self._server = self._server, None
        server.shutdown()
        server.server_close()  # the port refuses new connections
        for s in list(server.open):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(10)


@contextmanager
def silent_store() -> Iterator[str]:
    """An endpoint that accepts connections and never answers (a hung or frozen server: the
    kernel completes the handshake, nothing reads the request). Yields its URL."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()
