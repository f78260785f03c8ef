"""A Dask cluster started by hand, as a user does: ``dask scheduler`` and ``dask worker`` processes.

Each worker (its nanny and the worker process it spawns) runs in a session
of its own, so that :meth:`HandCluster.kill_workers` kills all of it with
SIGKILL, as ``kill -9`` of every worker does; the scheduler lives on.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["HandCluster", "folder_of_samples", "hand_cluster"]

START_TIMEOUT = 90.0
"""Seconds the scheduler and each worker may take to come up (a loaded CI machine)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dask(*args: str) -> list[str]:
    return [str(Path(sys.executable).with_name("dask")), *args]


class HandCluster:
    """A running ``dask scheduler`` on 127.0.0.1 and the ``dask worker`` processes started for it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.address = f"tcp://127.0.0.1:{_free_port()}"
        self._env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
        self._scheduler: subprocess.Popen[bytes] | None = None
        self._workers: list[subprocess.Popen[bytes]] = []
        self._started = 0

    def start_scheduler(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        self._scheduler = self._spawn(
            _dask(
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                port,
                "--dashboard-address",
                "127.0.0.1:0",
                "--no-show",
            )
        )

    def start_workers(self, n: int, preload: Path | None = None) -> None:
        """Start ``n`` single-threaded workers and wait until the scheduler has them all.

        ``preload``: a module file each worker runs at start (``dask worker --preload``).
        """
        for _ in range(n):
            self._started += 1
            extra = ["--preload", str(preload)] if preload is not None else []
            self._workers.append(
                self._spawn(
                    _dask(
                        "worker",
                        self.address,
                        "--nthreads",
                        "1",
                        "--memory-limit",
                        "1GiB",
                        "--no-dashboard",
                        "--local-directory",
                        str(self.workdir / f"worker-{self._started}"),
                        *extra,
                    )
                )
            )
        self.wait_for_workers(len(self._workers))

    def kill_workers(self) -> None:
        """SIGKILL every worker (nanny and worker process), and wait until they are gone."""
        for p in self._workers:
            with suppress(ProcessLookupError):  # gone already
                os.killpg(p.pid, signal.SIGKILL)
        for p in self._workers:
            p.wait(timeout=30)
        self._workers = []

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with Client(self.address, timeout=10) as client:
                    client.wait_for_workers(n, timeout=max(1.0, deadline - time.monotonic()))
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def stop(self) -> None:
        self.kill_workers()
        if self._scheduler is not None:
            self._scheduler.terminate()
            try:
                self._scheduler.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._scheduler.kill()
                self._scheduler.wait(timeout=10)

    def _spawn(self, cmd: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            cmd,
            env=self._env,
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )


@contextmanager
def hand_cluster(
    workdir: Path, workers: int = 2, preload: Path | None = None
) -> Iterator[HandCluster]:
    """A scheduler and ``workers`` workers (each running ``preload``), stopped (killed) at exit."""
    workdir.mkdir(parents=True, exist_ok=True)
    cluster = HandCluster(workdir)
    try:
        cluster.start_scheduler()
        cluster.start_workers(workers, preload)
        yield cluster
    finally:
        cluster.stop()


def folder_of_samples(root: Path, samples: int, size: int = 20_000) -> set[str]:
    """``samples`` samples of a ``.bin`` (``size`` random bytes) and a ``.json`` each; their keys."""
    keys = set()
    for i in range(samples):
        folder = root / f"d{i % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        key = f"d{i % 10}/s{i:05d}"
        (root / f"{key}.bin").write_bytes(os.urandom(size))
        (root / f"{key}.json").write_text(f'{{"i": {i}}}')
        keys.add(key)
    return keys
