"""A client killed while its task is stuck: later jobs on the same scheduler do not hang (issue 35).

A real ``dask scheduler`` and ``dask worker`` processes, and an
``index-files`` client process killed (-9) while a worker's only thread is
blocked in one of its tasks (``blockonce.py``, standing for a FIFO read
before reads were non-blocking). Dask cannot stop that task: the worker
keeps running it, and the scheduler, which forgot it with its client, keeps
sending that worker new tasks, which waited behind it for ever. Now a job
keeps its tasks off such a worker, and a job with no other worker stops,
typed, naming the worker and the task, instead of waiting for ever.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import shardcat
import shardcat.config
from _handcluster import folder_of_samples, hand_cluster
from shardcat.errors import WorkersHeldError, WorkersLostError
from shardcat.orchestration import DaskCluster, IndexFilesSummary
from shardcat.orchestration.placement import held_workers
from shardcat.reading import Catalog

pytestmark = pytest.mark.slow

SAMPLES = 40


def _killed_while_stuck(cluster_address: str, catalog_url: str, src: Path, marker: Path) -> None:
    """Run ``shardcat index-files`` in a process of its own; SIGKILL it once its task is stuck."""
    args = ["-c", catalog_url, "index-files", str(src), "d", "--scheduler", cluster_address]
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardcat", *args, "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "the task never reached the blocking file"
            time.sleep(0.1)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def test_a_killed_clients_stuck_task_neither_hangs_nor_blocks_the_next_jobs(tmp_path, sqlite_url):
    src = tmp_path / "src"
    keys = folder_of_samples(src, SAMPLES, size=1000)
    marker = tmp_path / "blocked"
    (src / "BLOCK.bin").write_text(str(marker))
    preload = Path(__file__).with_name("blockonce.py")

    with hand_cluster(tmp_path / "cluster", workers=1, preload=preload) as cluster:
        _killed_while_stuck(cluster.address, sqlite_url, src, marker)
        from distributed import Client

        with Client(cluster.address) as client:
            deadline = time.monotonic() + 30
            while not (held := held_workers(client)):  # the scheduler forgets the killed client
                assert time.monotonic() < deadline, "the worker never showed its stuck task"
                time.sleep(0.2)
            (stuck,) = held
            stuck_key = stuck.abandoned[0][0]
            assert stuck_key.startswith("shardcat-index-files-")

        def index() -> IndexFilesSummary:
            return shardcat.index_files(
                str(src),
                catalog=sqlite_url,
                dataset="d",
                client=DaskCluster(scheduler=cluster.address),
                group_files=8,  # several tasks, so some would land on the stuck worker
            )

        # The stuck worker is the only one: the job stops, typed, instead of waiting for ever.
        t0 = time.monotonic()
        with (
            shardcat.config.set(dask_no_workers_timeout=2),
            pytest.raises(WorkersHeldError) as raised,
        ):
            index()
        assert time.monotonic() - t0 < 60
        e = raised.value
        assert isinstance(e, WorkersLostError)  # callers that handle a lost cluster handle this
        assert e.workers == [stuck.address] and e.dataset == "d"
        text = str(e)
        assert f"worker {stuck.address} has run task {stuck_key!r} for " in text
        assert "it was aborted, nothing of it is visible" in text
        assert f"restart_workers([{stuck.address!r}])" in text
        with Catalog(sqlite_url) as cat:
            assert cat.job(e.job_id).state == "aborted"
            assert cat.count("d") == 0

        # With another worker, the same job completes; its tasks keep off the stuck one.
        cluster.start_workers(1)
        summary = index()
        assert summary.records == len(keys) + 1  # and BLOCK, read as usual now
        with Catalog(sqlite_url) as cat:
            assert set(cat.keys("d")) == keys | {"BLOCK"}
        # Every Dask job enters the same client_for: a write of the folder too.
        written = shardcat.write(
            shardcat.from_files(str(src)),
            str(tmp_path / "packed"),
            catalog=sqlite_url,
            dataset="packed",
            shard_size="8KB",
            client=DaskCluster(scheduler=cluster.address),
        )
        assert written.records == len(keys) + 1
        with Client(cluster.address) as client:
            assert [h.address for h in held_workers(client)] == [stuck.address]  # still stuck
