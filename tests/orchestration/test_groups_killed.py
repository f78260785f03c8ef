"""A worker process killed (SIGKILL) in the middle of ``add_entries``: the group commits once."""

from __future__ import annotations

import dask
import dask.bag as db

import shardcat
from shardcat.reading import Catalog

from .samples import KillOnce, make_samples


def captions_of(partition: int, count: int) -> list[dict]:
    return [
        {"__key__": f"s/{partition:03d}/{i:05d}", "txt": f"caption {partition} {i} " * 20}
        for i in range(count)
    ]


def captions_with(partition: int, count: int, at: int, marker: str) -> list:
    samples: list = captions_of(partition, count)
    samples[at] = KillOnce(samples[at], marker)
    return samples


def test_worker_killed_mid_add_entries_commits_every_entry_once(tmp_path, catalog_url):
    from distributed import Client, LocalCluster

    marker = str(tmp_path / "killed")
    base = [dask.delayed(make_samples)(p, 200) for p in range(4)]
    # Partition 3 of the group kills its worker after its first shards are written and staged.
    parts = [dask.delayed(captions_of)(p, 200) for p in range(3)]
    parts.append(dask.delayed(captions_with)(3, 200, 150, marker))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
        Catalog(catalog_url) as cat,
    ):
        shardcat.write(
            db.from_delayed(base),
            str(tmp_path / "ds"),
            catalog=cat,
            dataset="train",
            client=client,
            progress=False,
        )
        before = cat.info("train").version
        summary = shardcat.add_entries(
            db.from_delayed(parts),
            catalog=cat,
            dataset="train",
            group="captions",
            shard_size="8KB",
            client=client,
            progress=False,
        )
        assert (tmp_path / "killed").exists()  # the kill really happened
        assert summary.records == 800
        assert cat.info("train").version == before + 1  # one commit
        (g,) = cat.groups("train")
        assert (g.name, g.records) == ("captions", 800)
        keys = [f"s/{p:03d}/{i:05d}" for p in range(4) for i in range(200)]
        got = cat.get_many("train", keys)
        assert got.ok
        assert all(set(r) == {"bin", "json", "npy", "txt"} for r in got.records)
        assert cat.get("train", "s/003/00199")["txt"].decode() == "caption 3 199 " * 20
        assert cat.count("train") == 800  # samples: base records only
        report = cat.verify("train")
        assert report.ok, str(report)
        # The killed attempt wrote group shards that the commit left out (gc's to remove).
        committed = {s.url for s in cat.shards("train")}
        written = {str(p) for p in (tmp_path / "ds").glob("train.captions-*.shard")}
        assert written - committed, "nothing was left behind: did the kill happen mid-write?"
