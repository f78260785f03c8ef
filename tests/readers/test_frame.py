"""to_dask_dataframe: JSON and scalar entries as columns, one partition per shard."""

from __future__ import annotations

import json

import dask

import shardcat
from shardcat.readers import flatten
from shardcat.reading import Catalog
from shardcat.testing.tars import wds_samples

from .conftest import SHARD_SIZES, TAR_SIZES, key, make_tar_dataset


def test_one_partition_per_shard_with_json_fields_as_columns(local_dataset):
    url, keys = local_dataset
    df = shardcat.to_dask_dataframe(url, "train")
    assert df.npartitions == len(SHARD_SIZES)
    assert list(df.columns) == ["__key__", "json.label", "json.i", "txt"]
    with dask.config.set(scheduler="sync"):
        pdf = df.compute()
    assert pdf["__key__"].tolist() == keys
    assert pdf["json.i"].tolist() == list(range(len(keys)))
    assert (pdf["json.label"] == pdf["json.i"] % 5).all()
    with dask.config.set(scheduler="processes"):
        counts = df.groupby("json.label")["__key__"].count().compute()
    assert counts.sum() == len(keys)


def test_where_and_entries(local_dataset):
    url, _ = local_dataset
    df = shardcat.to_dask_dataframe(
        url, "train", entries=["txt"], where="key < :k", params={"k": key(30)}
    )
    assert list(df.columns) == ["__key__", "txt"]
    assert df.npartitions == 2  # shards 0 and 1 hold keys below 30
    assert df.compute(scheduler="sync")["txt"].tolist() == [f"sample {i}" for i in range(30)]


def test_flatten_keeps_scalars_and_json_fields_only():
    row = flatten(
        {"__key__": "k", "json": {"a": 1, "b": [1], "c": {"d": 2}}, "bin": b"x", "n": 3.5}
    )
    assert row == {"__key__": "k", "json.a": 1, "n": 3.5}


def test_a_tar_dataset_indexed_in_place(catalog_url, tmp_path):
    """Its partitions read each tar's records from the catalog's rows, in worker processes."""
    with Catalog(catalog_url) as cat:
        tars = make_tar_dataset(cat, tmp_path / "wds")
    expected = [s for t in tars for s in wds_samples(t)]
    df = shardcat.to_dask_dataframe(catalog_url, "wds")
    assert df.npartitions == len(TAR_SIZES)
    assert list(df.columns) == ["__key__", "cls", "json.i"]  # bytes are not columns
    pdf = df.compute(scheduler="processes")
    assert pdf["__key__"].tolist() == [s["__key__"] for s in expected]
    assert pdf["cls"].tolist() == [s["cls"].decode() for s in expected]
    assert pdf["json.i"].tolist() == [json.loads(s["json"])["i"] for s in expected]

    # A filter, entries, and records deleted since (the first one among them):
    # the frame is what shardcat.read streams.
    gone = [expected[0]["__key__"], expected[20]["__key__"]]
    with Catalog(catalog_url) as cat:
        cat.delete_keys("wds", gone)
    df = shardcat.to_dask_dataframe(catalog_url, "wds", entries=["json"])
    assert list(df.columns) == ["__key__", "json.i"]
    pdf = df.compute(scheduler="processes")
    assert pdf["__key__"].tolist() == [s["__key__"] for s in expected if s["__key__"] not in gone]
    streamed = shardcat.read(catalog_url, "wds", entries=["json"]).compute(scheduler="sync")
    assert pdf["__key__"].tolist() == [s["__key__"] for s in streamed]
    last = expected[-5]["__key__"]
    df = shardcat.to_dask_dataframe(catalog_url, "wds", where="key >= :k", params={"k": last})
    chosen = [s["__key__"] for s in expected if s["__key__"] >= last and s["__key__"] not in gone]
    assert 0 < len(chosen) < len(expected) - len(gone)
    assert df.compute(scheduler="sync")["__key__"].tolist() == chosen  # file order
