"""A resumed job given other inputs than its first run is refused, naming what differs.

Reproduces issue 30 ("High: a resumed job silently mixes two inputs"): a
named write killed with shards staged, rerun with the same keys but other
values, committed the killed run's finished partitions beside the new
run's others, without a word. The job now records a fingerprint of its
inputs when it begins (``properties["inputs"]``, orchestration/inputs.py)
and a resume compares it.
"""

from __future__ import annotations

import functools
import logging
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import dask.bag as db
import pytest

import shardcat
from shardcat.errors import JobExistsError, JobInputsChangedError
from shardcat.reading import Catalog

from .killclient import kill_client
from .samples import valued_sample

N, PARTS, PER_SHARD = 400, 8, 25  # two shards per partition

CLIENT = textwrap.dedent(
    """
    import functools, os, sys, time
    # the samples module under the name the tests import it by (and so do its workers)
    sys.path.insert(0, os.path.abspath("tests"))
    import dask.bag as db
    import shardcat
    from orchestration.samples import SLOW_ENV, valued_sample

    url, catalog = sys.argv[1], sys.argv[2]

    def progress(event):
        if event.done_partitions >= 3:
            print("READY", flush=True)
            time.sleep(120)  # the test SIGKILLs us here

    if __name__ == "__main__":
        # The last partition's last 10 samples take 3 s each: it is in flight at the kill
        # (slow through the environment its workers inherit: the bag is the rerun's).
        os.environ[SLOW_ENV] = "390:3.0"
        bag = db.from_sequence(range(400), npartitions=8).map(
            functools.partial(valued_sample, tag="first")
        )
        shardcat.write(bag, url, catalog=catalog, dataset="conv", job_name="J",
                       max_records_per_shard=25, progress=progress)
    """
)


def _bag(tag: str) -> db.Bag:
    """The bag of the killed client (tag "first"), or the same keys with other values."""
    return db.from_sequence(range(N), npartitions=PARTS).map(
        functools.partial(valued_sample, tag=tag)
    )


def _tags(cat: Catalog, dataset: str) -> dict[str, int]:
    batch = cat.get_many(dataset, [f"t/{i:05d}" for i in range(N)])
    assert batch.missing == []
    out: dict[str, int] = {}
    for r in batch.records:
        tag = r["json"].decode()["tag"]
        out[tag] = out.get(tag, 0) + 1
    return out


def test_a_killed_job_rerun_with_other_values_is_refused_and_resumes_with_its_own(
    tmp_path, catalog_url, client
):
    """Before: the rerun committed 150 records of the killed run ("first") and 250 of the
    new one ("second"), no error."""
    root = tmp_path / "conv"
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    kill_client(script, [str(root), catalog_url], until="READY")
    cat = Catalog(catalog_url)
    (job,) = cat.jobs("conv", state="open")
    staged = [s for s in cat.shards("conv", state="staged") if s.job_id == job.id]
    assert len(staged) >= 6  # three finished partitions of two shards
    assert job.properties is not None and job.properties["inputs"]["kind"] == "dask"
    options: dict[str, Any] = {
        "catalog": catalog_url,
        "dataset": "conv",
        "job_name": "J",
        "max_records_per_shard": PER_SHARD,
        "client": client,
        "progress": False,
    }
    with pytest.raises(JobInputsChangedError, match="the Dask collection differs") as e:
        shardcat.write(_bag("second"), str(root), **options)
    assert isinstance(e.value, JobExistsError) and isinstance(e.value, ValueError)
    assert "allow_changed_inputs=True" in str(e.value) and f"job {job.id} ('J')" in str(e.value)
    assert "--allow-changed-inputs" in e.value.render("cli")
    assert cat.job(job.id).state == "open" and cat.count("conv") == 0  # untouched, resumable
    # The same inputs as the killed run: resumed, every record from them.
    summary = shardcat.write(_bag("first"), str(root), **options)
    assert summary.job_id == job.id and summary.resumed_partitions >= 3
    assert _tags(cat, "conv") == {"first": N}
    cat.close()


def _interrupt_after(parts: int) -> Any:
    def progress(event: Any) -> None:
        if event.done_partitions >= parts:
            raise KeyboardInterrupt  # Ctrl-C in the client: a named job stays open

    return progress


