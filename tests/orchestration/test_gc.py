"""shardcat gc: leftovers of failed and killed jobs are found and removed, nothing live is touched."""

from __future__ import annotations

import datetime as dt

import dask
import dask.bag as db
import pytest

import shardcat
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

from .samples import FailLate, make_samples, partition_with

NOW = dt.timedelta(0)


def test_gc_removes_the_shards_of_a_failed_job_and_orphans_but_not_live_data(
    client, tmp_path, sqlite_url
):
    root = tmp_path / "ds"
    shardcat.write(
        db.from_delayed([dask.delayed(make_samples)(p, 100, "ok") for p in range(2)]),
        str(root),
        catalog=sqlite_url,
        dataset="g",
        client=client,
        progress=False,
    )
    live = sorted(root.glob("*.shard"))
    parts = [dask.delayed(make_samples)(p, 100, "bad") for p in range(2)]
    # Fails once the other partitions have staged their shards (those stay behind).
    parts.append(dask.delayed(partition_with)(2, 100, FailLate, 10, "3"))
    with pytest.raises(RuntimeError):
        shardcat.write(
            db.from_delayed(parts),
            str(root),
            catalog=sqlite_url,
            dataset="g",
            mode="append",
            client=client,
            retries=0,
            progress=False,
        )
    failed = sorted(set(root.glob("*.shard")) - set(live))
    assert failed  # the failed job's finished partitions left objects behind
    (root / ".g-000099-000.shard.abcdef.partial").write_bytes(b"half a shard")  # a killed writer
    (root / "notes.txt").write_text("not ours")

    cat = Catalog(sqlite_url)
    dry = gc(cat, "g", dry_run=True, grace=NOW)
    assert sorted(dry.deleted_shards) == sorted(str(p) for p in failed)
    assert [u.rsplit("/", 1)[1] for u in dry.orphans] == [".g-000099-000.shard.abcdef.partial"]
    assert all(p.exists() for p in failed)  # a dry run changes nothing

    report = gc(cat, "g", grace=NOW)
    assert report.removed == len(failed) + 1
    assert not any(p.exists() for p in failed)
    assert not (root / ".g-000099-000.shard.abcdef.partial").exists()
    assert (root / "notes.txt").exists()
    assert all(p.exists() for p in live)
    assert cat.shards("g", state="deleted") == []
    assert sum(s.record_count for s in cat.shards("g")) == 200
    assert cat.verify("g").ok
    assert gc(cat, "g", grace=NOW).removed == 0  # idempotent


def test_gc_aborts_stale_open_jobs_and_spares_young_files(tmp_path, sqlite_url):
    cat = Catalog(sqlite_url)
    cat.create_dataset("h", str(tmp_path / "h"))
    job = cat.begin_job("h")  # a client that died before committing
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "h-000000-000.shard").write_bytes(b"written, never registered")
    young = gc(cat, "h")  # default grace and staleness: too young to touch
    assert young.aborted_jobs == []
    assert young.orphans == []
    old = gc(cat, "h", grace=NOW, stale_after=NOW)
    assert old.aborted_jobs == [job.id]
    assert cat.job(job.id).state == "aborted"
    assert not (tmp_path / "h" / "h-000000-000.shard").exists()


def test_gc_never_removes_the_shards_of_another_dataset_in_the_same_folder(
    client, tmp_path, sqlite_url
):
    root = str(tmp_path / "shared")
    for name in ("left", "right"):
        shardcat.write(
            db.from_delayed([dask.delayed(make_samples)(0, 30, name)]),
            root,
            catalog=sqlite_url,
            dataset=name,
            client=client,
            progress=False,
        )
    cat = Catalog(sqlite_url)
    before = sorted((tmp_path / "shared").glob("*.shard"))
    assert len(before) == 2
    for name in ("left", "right"):
        assert gc(cat, name, grace=NOW).orphans == []
    assert sorted((tmp_path / "shared").glob("*.shard")) == before


def test_gc_keeps_what_kept_versions_read_and_reports_sizes_and_reasons(catalog_url, tmp_path):
    """Replaced shards stay while a kept (or tagged) version reads them; then gc reclaims them."""
    root = tmp_path / "ds"
    root.mkdir()
    cat = Catalog(catalog_url)
    cat.create_dataset("ds", str(root))
    infos = []
    for n in range(3):
        with shardcat.ShardWriter(str(root / f"s{n}.shard")) as w:
            for i in range(20):
                w.add(f"k{i:02d}", {"txt": f"{i}@{n}"})
        infos.append(w.close())
        job = cat.begin_job("ds")
        cat.register_shard("ds", infos[-1], job=job)
        cat.commit_job(job, replace=True)  # each version is one shard
    cat.tag("ds", 1, "keep")
    report = gc(cat, "ds", grace=NOW)
    assert report.deleted_shards == [] and report.bytes == 0
    assert cat.expire("ds", keep_last=1).expired == [2]
    dry = gc(cat, "ds", grace=NOW, dry_run=True)
    old = str(root / "s1.shard")
    assert dry.deleted_shards == [old]
    assert dry.sizes[old] == infos[1].size and dry.bytes == infos[1].size
    assert "no kept version reads it" in dry.reasons[old]
    assert "would remove" in str(dry) and (root / "s1.shard").exists()
    done = gc(cat, "ds", grace=NOW)
    assert done.deleted_shards == [old] and done.bytes == infos[1].size
    assert not (root / "s1.shard").exists()
    assert (root / "s0.shard").exists()  # tagged version 1 still reads it
    assert cat.get("ds", "k03", version="keep")["txt"].decode() == "3@0"
    assert cat.get("ds", "k03")["txt"].decode() == "3@2"
    cat.close()
