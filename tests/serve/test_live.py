"""The real server: uvicorn on 127.0.0.1 with an ephemeral port, behind a root path, and
``shardcat serve --workers 2`` as a process of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from shardcat.serve import ServeConfig, create_app

from .conftest import KEYS, make_catalog, payload

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def live(catalog_url: str, root: str) -> Iterator[tuple[str, dict[str, str]]]:
    """uvicorn serving the catalog under /shardcat (as behind a proxy that strips it)."""
    _, tokens = make_catalog(catalog_url, root)
    config = ServeConfig(catalogs=(("main", catalog_url),), root_path="/shardcat", rate_limit=0)
    server = uvicorn.Server(
        uvicorn.Config(create_app(config), host="127.0.0.1", port=0, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {tokens['full']}"}
    finally:
        server.should_exit = True
        thread.join(30)


def test_uvicorn_serves_samples_ranges_and_links_under_the_root_path(live):
    base, auth = live
    with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        page = client.get("/api/v1/datasets/train/keys", params={"limit": 5}).json()
        assert page["keys"] == KEYS[:5]
        doc = client.get("/api/v1/datasets/train/samples/img%2F0002").json()
        href = next(e["href"] for e in doc["entries"] if e["name"] == "jpg")
        # Links carry the proxy's prefix; the proxy strips it before the request arrives.
        assert href.startswith("/shardcat/api/v1/datasets/train/samples/img%2F0002/entries/")
        r = client.get(href.removeprefix("/shardcat"), headers={"Range": "bytes=3-9"})
        assert r.status_code == 206
        assert r.content == payload("img/0002")["jpg"][3:10]
        # A proxy that keeps the prefix reaches the same route.
        assert client.get(href).content == payload("img/0002")["jpg"]
        lines = client.post(
            "/api/v1/datasets/train/batch", json={"keys": ["img/0001", "zz"]}
        ).text.splitlines()
        assert len(lines) == 2
        assert client.get("/api/v1/datasets", headers={"Authorization": ""}).status_code == 401


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cli_serves_with_two_workers(tmp_path, sqlite_url, root):
    _, tokens = make_catalog(sqlite_url, root)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAT_")}
    env["PYTHONPATH"] = str(SRC)
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardcat", "serve", "-c", sqlite_url, "--port", str(port),
         "--workers", "2", "--log-level", "warning"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        auth = {"Authorization": f"Bearer {tokens['train']}"}
        with httpx.Client(base_url=base, headers=auth, timeout=30) as client:
            for _ in range(20):  # both workers answer: each opens the catalog itself
                r = client.get("/api/v1/datasets/train/samples/img%2F0010/entries/txt")
                assert r.status_code == 200 and r.text == payload("img/0010")["txt"]
            assert client.get("/api/v1/datasets/val").status_code == 404
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
