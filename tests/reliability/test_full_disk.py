"""A full disk: a write job into a small tmpfs fails with a typed error and leaves nothing visible.

The dataset's root is a 1 MiB tmpfs mounted for the test (root only; in CI
the test runs as root and must not skip). The job writes ~3 MiB: a worker's
write fails with ENOSPC, the job fails with a typed error saying the disk is
full, no record is visible, and no ``.partial`` file is left to fill the disk
further. The tmpfs is then grown, the job rerun: every record once,
``verify`` clean, ``gc`` leaves only the committed shards.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import StorageFullError
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
N = 300
SIZE = 10_000  # bytes per sample: ~3 MiB in all


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        message = f"cannot mount a tmpfs ({result.stderr.strip()}): run as root"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _samples() -> list[dict[str, Any]]:
    return [{"__key__": f"d/{i:04d}", "bin": bytes([i % 251]) * SIZE} for i in range(N)]


def _write(client: Any, root: Path, url: str) -> Any:
    import dask.bag as db

    return shardcat.write(
        db.from_sequence(_samples(), npartitions=3),
        str(root / "ds"),
        catalog=url,
        dataset="full",
        shard_size="512KB",
        client=client,
        progress=False,
        retries=0,
    )


@pytest.mark.slow
def test_a_full_disk_fails_the_job_typed_and_a_rerun_with_space_completes(
    small_disk: Path, sqlite_url: str
) -> None:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        with pytest.raises(StorageFullError) as err:
            _write(client, small_disk, sqlite_url)
        assert "no space left (the disk or quota is full)" in str(err.value)
        assert "free space, or write somewhere else, and rerun" in str(err.value)
        assert str(small_disk) in str(err.value)  # names the file
        with Catalog(sqlite_url) as cat:
            # A failed first job takes the dataset it created with it.
            assert cat.datasets() == [], "a failed job left its dataset behind"
        left = [p.name for p in (small_disk / "ds").rglob("*") if p.suffix == ".partial"]
        assert left == [], f"temporary files left on the full disk: {left}"

        subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
        summary = _write(client, small_disk, sqlite_url)
    assert summary.records == N
    with Catalog(sqlite_url) as cat:
        keys = list(cat.keys("full"))
        assert len(keys) == len(set(keys)) == N
        assert cat.get("full", "d/0123").decode()["bin"] == bytes([123]) * SIZE
        assert cat.verify("full").ok
        gc(cat, "full", grace=dt.timedelta(0), stale_after=dt.timedelta(0))
        live = sorted(Path(s.url).name for s in cat.shards("full"))
        assert cat.verify("full").ok
    files = sorted(p.name for p in (small_disk / "ds").iterdir() if p.name != "_versions")
    assert files == live, f"gc left {sorted(set(files) - set(live))} behind"