def test_the_override_resumes_with_changed_inputs_and_says_so(tmp_path, sqlite_url, client, caplog):
    root = str(tmp_path / "over")
    options: dict[str, Any] = {
        "catalog": sqlite_url,
        "dataset": "over",
        "job_name": "over",
        "max_records_per_shard": PER_SHARD,
        "client": client,
    }
    first, second = _bag("first"), _bag("second")
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(first, root, progress=_interrupt_after(3), **options)
    with pytest.raises(JobInputsChangedError):
        shardcat.write(second, root, progress=False, **options)
    with caplog.at_level(logging.WARNING, logger="shardcat.orchestration.resume"):
        summary = shardcat.write(second, root, progress=False, allow_changed_inputs=True, **options)
    assert "with changed inputs" in caplog.text
    kept = summary.resumed_partitions
    assert kept >= 3
    with Catalog(sqlite_url) as cat:
        # What the override means: the finished partitions keep the first run's values.
        assert _tags(cat, "over") == {"first": kept * N // PARTS, "second": N - kept * N // PARTS}


def test_lists_and_generators(tmp_path, sqlite_url, client):
    root = str(tmp_path / "lists")
    options: dict[str, Any] = {
        "catalog": sqlite_url,
        "dataset": "lists",
        "job_name": "lists",
        "batch_size": 50,  # 8 partitions
        "max_records_per_shard": PER_SHARD,
        "client": client,
    }
    first = [valued_sample(i, "first") for i in range(N)]
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(first, root, progress=_interrupt_after(3), **options)
    changed = [valued_sample(i, "first") for i in range(N)]
    changed[-1] = valued_sample(N - 1, "second")  # one value, in an unfinished partition
    with pytest.raises(JobInputsChangedError, match="the samples differ"):
        shardcat.write(changed, root, progress=False, **options)
    with pytest.raises(JobInputsChangedError, match="can be read once only"):
        shardcat.write(iter(first), root, progress=False, **options)
    summary = shardcat.write(list(first), root, progress=False, **options)  # equal contents
    assert summary.resumed_partitions >= 3
    with Catalog(sqlite_url) as cat:
        assert _tags(cat, "lists") == {"first": N}


def _files(folder: Path, count: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"s{i:03d}.txt").write_text(f"sample {i} " * 20)  # ~200 bytes each


def _packing(
    tmp_path: Path, sqlite_url: str, client: Any, name: str, count: int
) -> tuple[Path, str, dict[str, Any]]:
    """``count`` files under ``tmp_path/src``, the dataset's folder, and the options of a
    write of them as job ``name``."""
    src = tmp_path / "src"
    _files(src, count)
    options: dict[str, Any] = {
        "catalog": sqlite_url,
        "dataset": name,
        "job_name": name,
        "shard_size": 1000,  # a few samples per partition
        "client": client,
    }
    return src, str(tmp_path / name), options


def test_packed_files_changed_on_disk_are_refused(tmp_path, sqlite_url, client):
    src, root, options = _packing(tmp_path, sqlite_url, client, "packed", 40)
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(shardcat.from_files(str(src)), root, progress=_interrupt_after(2), **options)
    with Catalog(sqlite_url) as cat:
        (job,) = cat.jobs("packed", state="open")
        assert job.properties is not None
        recorded = job.properties["inputs"]
        assert recorded["kind"] == "files" and recorded["files"] == 40
    # One file rewritten with other bytes of the same size, its mtime moved on.
    victim = src / "s020.txt"
    victim.write_text(victim.read_text().replace("sample", "SAMPLE"))
    later = time.time() + 10
    os.utime(victim, (later, later))
    with pytest.raises(
        JobInputsChangedError, match=r"partition \d+ \(keys 's0\d\d' \.\. 's0\d\d'\)"
    ):
        shardcat.write(shardcat.from_files(str(src)), root, progress=False, **options)
    # A file added: the counts say so too.
    (src / "s999.txt").write_text("new")
    with pytest.raises(JobInputsChangedError, match=r"41 files of .* now, 40 of .* then"):
        shardcat.write(shardcat.from_files(str(src)), root, progress=False, **options)
    (src / "s999.txt").unlink()
    summary = shardcat.write(
        shardcat.from_files(str(src)), root, progress=False, allow_changed_inputs=True, **options
    )
    assert summary.resumed_partitions >= 2 and summary.records == 40


def test_unchanged_packed_files_resume(tmp_path, sqlite_url, client):
    src, root, options = _packing(tmp_path, sqlite_url, client, "same", 30)
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(shardcat.from_files(str(src)), root, progress=_interrupt_after(2), **options)
    summary = shardcat.write(shardcat.from_files(str(src)), root, progress=False, **options)
    assert summary.resumed_partitions >= 2 and summary.records == 30


def test_the_cli_refuses_changed_files_and_names_its_flag(tmp_path, sqlite_url, client):
    from _forkrun import Call, completed

    src = tmp_path / "src"
    _files(src, 20)
    root = str(tmp_path / "cli")
    with pytest.raises(KeyboardInterrupt):
        shardcat.write(
            shardcat.from_files(str(src)), root, catalog=sqlite_url, dataset="cli",
            job_name="cli", shard_size=1000, client=client, progress=_interrupt_after(1),
        )  # fmt: skip
    (src / "s005.txt").write_text("x" * 300)  # resized
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAT_")}
    (p,) = completed(
        [
            Call(
                ["--catalog", sqlite_url, "write", str(src), root, "-d", "cli",
                 "--job-name", "cli", "--shard-size", "1000", "--workers", "1"],
                env, os.getcwd(), timeout=180,
            )
        ]
    )  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "cannot resume job" in p.stderr and "add --allow-changed-inputs" in p.stderr
    assert "Traceback" not in p.stderr
