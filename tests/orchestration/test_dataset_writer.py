"""shardcat.DatasetWriter: a dataset written from one process and committed as one version.

Real catalogs (SQLite files, in-memory SQLite, PostgreSQL) and real stores
(local folders, S3 through moto); no Dask.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from typing import Any

import pytest

import shardcat
from shardcat.errors import (
    CommitConflictError,
    DatasetExistsError,
    DuplicateKeyError,
    KeyNotFoundError,
    WriterClosedError,
)
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

NOW = dt.timedelta(0)


def samples(n: int, start: int = 0, tag: bytes = b"") -> list[dict[str, Any]]:
    return [
        {"__key__": f"k{i:05d}", "bin": tag + bytes([i % 251]) * (200 + i % 300), "json": {"i": i}}
        for i in range(start, start + n)
    ]


def test_a_dataset_is_written_staged_as_it_goes_and_committed_at_the_end(catalog_url, tmp_path):
    root = str(tmp_path / "train")
    with Catalog(catalog_url) as cat:
        with shardcat.DatasetWriter(
            cat, "train", root, shard_size="64KB", message="first load"
        ) as w:
            for s in samples(2000):
                w.write(s)
            # Mid-way: shards are published and staged, none is visible.
            assert len(w._writer.shards) > 3
            staged = cat.shards("train", state="staged")
            assert len(staged) >= len(w._writer.shards)  # each one staged once published
            assert cat.count("train") == 0
            with pytest.raises(KeyNotFoundError):
                cat.get("train", "k00000")
        summary = w.summary
        assert summary is not None and summary.records == 2000 and summary.partitions == 1
        assert cat.count("train") == 2000
        assert cat.get("train", "k01999")["bin"].data == bytes([1999 % 251]) * (200 + 1999 % 300)
        assert cat.get("train", "k00007")["json"].decode() == {"i": 7}
        assert cat.log("train")[0].message == "first load"
        assert all(f"-j{summary.job_id}-" in os.path.basename(u) for u in summary.shards)
        assert cat.verify("train").ok


def test_an_error_in_the_block_aborts_the_job_and_gc_removes_its_shards(sqlite_url, tmp_path):
    root = str(tmp_path / "train")

    def fail_half_way() -> None:
        with shardcat.DatasetWriter(sqlite_url, "train", root, shard_size="64KB") as w:
            for s in samples(1000):
                w.write(s)
            raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        fail_half_way()
    with Catalog(sqlite_url) as cat:
        # The writer created the dataset: it goes, with the shards it published.
        assert cat.datasets() == []
        assert [f for f in os.listdir(root) if f.endswith(".shard")] == []
        # Into a dataset that existed, the aborted job's shards stay for gc.
        cat.create_dataset("train", root)
        with pytest.raises(RuntimeError, match="the source broke"):
            fail_half_way()
        assert cat.count("train") == 0
        assert [j.state for j in cat.jobs("train")] == ["aborted"]
        assert os.listdir(root)  # published shards stay for gc
        report = gc(cat, "train", grace=NOW)
        assert report.removed > 0
        assert [f for f in os.listdir(root) if f.endswith(".shard")] == []


def test_modes_create_append_and_overwrite(sqlite_url, tmp_path):
    root = str(tmp_path / "d")
    with shardcat.DatasetWriter(sqlite_url, "d", root) as w:
        for s in samples(100):
            w.write(s)
    with pytest.raises(DatasetExistsError):
        shardcat.DatasetWriter(sqlite_url, "d", root)
    with shardcat.DatasetWriter(sqlite_url, "d", root, mode="append") as w:
        for s in samples(50, start=100):
            w.write(s)
    with shardcat.DatasetWriter(sqlite_url, "d", root, mode="append", on_duplicate="replace") as w:
        w.write(samples(1, start=3, tag=b"new")[0])
    with Catalog(sqlite_url) as cat:
        assert cat.count("d") == 150
        assert cat.get("d", "k00003")["bin"].data.startswith(b"new")
    with shardcat.DatasetWriter(sqlite_url, "d", root, mode="overwrite") as w:
        for s in samples(10, start=500):
            w.write(s)
    with Catalog(sqlite_url) as cat:
        assert cat.count("d") == 10
        assert [v.operation for v in cat.log("d")] == ["overwrite", "append", "append", "write"]


def test_a_duplicate_key_aborts_the_job_at_the_commit(sqlite_url, tmp_path):
    root = str(tmp_path / "d")

    def twice() -> None:
        with shardcat.DatasetWriter(sqlite_url, "d", root, shard_size="16KB") as w:
            for s in samples(200) + samples(1, start=10):  # k00010 again, in another shard
                w.write(s)

    with pytest.raises(DuplicateKeyError, match="k00010"):
        twice()
    with Catalog(sqlite_url) as cat:
        assert cat.datasets() == []  # its first job failed: nothing is left


def test_an_overwrite_that_lost_a_race_commits_nothing(sqlite_url, tmp_path):
    root = str(tmp_path / "d")
    with shardcat.DatasetWriter(sqlite_url, "d", root) as w:
        w.write(samples(1)[0])
    slow = shardcat.DatasetWriter(sqlite_url, "d", root, mode="overwrite")
    slow.write(samples(1, start=1)[0])
    with shardcat.DatasetWriter(sqlite_url, "d", root, mode="append") as w:
        w.write(samples(1, start=2)[0])  # commits first
    with pytest.raises(CommitConflictError):
        slow.close()
    with pytest.raises(WriterClosedError):
        slow.write(samples(1, start=3)[0])
    with Catalog(sqlite_url) as cat:
        assert sorted(cat.keys("d")) == ["k00000", "k00002"]


def test_an_in_memory_catalog(tmp_path):
    with Catalog("sqlite://") as cat:
        with shardcat.DatasetWriter(cat, "m", str(tmp_path / "m"), shard_size="16KB") as w:
            for s in samples(300):
                w.write(s)
        assert cat.count("m") == 300
        assert cat.get("m", "k00299")["json"].decode() == {"i": 299}


def test_a_dataset_on_s3(s3, sqlite_url):
    url = f"{s3['url']}/datasets/train"
    options = s3["storage_options"]
    with shardcat.DatasetWriter(
        sqlite_url, "train", url, shard_size="32KB", storage_options=options
    ) as w:
        for s in samples(500):
            w.add(s["__key__"], {"bin": s["bin"]})
    assert w.summary is not None and len(w.summary.shards) > 2
    with Catalog(sqlite_url, storage_options=options) as cat:
        assert cat.count("train") == 500
        assert cat.get("train", "k00123")["bin"].data == bytes([123]) * 323
        assert "testing" not in str(w.summary)  # no credential in what is reported


def test_writing_needs_no_dask(tmp_path):
    """The core install can write a dataset: nothing of dask or distributed is imported."""
    code = (
        "import sys, shardcat\n"
        f"with shardcat.DatasetWriter('sqlite:///{tmp_path}/c.db', 'd', '{tmp_path}/d') as w:\n"
        "    w.write({'__key__': 'a', 'txt': 'x'})\n"
        "assert w.summary.records == 1\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
