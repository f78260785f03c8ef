"""An error raised inside a Dask task reaches the terminal as shardcat's one line.

Real local clusters (worker processes of their own), through the real command:
Dask workers report a failed task themselves ("Compute Failed", the task, a
``Traceback: '...'`` line) before the client re-raises it; without ``-v`` only
shardcat's line is printed, with ``-v`` the rest is shown too.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from _forkrun import run_one

pytestmark = pytest.mark.slow

NOT_ADJACENT = "member 'a.cls' belongs to sample 'a', whose other members start at byte 0"


@pytest.fixture
def split_sample_tar(tmp_path: Path) -> Path:
    """A tar whose sample ``a`` has members that are not adjacent (``b.txt`` between them)."""
    path = tmp_path / "bad-000000.tar"
    with tarfile.open(path, "w") as t:
        for name in ("a.txt", "b.txt", "a.cls"):
            member = tarfile.TarInfo(name)
            member.size = 4
            t.addfile(member, io.BytesIO(b"data"))
    return path


def _index(tar: Path, *extra: str, real: bool = False):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG", "SHARDCAT_DEBUG", "DASK_LOGGING")
    }
    env.update({"COLUMNS": "200", "NO_COLOR": "1"})
    catalog = f"sqlite:///{tar.parent / 'catalog.db'}"
    args = ("index-tar", str(tar), "-d", "tars", "-c", catalog, "--workers", "1", *extra)
    return run_one(*args, env=env, cwd=tar.parent, timeout=180, real=real)


def test_a_failed_task_is_one_line(split_sample_tar):
    p = _index(split_sample_tar, real=True)
    assert p.returncode == 1, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"error: {split_sample_tar} at offset 2048: ") and NOT_ADJACENT in line
    assert "Compute Failed" not in p.stderr and "Traceback" not in p.stderr


def test_a_failed_task_with_v_shows_the_rest(split_sample_tar):
    p = _index(split_sample_tar, "-v")
    assert p.returncode == 1, p.stderr
    # The workers' own report, then the command's traceback ending in shardcat's error.
    assert "Compute Failed" in p.stderr and "Traceback: '" in p.stderr
    assert "Traceback (most recent call last)" in p.stderr
    assert p.stderr.rstrip().splitlines()[-1].startswith("shardcat.format.tar.errors.")
    assert NOT_ADJACENT in p.stderr.rstrip().splitlines()[-1]


def test_a_failed_taridx_import_is_one_line(tmp_path: Path):
    """An index of other tars: the task's TaridxError, and nothing of its traceback.

    Both tasks fail, on two workers: neither the workers' reports of the failed tasks
    nor the nannies' warnings as the failed job's cluster stops reach the terminal.
    """
    reference = Path(__file__).parents[1] / "data" / "taridx_reference"
    for case in ("flat", "folders"):
        shutil.copytree(reference / case, tmp_path / case)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG", "SHARDCAT_DEBUG", "DASK_LOGGING")
    }
    env.update({"COLUMNS": "200", "NO_COLOR": "1"})
    args = (
        "taridx", "import", str(tmp_path / "flat" / "flat.taridx"),
        "--tars", str(tmp_path / "folders" / "folders-{000000..000001}.tar"),
        "-d", "bad", "-c", f"sqlite:///{tmp_path / 'catalog.db'}", "--workers", "2",
    )  # fmt: skip
    p = run_one(*args, env=env, cwd=tmp_path, timeout=180, real=True)
    assert p.returncode == 1, p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path / 'folders'}/folders-00000")
    assert "member 0 of tar " in line and "('img/00" in line and "not of this tar" in line
    assert "raise" not in p.stderr and "Traceback" not in p.stderr
