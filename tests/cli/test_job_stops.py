"""A write job stopped from outside, through the real command: one line, and how to resume.

Every worker of a hand-started cluster killed (-9) during ``write --scheduler``,
and Ctrl-C (SIGINT to the command's process group, as a terminal sends it)
during ``write --workers 2``: each prints one line saying what became of the
job and the command that resumes it, no traceback; that command finishes
the job, every sample once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from _forkrun import shardcat_command
from _handcluster import folder_of_samples, hand_cluster
from shardcat.reading import Catalog

pytestmark = pytest.mark.slow

SAMPLES = 400
START = 180.0  # seconds the command may take to write its first shard (a loaded machine)
STOP = 120.0  # seconds it may take to stop once stopped from outside


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDCAT_", "DASK_"))}
    env.update({"COLUMNS": "250", "NO_COLOR": "1", "SHARDCAT_DASK_NO_WORKERS_TIMEOUT": "2"})
    return env


def _write(tmp_path: Path, *extra: str) -> list[str]:
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    args = ["write", str(tmp_path / "src"), str(tmp_path / "ds"), "-d", "imgs", "-c", catalog]
    return [*shardcat_command(), *args, "--shard-size", "100KB", "--no-progress", *extra]


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _write(tmp_path, *extra),
        env=_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _wait_for_a_shard(p: subprocess.Popen[str], folder: Path) -> None:
    """Until the job has written a shard (it runs), bounded; fails if the command ended first."""
    deadline = time.monotonic() + START
    while not any(folder.rglob("*.shard")):
        if p.poll() is not None:
            pytest.fail(f"the command ended first: {p.returncode}\n{p.communicate()[1]}")
        if time.monotonic() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            pytest.fail(f"no shard after {START} s")
        time.sleep(0.1)


def _finish(p: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return p.communicate(timeout=STOP)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        raise


def _every_sample_once(tmp_path: Path, keys: set[str]) -> None:
    with Catalog(f"sqlite:///{tmp_path / 'catalog.db'}") as cat:
        found = list(cat.keys("imgs"))
        assert len(found) == len(set(found)) == len(keys) and set(found) == keys
        assert cat.verify("imgs").ok


def test_workers_killed_during_write_scheduler_is_one_line_and_the_rerun_resumes(tmp_path):
    keys = folder_of_samples(tmp_path / "src", SAMPLES)
    with hand_cluster(tmp_path / "cluster") as cluster:
        scheduler = ("--scheduler", cluster.address, "--job-name", "nightly")
        p = _start(tmp_path, *scheduler)
        _wait_for_a_shard(p, tmp_path / "ds")
        cluster.kill_workers()
        out, err = _finish(p)
        assert p.returncode == 1, err
        assert len(err.splitlines()) == 1, err
        (line,) = err.splitlines()
        assert line.startswith(f"error: the Dask cluster at {cluster.address} has had no workers")
        assert "write job 1 of dataset 'imgs' stopped: it stays open" in line
        assert line.endswith("rerun the command with --job-name nightly to resume it")
        assert "Traceback" not in err and out == ""

        cluster.start_workers(1)
        rerun = subprocess.run(
            _write(tmp_path, *scheduler), env=_env(), cwd=tmp_path, capture_output=True, text=True,
            timeout=START + STOP,
        )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stdout.startswith("imgs: job 1 committed 400 records")  # the same job, resumed
    _every_sample_once(tmp_path, keys)


def test_ctrl_c_during_write_is_one_line_exit_130_and_the_rerun_resumes(tmp_path):
    keys = folder_of_samples(tmp_path / "src", SAMPLES)
    local = ("--workers", "2", "--job-name", "nightly")
    p = _start(tmp_path, *local)
    _wait_for_a_shard(p, tmp_path / "ds")
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the command and its worker processes
    out, err = _finish(p)
    assert p.returncode == 130, err
    assert err.splitlines() == [
        "interrupted: write job 1 of dataset 'imgs' stays open; "
        "rerun the command with --job-name nightly to finish it"
    ]
    assert "Traceback" not in err and out == ""

    rerun = subprocess.run(
        _write(tmp_path, *local), env=_env(), cwd=tmp_path, capture_output=True, text=True,
        timeout=START + STOP,
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr
    _every_sample_once(tmp_path, keys)
