"""update_fields' values live in the bucket too: rebuild_history brings every kept version's back.

The values a sample was written with are its shard's (``index_fields`` reads
them again); the values ``update_fields`` set are history, listed in their
version's manifest (a compaction's in its own, for the copies that carry
them), and a rebuilt catalog reads, at every kept version, what the lost one read.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

import shardcat
from shardcat import Catalog
from shardcat.errors import KeyConflictError
from shardcat.readers import index_fields

pytestmark = pytest.mark.timeout(300)

WHERES = ("label = 9", "label = 7", "label = 0", "label IS NULL", "split = 'val'", "split IS NULL")


def _samples() -> list[dict[str, Any]]:
    return [
        {"__key__": f"k{i:03d}", "txt": f"v{i}".encode(), "json": {"label": i % 3}}
        for i in range(30)
    ]


def _snapshot(cat: Catalog) -> dict[int, dict[str, list[str]]]:
    out = {}
    for v in cat.log("ds"):
        out[v.number] = {}
        for where in WHERES:
            chosen = cat.select("ds", where, version=v.number)
            out[v.number][where] = sorted(k for keys in chosen.keys.values() for k in keys)
    return out


def test_updated_values_come_back_from_the_bucket_through_compaction_and_expiry(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = str(tmp_path / "ds")
    with Catalog(catalog_url) as cat:
        shardcat.write(
            _samples(),
            root,
            catalog=cat,
            dataset="ds",
            progress=False,
            client=client,
            max_records_per_shard=10,
            fields={"label": int},
        )  # v1: the labels the samples were written with
        cat.declare_fields("ds", {"split": str})
        first = {f"k{i:03d}": {"label": 9, "split": "val"} for i in range(5)}
        assert shardcat.update_fields(cat, "ds", first).version == 2
        cat.tag("ds", 2, "labels-1")
        cat.update_fields("ds", {"k000": {"label": None}, "k001": {"label": 7}})  # v3
        cat.delete_keys("ds", ["k005", "k020"])  # v4
        # v5: the first and third shards are rewritten; the copies carry the values.
        summary = shardcat.compact(cat, "ds", min_live=1.0, client=client)
        assert summary.version == 5 and len(summary.compacted) == 2
        cat.update_fields("ds", {"k002": {"split": None}, "k021": {"label": 7}})  # v6
        before = _snapshot(cat)
        assert before[6]["label = 9"] == ["k002", "k003", "k004"]
        assert before[6]["label = 7"] == ["k001", "k021"]
        assert before[2]["label = 9"] == [f"k{i:03d}" for i in range(5)]
        assert before[5]["split = 'val'"] == [f"k{i:03d}" for i in range(5)]
        assert before[6]["split = 'val'"] == ["k000", "k001", "k003", "k004"]
        assert "k000" in before[6]["label IS NULL"] and "k000" not in before[2]["label IS NULL"]
        report = cat.verify("ds")
        assert report.ok, [str(p) for p in report.problems]
        # The update's manifest lists its values, nothing else.
        with open(os.path.join(root, "_versions", "ds", "000000000003.json")) as f:
            body = json.load(f)["manifest"]
        assert body["fields"]["kinds"] == {"label": "number"}
        values = [v[1:] for s in body["fields"]["shards"] for v in s["values"]]
        assert sorted(values, key=str) == [["label", 7.0], ["label", None]]
        cat.expire("ds", keep_last=2)  # keeps 5, 6 and the tagged 2
        before = {v: before[v] for v in (2, 5, 6)}
        assert _snapshot(cat) == before
        assert cat.verify("ds").ok
        # The catalog is lost: its rows go, the bucket stays.
        cat.delete_dataset("ds")
        cat.create_dataset("ds", root)
        rebuilt = cat.rebuild_history("ds", root)
        assert rebuilt.versions == [2, 5, 6]
        assert cat.fields("ds") == {"label": "number", "split": "text"}
        # The values written with the samples come from their shards again.
        index_fields(cat, "ds", {"label": int})
        assert _snapshot(cat) == before
        report = cat.verify("ds")
        assert report.ok, [str(p) for p in report.problems]
        # The rebuilt catalog goes on.
        assert cat.update_fields("ds", {"k003": {"label": 1}}).version == 7
        assert cat.verify("ds").ok


def test_values_updated_while_compacting_fail_the_commit_and_a_rerun_carries_them(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = str(tmp_path / "ds")
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(
            catalog=cat, dataset="ds", progress=False, client=client, max_records_per_shard=10
        )
        shardcat.write(_samples(), root, fields={"label": int}, **kw)
        cat.delete_keys("ds", ["k005"])
        version = cat.info("ds").version
        before = {s.id for s in cat.shards("ds")}
        real_commit = Catalog.commit_job

        def commit_after_update(self: Catalog, job: Any, **kw: Any) -> Any:
            with Catalog(catalog_url) as other:  # staged already: the copies have label 0
                other.update_fields("ds", {"k003": {"label": 8}})
            return real_commit(self, job, **kw)

        cat.commit_job = commit_after_update.__get__(cat)  # type: ignore[method-assign]
        with pytest.raises(KeyConflictError, match="updated \\(update_fields\\) after its base"):
            shardcat.compact(cat, "ds", min_live=1.0, client=client)
        del cat.commit_job
        assert cat.info("ds").version == version + 1  # the update, not the compaction
        summary = shardcat.compact(cat, "ds", min_live=1.0, client=client)
        assert summary.version == version + 2
        chosen = cat.select("ds", "label = 8")
        assert [k for keys in chosen.keys.values() for k in keys] == ["k003"]
        assert not set(chosen.offsets) & before  # the copy's, in a compacted shard
        assert cat.verify("ds").ok


def test_a_fold_carries_updated_values_and_the_bucket_brings_them_back(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    """A fold rewrites base records like a compaction: its manifest lists the values they carry."""
    root = str(tmp_path / "ds")
    with Catalog(catalog_url) as cat:
        shardcat.write(
            _samples(),
            root,
            catalog=cat,
            dataset="ds",
            progress=False,
            client=client,
            max_records_per_shard=10,
            fields={"label": int},
        )  # v1
        cat.declare_fields("ds", {"split": str})
        cat.update_fields("ds", {"k001": {"label": 9, "split": "val"}, "k012": {"label": 7}})  # v2
        captions = [{"__key__": f"k{i:03d}", "cap": f"caption {i}"} for i in range(0, 30, 4)]
        shardcat.add_entries(
            captions, catalog=cat, dataset="ds", group="captions", progress=False, client=client
        )  # v3
        summary = shardcat.compact(cat, "ds", fold_groups=True, client=client)  # v4
        assert summary.version == 4 and summary.folded == {"captions": len(captions)}
        assert {v.number: v.operation for v in cat.log("ds")}[4] == "fold"
        before = _snapshot(cat)
        assert before[4]["label = 9"] == ["k001"] and before[4]["label = 7"] == ["k012"]
        assert before[4]["split = 'val'"] == ["k001"]
        assert cat.get("ds", "k004").entries["cap"].data == b"caption 4"
        assert cat.verify("ds").ok
        # The catalog is lost: the bucket brings back the fold's version with its values.
        cat.delete_dataset("ds")
        cat.create_dataset("ds", root)
        assert cat.rebuild_history("ds", root).versions == [1, 2, 3, 4]
        index_fields(cat, "ds", {"label": int})
        assert _snapshot(cat) == before
        assert cat.get("ds", "k004").entries["cap"].data == b"caption 4"
        report = cat.verify("ds")
        assert report.ok, [str(p) for p in report.problems]
