"""compact: mostly-dead shards are rewritten as one version; every key reads the same bytes."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import dask.bag as db
import pytest

import shardcat
from shardcat.catalog import internal
from shardcat.errors import ChecksumError
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

from .samples import make_samples

NOW = dt.timedelta(0)
PARTS, PER = 3, 40


def _write(root: Path, url: str, client: Any) -> list[str]:
    shardcat.write(
        db.from_sequence(range(PARTS), npartitions=PARTS).map(make_samples, PER).flatten(),
        str(root),
        catalog=url,
        dataset="c",
        max_records_per_shard=20,
        client=client,
        progress=False,
    )
    return [f"s/{p:03d}/{i:05d}" for p in range(PARTS) for i in range(PER)]


def _snapshot(cat: Catalog, keys: list[str], version: int | None = None) -> dict[str, Any]:
    batch = cat.get_many("c", keys, version=version)
    return {
        r.key: (r["bin"].data, r["json"].decode(), r["npy"].decode().tolist())
        for r in batch.records
        if r is not None
    }


def test_compact_rewrites_sparse_shards_and_gc_reclaims_them(tmp_path, catalog_url, client):
    keys = _write(tmp_path / "c", catalog_url, client)
    cat = Catalog(catalog_url)
    shards = cat.shards("c")
    assert len(shards) == 6
    # Three shards lose 15 of their 20 records (25 % live), one loses 5 (75 %), two none.
    sparse = {s.url for s in shards[:3]}
    gone = []
    for shard in shards[:3]:
        gone += [r.key for r in internal.record_rows(cat, shard.id)][:15]
    gone += [r.key for r in internal.record_rows(cat, shards[3].id)][:5]
    before_delete = cat.info("c").version
    cat.delete_keys("c", gone)
    live = [k for k in keys if k not in set(gone)]
    latest = _snapshot(cat, keys)
    assert set(latest) == set(live)
    old = _snapshot(cat, keys, version=before_delete)
    assert set(old) == set(keys)

    summary = shardcat.compact(catalog_url, "c", min_live=0.5, shard_size="1MB", client=client)

    assert set(summary.compacted) == sparse
    assert summary.records == 15
    assert summary.tar_shards == 0
    assert len(summary.kept) == 3
    assert summary.bytes_after < summary.bytes_before
    top = cat.log("c")[0]
    assert (top.number, top.operation) == (summary.version, "compact")
    assert top.total_records == len(live)
    now = {s.url for s in cat.shards("c")}
    assert not now & sparse and set(summary.written) <= now
    # Every key: same bytes at the latest version; older versions still read the old shards.
    assert _snapshot(cat, keys) == latest
    assert _snapshot(cat, keys, version=before_delete) == old
    assert cat.locate("c", live[0]).url in summary.written
    assert cat.locate("c", live[0], version=before_delete).url in sparse
    assert cat.verify("c").ok
    # Nothing sparse is left: a second run does nothing; a higher threshold takes the 75 % shard.
    again = shardcat.compact(catalog_url, "c", min_live=0.5, client=client)
    assert again.version is None and cat.log("c")[0].number == summary.version
    third = shardcat.compact(catalog_url, "c", min_live=0.8, client=client)
    assert third.compacted == [shards[3].url] and third.records == 15
    assert third.version == summary.version + 1
    assert _snapshot(cat, keys) == latest
    assert _snapshot(cat, keys, version=summary.version) == latest
    assert _snapshot(cat, keys, version=before_delete) == old

    # Once no kept version reads the old shards, gc reclaims their bytes.
    retired = {*sparse, shards[3].url}
    assert set(cat.expire("c", keep_last=1).retired_shards) == retired
    report = gc(cat, "c", grace=NOW)
    assert set(report.deleted_shards) == retired
    assert report.bytes == summary.bytes_before + third.bytes_before
    assert not any(Path(u).exists() for u in retired)
    assert _snapshot(cat, keys) == latest
    assert cat.verify("c").ok


def _sparse_first_shard(root: Path, url: str, client: Any) -> tuple[Catalog, list[str], list[str]]:
    """A dataset whose first shard keeps 2 of its 20 records; returns its keys and those 2."""
    keys = _write(root, url, client)
    cat = Catalog(url)
    first = [r.key for r in internal.record_rows(cat, cat.shards("c")[0].id)]
    cat.delete_keys("c", first[:18])
    return cat, keys, first[18:]


def _meanwhile(cat: Catalog, change: Any) -> None:
    """Run ``change`` (through another connection) between the tasks and the commit."""
    real_commit = Catalog.commit_job

    def commit_after_change(self: Catalog, job: Any, **kw: Any) -> Any:
        change()
        return real_commit(self, job, **kw)

    cat.commit_job = commit_after_change.__get__(cat)  # type: ignore[method-assign]


def test_a_key_deleted_while_compacting_stays_deleted(tmp_path, catalog_url, client):
    cat, keys, survivors = _sparse_first_shard(tmp_path / "c", catalog_url, client)
    latest = _snapshot(cat, keys)
    version = cat.info("c").version
    _meanwhile(cat, lambda: Catalog(catalog_url).delete_keys("c", survivors[:1]))
    summary = shardcat.compact(cat, "c", min_live=0.5, client=client)
    # The delete landed first; the compaction rewrote both survivors but serves only the other.
    assert summary.version == version + 2
    assert (summary.records, summary.superseded) == (1, 1)
    assert "1 rewritten record left out" in str(summary)
    assert [v.operation for v in cat.log("c")[:2]] == ["compact", "delete"]
    del latest[survivors[0]]
    assert _snapshot(cat, keys) == latest
    assert cat.log("c")[0].total_records == len(latest)
    assert cat.locate("c", survivors[1]).url in summary.written
    assert cat.jobs("c", state="open") == []
    assert cat.verify("c").ok


def _hundred(root: Path, url: str, client: Any) -> Catalog:
    """Issue 30's dataset: k000-k099 in 2 shards of 50, k000-k039 deleted (shard 1: 20 % live)."""
    shardcat.write(
        [{"__key__": f"k{i:03d}", "txt": f"v{i}"} for i in range(100)],
        str(root),
        catalog=url,
        dataset="c",
        max_records_per_shard=50,
        client=client,
        progress=False,
    )
    cat = Catalog(url)
    cat.delete_keys("c", [f"k{i:03d}" for i in range(40)])
    return cat


