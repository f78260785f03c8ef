"""A write with ``on_duplicate="skip"`` reports what its version serves, and leaves no dead shard.

What a team's trial met: an append of keys the dataset had, with
``--on-duplicate skip``, said "committed 10 records" when the version added
none. The summary now counts what the version serves and says how many
records it left out; a shard whose every record was skipped is read by no
version, is not listed, and ``gc`` removes its file.

Real catalogs (SQLite, PostgreSQL), a real Dask cluster with worker processes.
"""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import dask.bag as db
import pytest

import shardcat
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog


def _samples(keys: range, tag: str) -> list[dict[str, Any]]:
    return [{"__key__": f"k{i:03d}", "txt": f"{tag}{i}"} for i in keys]


def _write(catalog_url: str, root: str, keys: range, tag: str, client: Any, **kw: Any) -> Any:
    return shardcat.write(
        db.from_sequence(_samples(keys, tag), npartitions=1),
        root,
        catalog=catalog_url,
        dataset="d",
        client=client,
        progress=False,
        max_records_per_shard=5,
        **kw,
    )


def test_a_skipping_write_counts_what_its_version_serves(client, catalog_url, tmp_path):
    root = str(tmp_path / "d")
    _write(catalog_url, root, range(10), "old", client)
    # k005-k009 are live: skipped; k010-k014 are new. Shards of 5: one shard is all skipped.
    summary = _write(
        catalog_url, root, range(5, 15), "new", client, mode="append", on_duplicate="skip"
    )
    assert (summary.records, summary.skipped_duplicates, summary.skipped_keys) == (5, 5, 0)
    assert "committed 5 records" in str(summary)
    assert "5 records skipped (keys the dataset had: on_duplicate skip)" in str(summary)
    with Catalog(catalog_url) as cat:
        assert cat.log("d")[0].records_added == 5
        assert cat.count("d") == 15
        assert cat.get("d", "k007")["txt"].decode() == "old7"  # the live record stays
        assert cat.get("d", "k012")["txt"].decode() == "new12"
        listed = {s.url for s in cat.shards("d")}
        dead = [u for u in summary.shards if u not in listed]
        assert len(dead) == 1 and os.path.exists(dead[0])  # the all-skipped shard
        assert cat.verify("d").ok
    report = gc(catalog_url, "d", grace=dt.timedelta(0))
    assert dead[0] in report.deleted_shards and not os.path.exists(dead[0])
    with Catalog(catalog_url) as cat:
        assert cat.count("d") == 15 and cat.verify("d").ok


def test_a_write_of_nothing_but_live_keys_serves_none(client, catalog_url, tmp_path):
    root = str(tmp_path / "d")
    _write(catalog_url, root, range(10), "old", client)
    summary = _write(
        catalog_url, root, range(10), "again", client, mode="append", on_duplicate="skip"
    )
    assert (summary.records, summary.skipped_duplicates) == (0, 10)
    assert "committed 0 records" in str(summary)
    with Catalog(catalog_url) as cat:
        assert cat.count("d") == 10
        assert not {s.url for s in cat.shards("d")} & set(summary.shards)
    report = gc(catalog_url, "d", grace=dt.timedelta(0))
    assert sorted(report.deleted_shards) == sorted(summary.shards)


@pytest.mark.parametrize("on_duplicate", ["skip", "replace"])
def test_the_dataset_writer_reports_the_same(catalog_url, tmp_path, on_duplicate):
    root = str(tmp_path / "d")
    with Catalog(catalog_url) as cat:
        with shardcat.DatasetWriter(cat, "d", root) as w:
            for s in _samples(range(6), "old"):
                w.write(s)
        with shardcat.DatasetWriter(cat, "d", root, mode="append", on_duplicate=on_duplicate) as w:
            for s in _samples(range(4, 8), "new"):
                w.write(s)
        summary = w.summary
        assert summary is not None
        if on_duplicate == "skip":
            assert (summary.records, summary.skipped_duplicates) == (2, 2)
            assert cat.get("d", "k004")["txt"].decode() == "old4"
        else:  # replaced records are served: nothing is left out
            assert (summary.records, summary.skipped_duplicates) == (4, 0)
            assert cat.get("d", "k004")["txt"].decode() == "new4"
        assert cat.count("d") == 8
