"""shardcat.write(fields=...): declared fields stored with each staged shard, visible at commit."""

from __future__ import annotations

import pandas as pd
import pytest

import shardcat
from shardcat.errors import CatalogError
from shardcat.orchestration.plan import WritePlan
from shardcat.orchestration.tasks import field_values, write_partition
from shardcat.reading import Catalog


def test_a_task_stores_each_shards_field_values_with_its_records(tmp_path, sqlite_url):
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("d", str(tmp_path / "d"))
        cat.declare_fields("d", {"label": int, "split": str})
        job = cat.begin_job("d")
        plan = WritePlan(
            dataset="d",
            root=str(tmp_path / "d"),
            prefix="d",
            job_id=job.id,
            catalog=cat.handle(),
            max_records=3,  # several shards: values must follow their shard's records
            fields=("label", "split"),
        )
        samples = [
            {"__key__": f"k{i:02d}", "json": {"label": i % 4, "split": "val" if i < 3 else "train"}}
            for i in range(10)
        ]
        samples[5]["json"] = b'{"label": 99}'  # JSON bytes, no split
        samples[6]["json"] = "not json"  # no values at all
        result = write_partition(samples, plan, 0)
        assert len(result.shards) == 4
        assert cat.select("d", "label = 1").count == 0  # staged: not visible yet
        cat.commit_job(job)
        by_key = lambda where: sorted(k for ks in cat.select("d", where).keys.values() for k in ks)  # noqa: E731
        assert by_key("label = 1") == ["k01", "k09"]
        assert by_key("label = 99") == ["k05"]
        assert by_key("label IS NULL") == ["k06"]
        assert by_key("split = 'val'") == ["k00", "k01", "k02"]
        assert by_key("split IS NULL") == ["k05", "k06"]


def test_field_values_reads_dicts_and_json():
    fields = ("a", "b")
    assert field_values({"json": {"a": 1, "c": 2}}, fields, "json") == {"a": 1}
    assert field_values({"json": b'{"b": "x"}'}, fields, "json") == {"b": "x"}
    assert field_values({"json": "[1, 2]"}, fields, "json") == {}
    assert field_values({"txt": "no json"}, fields, "json") == {}


def test_write_declares_and_stores_fields_from_a_dataframe(client, tmp_path, sqlite_url):
    frame = pd.DataFrame(
        {"__key__": [f"r{i}" for i in range(40)], "label": [i % 5 for i in range(40)]}
    )
    shardcat.write(
        frame,
        str(tmp_path / "ds"),
        catalog=sqlite_url,
        dataset="frame",
        fields={"label": int},
        max_records_per_shard=7,
        client=client,
        progress=False,
    )
    with Catalog(sqlite_url) as cat:
        assert cat.fields("frame") == {"label": "number"}
        assert cat.select("frame", "label = 3").count == 8
    with pytest.raises(CatalogError, match="holds number values"):
        shardcat.write(
            pd.DataFrame({"__key__": ["x"], "label": ["three"]}),
            str(tmp_path / "ds"),
            catalog=sqlite_url,
            dataset="frame",
            mode="append",
            fields={"label": int},
            client=client,
            progress=False,
        )
    with Catalog(sqlite_url) as cat:
        assert cat.count("frame") == 40  # the failed append left nothing visible