def _served(cat: Catalog, version: int | None = None) -> dict[str, str]:
    """What a version serves of every key the test ever wrote."""
    keys = [f"{p}{i:03d}" for p in "kx" for i in range(100)]
    batch = cat.get_many("c", keys, version=version)
    return {r.key: r["txt"].decode() for r in batch.records if r is not None}


@pytest.mark.parametrize("change", ["delete", "overwrite", "replace", "compact"])
def test_what_commits_while_compacting_is_never_undone(tmp_path, catalog_url, client, change):
    """Issue 30: the last live keys of the compacted shard change just before compaction commits.

    Before the fix, a delete of k040-k049 left 60 keys at the latest version instead of 50 (all
    ten deleted keys back) and an overwrite with x000-x009 left 20 instead of 10.
    """
    cat = _hundred(tmp_path / "c", catalog_url, client)
    other = Catalog(catalog_url)
    expected = {f"k{i:03d}": f"v{i}" for i in range(40, 100)}
    if change == "delete":
        meanwhile = lambda: other.delete_keys("c", [f"k{i:03d}" for i in range(40, 50)])  # noqa: E731
        for i in range(40, 50):
            del expected[f"k{i:03d}"]
    elif change == "overwrite":
        meanwhile = lambda: shardcat.write(  # noqa: E731
            [{"__key__": f"x{i:03d}", "txt": f"x{i}"} for i in range(10)],
            str(tmp_path / "c"),
            catalog=other,
            dataset="c",
            mode="overwrite",
            client=client,
            progress=False,
        )
        expected = {f"x{i:03d}": f"x{i}" for i in range(10)}
    elif change == "replace":
        meanwhile = lambda: shardcat.write(  # noqa: E731
            [{"__key__": f"k{i:03d}", "txt": f"new{i}"} for i in range(40, 45)],
            str(tmp_path / "c"),
            catalog=other,
            dataset="c",
            mode="append",
            on_duplicate="replace",
            client=client,
            progress=False,
        )
        expected.update({f"k{i:03d}": f"new{i}" for i in range(40, 45)})
    else:  # another compaction of the same shard got there first
        meanwhile = lambda: shardcat.compact(other, "c", min_live=0.5, client=client)  # noqa: E731
    _meanwhile(cat, meanwhile)
    summary = shardcat.compact(cat, "c", min_live=0.5, client=client)

    assert _served(cat) == expected
    top, before = cat.log("c")[:2]
    assert (top.operation, top.total_records) == ("compact", len(expected))
    assert before.total_records == len(expected)
    assert summary.records + summary.superseded == 10
    assert summary.records == {"delete": 0, "overwrite": 0, "replace": 5, "compact": 0}[change]
    # Every kept version still serves what it served when it was made.
    assert _served(cat, before.number) == expected
    assert cat.verify("c").ok
    # Compacting again finds the shards it left behind and changes nothing visible.
    shardcat.compact(cat, "c", min_live=0.5, client=client)
    assert _served(cat) == expected


