"""Lookups and commits across a PostgreSQL restart, on a private server of the test's own.

The shared test server is never restarted (other tests use it): this test
runs ``initdb`` into a temporary directory and starts a server of its own on
a free port, with the same binaries. One ``Catalog`` object lives through a
fast restart and through a stop and start: while the server is down a
lookup fails with a typed ``CatalogError``; once it is back, the same object
serves lookups and commits again without being reopened.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import shardcat
from shardcat.errors import CatalogError
from shardcat.reading import Catalog


def _bindir() -> Path:
    out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server:
    def __init__(self, data: Path, port: int) -> None:
        self.data, self.port = data, port
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"

    def ctl(self, *args: str) -> None:
        opts = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
        cmd = [str(_bindir() / "pg_ctl"), "-D", str(self.data / "db"), "-o", opts, "-w", *args]
        _as_postgres([*cmd, "-t", "60", "-l", str(self.data / "log")])


def _as_postgres(cmd: list[str]) -> None:
    # The server refuses to run as root: run its tools as the postgres user then.
    if os.geteuid() == 0:
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


@pytest.fixture
def private_server() -> Iterator[_Server]:
    data = Path(tempfile.mkdtemp(prefix="shardcat-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres")
    _as_postgres(
        [str(_bindir() / "initdb"), "-D", str(data / "db"), "-U", "postgres", "-A", "trust"]
    )
    server = _Server(data, _free_port())
    server.ctl("start")
    try:
        yield server
    finally:
        with contextlib.suppress(subprocess.SubprocessError):  # stopped already
            server.ctl("stop", "-m", "immediate")
        shutil.rmtree(data, ignore_errors=True)


def _shard(path: Path, keys: list[str]) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(str(path)) as w:
        for k in keys:
            w.write({"__key__": k, "txt": k})
    return w.close()


@pytest.mark.slow
def test_one_catalog_object_serves_again_after_the_server_restarts(
    private_server: _Server, tmp_path: Path
) -> None:
    keys = [f"k{i:03d}" for i in range(50)]
    cat = Catalog(private_server.url)
    try:
        cat.create_dataset("train", str(tmp_path))
        cat.register_shard("train", _shard(tmp_path / "a.shard", keys))
        assert cat.get("train", "k007")["txt"].decode() == "k007"

        private_server.ctl("restart", "-m", "fast")  # every connection dropped
        assert cat.get("train", "k007")["txt"].decode() == "k007"
        assert cat.get_many("train", keys).ok
        assert cat.count("train") == 50

        private_server.ctl("stop", "-m", "fast")
        with pytest.raises(CatalogError):
            cat.get("train", "k008")
        with pytest.raises(CatalogError):
            cat.get_many("train", keys[:3])
        private_server.ctl("start")
        assert cat.get("train", "k008")["txt"].decode() == "k008"
        assert cat.get_many("train", keys).ok

        # Writes too: a job begun, staged and committed after the outage, exactly once.
        job = cat.begin_job("train")
        more = [f"m{i:03d}" for i in range(20)]
        cat.register_shard("train", _shard(tmp_path / "b.shard", more), job=job)
        cat.commit_job(job)
        assert cat.count("train") == 70
        assert sorted(cat.keys("train")) == sorted(keys + more)
        assert cat.verify("train", workers=1).ok
    finally:
        cat.close()
