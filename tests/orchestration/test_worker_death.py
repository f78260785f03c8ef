"""A worker process killed (SIGKILL) in the middle of writing: the job still commits every record once."""

from __future__ import annotations

import datetime as dt

import dask
import dask.bag as db

import shardcat
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

from .samples import KillOnce, make_samples, partition_with


def test_worker_killed_mid_write_job_completes_with_every_record_exactly_once(
    tmp_path, catalog_url
):
    from distributed import Client, LocalCluster

    marker = str(tmp_path / "killed")
    parts = [dask.delayed(make_samples)(p, 300) for p in range(3)]
    # Partition 3 kills its worker after its first shards are written and staged.
    parts.append(dask.delayed(partition_with)(3, 300, KillOnce, 250, marker))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        summary = shardcat.write(
            db.from_delayed(parts),
            str(tmp_path / "ds"),
            catalog=catalog_url,
            dataset="killed",
            shard_size="80KB",
            client=client,
            progress=False,
        )
        assert (tmp_path / "killed").exists()  # the kill really happened
        cat = Catalog(catalog_url)
        keys = shardcat.read(cat, "killed").pluck("__key__").compute()
    assert summary.records == 1200
    assert len(keys) == len(set(keys)) == 1200
    shards = cat.shards("killed")
    assert sum(s.record_count for s in shards) == 1200
    assert len({s.url for s in shards}) == len(shards)
    # Every committed shard is complete and agrees with the catalog.
    report = cat.verify("killed")
    assert report.ok, str(report)
    assert cat.get("killed", "s/003/00299")["json"].decode() == {"partition": 3, "i": 299}
    # What the killed attempt left (its staged shards, retired at commit; a .partial
    # file) is gc's: afterwards the dataset's folder holds exactly the committed shards.
    leftovers = {
        str(p) for p in (tmp_path / "ds").rglob("*") if p.is_file() and "_versions" not in p.parts
    } - {s.url for s in shards}
    assert leftovers, "the killed attempt left nothing behind: did the kill happen mid-write?"
    report = gc(cat, "killed", grace=dt.timedelta(0), stale_after=dt.timedelta(0))
    assert set(report.deleted_shards) | set(report.orphans) == leftovers
    assert report.errors == [] and report.aborted_jobs == []
    assert {
        str(p) for p in (tmp_path / "ds").rglob("*") if p.is_file() and "_versions" not in p.parts
    } == {s.url for s in shards}
    assert cat.verify("killed").ok
    print(f"worker killed: {len(leftovers)} leftover file(s) removed by gc, 1200 records once")