def test_a_compaction_whose_version_is_expired_at_once_still_reports_it(
    tmp_path, sqlite_url, client
):
    """Found by the history checker: the summary read its version's row, which expire can drop."""
    cat = _hundred(tmp_path / "c", sqlite_url, client)
    other = Catalog(sqlite_url)
    real_commit = Catalog.commit_job

    def commit_then_expire(self: Catalog, job: Any, **kw: Any) -> Any:
        info = real_commit(self, job, **kw)
        other.delete_keys("c", ["k099"])
        other.expire("c", keep_last=1)
        return info

    cat.commit_job = commit_then_expire.__get__(cat)  # type: ignore[method-assign]
    summary = shardcat.compact(cat, "c", min_live=0.5, client=client)
    assert summary.version is not None and (summary.records, summary.superseded) == (10, 0)
    assert [v.operation for v in cat.log("c")] == ["delete"]
    assert len(_served(cat)) == 59


def test_compact_lands_after_a_commit_on_other_keys(tmp_path, catalog_url, client):
    cat, keys, survivors = _sparse_first_shard(tmp_path / "c", catalog_url, client)
    other = keys[-1]  # in the last shard, which is not compacted
    latest = _snapshot(cat, keys)
    version = cat.info("c").version
    _meanwhile(cat, lambda: Catalog(catalog_url).delete_keys("c", [other]))
    summary = shardcat.compact(cat, "c", min_live=0.5, client=client)
    assert summary.version == version + 2 and summary.records == len(survivors)
    assert [v.operation for v in cat.log("c")[:2]] == ["compact", "delete"]
    del latest[other]
    assert _snapshot(cat, keys) == latest
    assert all(cat.locate("c", k).url in summary.written for k in survivors)
    assert cat.verify("c").ok


