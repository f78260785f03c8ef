"""Resume: a write job whose client was SIGKILLed at 90 % finishes by writing only the rest."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dask.bag as db
import pytest

import shardcat
from shardcat.catalog import Catalog
from shardcat.errors import JobExistsError
from shardcat.orchestration.resume import attempts

from .samples import numbered_sample

ROOT = Path(__file__).resolve().parents[2]
N, PARTS, PER_SHARD = 200, 10, 10  # two shards per partition
SLOW_FROM = 190  # the last partition's second shard is slow: it is in flight at the kill

CLIENT = textwrap.dedent(
    """
    import functools, sys, time
    import dask.bag as db
    import shardcat
    from tests.orchestration.samples import numbered_sample

    url, catalog = sys.argv[1], sys.argv[2]

    def progress(event):
        print("done", event.done_partitions, flush=True)
        if event.done_partitions >= 9:
            print("READY", flush=True)
            time.sleep(120)  # the test SIGKILLs us here

    if __name__ == "__main__":
        bag = db.from_sequence(range(200), npartitions=10).map(
            functools.partial(numbered_sample, slow_from=190)
        )
        shardcat.write(bag, url, catalog=catalog, dataset="conv", job_name="nightly",
                       max_records_per_shard=10, progress=progress)
    """
)


def _bag(slow_from: int = -1) -> db.Bag:
    return db.from_sequence(range(N), npartitions=PARTS).map(
        functools.partial(numbered_sample, slow_from=slow_from)
    )


def _kill_client_at_90_percent(tmp_path: Path, url: str, catalog: str) -> None:
    """Run a write job in a real client process with its own LocalCluster; SIGKILL it at 9/10."""
    import psutil

    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, str(script), url, catalog],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # bounded: the client ends (error) or reaches READY
            lines.append(line.strip())
            if line.strip() == "READY":
                break
        assert lines and lines[-1] == "READY", lines
        children = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
    # Its worker processes die with it; kill any that linger, by pid.
    _, alive = psutil.wait_procs(children, timeout=20)
    for child in alive:
        child.kill()


def _records(cat: Catalog, dataset: str) -> list[tuple[str, bytes, object]]:
    batch = cat.get_many(dataset, [f"n/{i:05d}" for i in range(N)])
    assert batch.missing == []
    return [(r.key, r["bin"].data, r["json"].decode()) for r in batch.records]


def _shard_files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*.shard")}


def test_killed_client_resumes_writing_only_the_unfinished_partitions(tmp_path, sqlite_url, client):
    root = tmp_path / "conv"
    _kill_client_at_90_percent(tmp_path, str(root), sqlite_url)
    cat = Catalog(sqlite_url)
    (job,) = cat.jobs("conv", state="open")  # the dead client left its job open, invisible
    assert cat.count("conv") == 0
    staged = [s for s in cat.shards("conv", state="staged") if s.job_id == job.id]
    complete = attempts(staged, job.properties["partition_base"])  # type: ignore[index]
    assert len(complete) == PARTS - 1  # the slow last partition was in flight
    assert len(staged) == 2 * (PARTS - 1) + 1  # ... with its first shard staged
    # A finished partition whose file was damaged since is not trusted: it is rewritten.
    damaged = complete[0][0][0].url
    data = bytearray(Path(damaged).read_bytes())
    data[len(data) // 2] ^= 0xFF
    Path(damaged).write_bytes(bytes(data))
    before = _shard_files(root)

    summary = shardcat.write(
        _bag(),
        str(root),
        catalog=sqlite_url,
        dataset="conv",
        job_name="nightly",
        max_records_per_shard=PER_SHARD,
        client=client,
        progress=False,
    )

    written = _shard_files(root) - before
    assert summary.job_id == job.id
    assert summary.resumed_partitions == PARTS - 2
    assert len(written) == 2 * 2  # the in-flight partition and the damaged one, 2 shards each
    assert summary.records == N and summary.partitions == PARTS
    assert damaged not in summary.shards
    assert cat.job(job.id).state == "committed"
    # The result equals an uninterrupted run of the same job.
    shardcat.write(
        _bag(),
        str(tmp_path / "whole"),
        catalog=sqlite_url,
        dataset="whole",
        max_records_per_shard=PER_SHARD,
        client=client,
        progress=False,
    )
    assert _records(cat, "conv") == _records(cat, "whole")
    assert cat.count("conv") == N
    assert len(cat.shards("conv")) == 2 * PARTS
    # A committed job's name is taken: rerunning it would write every record twice.
    with pytest.raises(JobExistsError, match="committed already"):
        shardcat.write(
            _bag(),
            str(root),
            catalog=sqlite_url,
            dataset="conv",
            job_name="nightly",
            mode="append",
            client=client,
            progress=False,
        )
