"""A dataset on Azure (adlfs against Azurite), end to end: write, get, inspect, verify,
reindex and read, through the library and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat import open_shard


@pytest.fixture(scope="module")
def client():
    """One worker process: the shards are written by a real Dask worker."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None
        ) as c,
        Client(c) as cl,
    ):
        yield cl


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "shardcat", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def samples(n: int) -> list[dict[str, Any]]:
    return [{"__key__": f"k{i:04d}", "txt": f"value {i}", "json": {"i": i}} for i in range(n)]


def test_a_dataset_on_azure(azure, tmp_path: Path, client):
    opts = azure["storage_options"]
    root = f"{azure['url']}/datasets/train"
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    summary = shardcat.write(
        samples(300),
        root,
        catalog=catalog,
        dataset="train",
        shard_size="16KB",
        storage_options=opts,
        client=client,
        progress=False,
    )
    assert summary.records == 300 and len(summary.shards) > 1

    with shardcat.Catalog(catalog, storage_options=opts) as cat:
        assert cat.get("train", "k0123")["txt"].decode() == "value 123"
        batch = cat.get_many("train", ["k0001", "k0299", "k0150"])
        assert [r["json"].decode()["i"] for r in batch] == [1, 299, 150]
        # verify and reindex read every footer from the tail of a blob.
        report = cat.verify("train")
        assert report.ok, report
        rows = cat.reindex("train", summary.shards)
        assert sum(r.record_count for r in rows) == 300
        assert cat.get("train", "k0299")["txt"].decode() == "value 299"

    # The reader, straight from a URL, and shardcat.read (a Dask bag, one partition per shard).
    with open_shard(summary.shards[0], opts) as reader:
        assert len(reader) > 0 and reader.verify().records == len(reader)
    keys = sorted(s["__key__"] for s in shardcat.read(catalog, "train", storage_options=opts))
    assert keys == [f"k{i:04d}" for i in range(300)]

    options = ["-c", catalog, "--json", "-S", f"connection_string={azure['connection_string']}"]
    inspected = cli(*options, "inspect", summary.shards[0])
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["shard"]["records"] > 0
    verified = cli(*options, "verify", "train")
    assert verified.returncode == 0, verified.stderr
    # The account key never shows, in output or errors.
    assert all("Eby8vdM0" not in p.stdout + p.stderr for p in (inspected, verified))