def test_compact_refuses_a_damaged_shard_and_changes_nothing(tmp_path, sqlite_url, client):
    _write(tmp_path / "c", sqlite_url, client)
    cat = Catalog(sqlite_url)
    first = cat.shards("c")[0]
    rows = internal.record_rows(cat, first.id)
    cat.delete_keys("c", [r.key for r in rows][:15])
    version = cat.info("c").version
    path = Path(first.url)
    data = bytearray(path.read_bytes())
    last = rows[-1]
    at, size, _ = last.spans[[e[0] for e in last.entries].index("bin")]
    data[last.offset + at + size // 2] ^= 0xFF  # a payload byte of the last (live) record
    path.write_bytes(bytes(data))
    with pytest.raises(ChecksumError):
        shardcat.compact(cat, "c", client=client, retries=0)
    assert cat.info("c").version == version
    assert cat.jobs("c", state="open") == []
    assert {s.url for s in cat.shards("c")} >= {first.url}


def test_min_live_is_checked(sqlite_url):
    with pytest.raises(ValueError, match="min_live"):
        shardcat.compact(sqlite_url, "c", min_live=1.5)


def test_declared_fields_follow_their_records(tmp_path, catalog_url, client):
    shardcat.write(
        [{"__key__": f"k{i:03d}", "json": {"label": i % 3, "tag": f"t{i % 2}"}} for i in range(60)],
        str(tmp_path / "f"),
        catalog=catalog_url,
        dataset="f",
        fields={"label": int, "tag": str},
        max_records_per_shard=20,
        client=client,
        progress=False,
    )
    cat = Catalog(catalog_url)

    def chosen(where: str) -> list[str]:
        return sorted(k for ks in cat.select("f", where).keys.values() for k in ks)

    cat.delete_keys("f", [f"k{i:03d}" for i in range(0, 60, 4)])  # every shard 75 % live
    before = {w: chosen(w) for w in ("label = 1", "tag = 't0'", "label = 2 AND tag = 't1'")}
    assert all(before.values())
    summary = shardcat.compact(cat, "f", min_live=0.8, shard_size="16kB", client=client)
    assert len(summary.compacted) == 3 and summary.records == 45
    assert {w: chosen(w) for w in before} == before
    assert all(s.url in summary.written for s in cat.shards("f"))


def test_tar_shards_are_never_compacted(tmp_path, sqlite_url, client):
    from shardcat.testing.tars import wds_samples, write_wds_tar

    tar = write_wds_tar(tmp_path / "train-000000.tar", n=20, seed=1, prefix="t-")
    shardcat.index_tar([str(tar)], catalog=sqlite_url, dataset="wds", client=client)
    cat = Catalog(sqlite_url)
    keys = [s["__key__"] for s in wds_samples(tar)]
    cat.delete_keys("wds", keys[:18])  # 10 % live
    version = cat.info("wds").version
    summary = shardcat.compact(cat, "wds", min_live=0.5, client=client)
    assert (summary.version, summary.tar_shards, summary.compacted) == (None, 1, [])
    assert "1 tar shard never compacted" in str(summary)
    assert cat.info("wds").version == version
    assert [j for j in cat.jobs("wds") if j.description == "shardcat.compact"] == []
    assert [s.url for s in cat.shards("wds")] == [str(tar)]


def test_compact_on_s3_then_gc(postgres_url, s3, client):
    opts = s3["storage_options"]
    shardcat.write(
        db.from_sequence(range(2), npartitions=2).map(make_samples, 30).flatten(),
        f"{s3['url']}/c",
        catalog=postgres_url,
        dataset="c",
        max_records_per_shard=15,
        storage_options=opts,
        client=client,
        progress=False,
    )
    cat = Catalog(postgres_url, storage_options=opts)
    keys = [f"s/{p:03d}/{i:05d}" for p in range(2) for i in range(30)]
    cat.delete_keys("c", keys[:12])  # the first shard keeps 3 of 15
    latest = _snapshot(cat, keys)
    summary = shardcat.compact(cat, "c", min_live=0.5, client=client)
    assert summary.records == 3 and all(u.startswith("s3://") for u in summary.written)
    assert _snapshot(cat, keys) == latest
    assert cat.verify("c").ok
    cat.expire("c", keep_last=1)
    report = gc(cat, "c", grace=NOW)
    assert report.deleted_shards == summary.compacted
    assert _snapshot(cat, keys) == latest


def test_a_task_of_an_aborted_job_stages_nothing_and_leaves_no_file(tmp_path, sqlite_url, client):
    from shardcat.errors import CommitConflictError
    from shardcat.orchestration.compact import Source, compact_group
    from shardcat.orchestration.plan import WritePlan

    _write(tmp_path / "c", sqlite_url, client)
    cat = Catalog(sqlite_url)
    first = cat.shards("c")[0]
    job = cat.begin_job("c")
    cat.abort_job(job)  # the client gave up before this task ran
    plan = WritePlan(
        dataset="c", root=str(tmp_path / "c"), prefix="c", job_id=job.id, catalog=cat.handle()
    )
    before = set(os.listdir(tmp_path / "c"))
    source = Source(first.url, first.id, first.file_id, first.data_crc, frozenset())
    with pytest.raises(CommitConflictError):
        compact_group(plan, 0, [source])
    assert set(os.listdir(tmp_path / "c")) == before
    assert cat.job(job.id).shard_count == 0
