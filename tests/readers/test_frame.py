"""to_dask_dataframe: JSON and scalar entries as columns, one partition per shard."""

from __future__ import annotations

import dask

import shardcat
from shardcat.readers import flatten

from .conftest import SHARD_SIZES, key


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
