"""The Dask keys of a dataset's collections: equal for equal reads, distinct for any difference.

A distributed scheduler reuses whatever result it holds under a key: two
reads that shared keys while differing in ``entries``, ``on_error``,
``decode``, version or the shard's content would get each other's samples.
The reads are computed on the module's LocalCluster (worker processes),
each while the other's partitions are held in the cluster's memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dask
import pytest
from distributed import wait

import shardcat
from reliability.badsamples import BAD, GOOD, N, keys_of, write_bad_dataset
from shardcat.errors import HistoryWarning, SampleDecodeError
from shardcat.reading import Catalog


@pytest.fixture
def bad(catalog_url: str, tmp_path: Path) -> str:
    """Dataset ``imgs``: 30 samples in two shards, ``k07`` and ``k23`` with a JSON that does not decode."""
    write_bad_dataset(catalog_url, str(tmp_path / "shards"))
    return catalog_url


def task_keys(collection: Any) -> set[Any]:
    """Every key of the collection's graph: its partitions' own tasks, not only the output aliases."""
    return set(dict(collection.__dask_graph__()))


# --- keys, without computing ---------------------------------------------------------


def test_read_keys_are_equal_for_equal_reads_and_differ_with_every_option(bad, tmp_path):
    def keys(**kw: Any) -> set[Any]:
        return task_keys(shardcat.read(bad, "imgs", **kw))

    base = keys(entries=["json"])
    assert keys(entries=["json"]) == base  # reproducible
    variants = [
        keys(),
        keys(entries=["jpg"]),
        keys(entries=["json"], on_error="skip"),
        keys(entries=["json"], on_error="log"),
        keys(entries=["json"], decode=False),
        keys(entries=["json"], storage_options={"auto_mkdir": True}),
    ]
    for other in variants:
        assert not other & base
    assert all(not a & b for i, a in enumerate(variants) for b in variants[i + 1 :])
    with Catalog(bad) as cat:
        number = cat.dataset("imgs").info().version
        cat.delete_keys("imgs", ["k01"])  # the next version hides k01 in shard 0
    assert keys(entries=["json"], version=number) == base
    latest = keys(entries=["json"])
    assert latest != base and not latest & base
    for key in base | latest:  # no shard URL in a key: keys are shown on the dashboard
        assert str(tmp_path) not in str(key)


def test_dataframe_keys_are_equal_for_equal_reads_and_differ_with_every_option(bad):
    def keys(**kw: Any) -> set[Any]:
        return task_keys(shardcat.to_dask_dataframe(bad, "imgs", on_error="skip", **kw))

    base = keys(entries=["json"])
    assert keys(entries=["json"]) == base
    variants = [
        keys(),
        keys(entries=["json"], where="key >= 'k10'"),
        task_keys(shardcat.to_dask_dataframe(bad, "imgs", entries=["json"], on_error="log")),
    ]
    for other in variants:
        assert not other & base


# --- two reads in one client ---------------------------------------------------------


def test_reads_with_other_entries_in_one_client_get_their_own_samples(client, bad):
    only_json = shardcat.read(bad, "imgs", entries=["json"], on_error="skip")
    only_jpg = shardcat.read(bad, "imgs", entries=["jpg"], on_error="skip")
    with dask.config.set(scheduler=client):
        a, b = dask.compute(only_json, only_jpg)  # one graph
        held = only_json.persist()
        wait(held)
        c = only_jpg.compute()  # while the other's partitions are in memory
    assert keys_of(a) == GOOD and all(set(s) == {"__key__", "json"} for s in a)
    # The JPEG entries all decode: no sample is dropped.
    assert keys_of(b) == keys_of(c) and len(b) == N
    assert all(set(s) == {"__key__", "jpg"} for s in b + c)


def test_reads_with_other_on_error_in_one_client_get_their_own_result(client, bad):
    skipping = shardcat.read(bad, "imgs", on_error="skip")
    with dask.config.set(scheduler=client):
        held = skipping.persist()
        wait(held)
        with pytest.raises(SampleDecodeError) as e:
            shardcat.read(bad, "imgs").compute()  # not the skipping read's partitions
        assert e.value.key in BAD
        raw = shardcat.read(bad, "imgs", decode=False, on_error="skip").compute()
        assert len(raw) == N  # undecoded: nothing to drop
        assert keys_of(held.compute()) == GOOD


def test_dataframes_with_other_on_error_in_one_client_get_their_own_result(client, bad):
    skipping = shardcat.to_dask_dataframe(bad, "imgs", entries=["json"], on_error="skip")
    with dask.config.set(scheduler=client):
        held = skipping.persist()
        wait(held)
        with pytest.raises(SampleDecodeError):
            shardcat.to_dask_dataframe(bad, "imgs", entries=["json"]).compute()
        frame = shardcat.to_dask_dataframe(bad, "imgs", entries=["jpg"]).compute()
        assert sorted(frame["__key__"]) == sorted(f"k{i:02d}" for i in range(N))
        assert sorted(held.compute()["__key__"]) == GOOD


def test_a_shard_replaced_at_its_url_is_read_again(client, catalog_url, tmp_path):
    """A dataset deleted and written again: the same name, version number and shard URL."""
    root = str(tmp_path / "d")
    url = f"{root}/d-000000.shard"

    def write_dataset(cat: Catalog, text: str) -> None:
        cat.create_dataset("d", root)
        with shardcat.ShardWriter(url, shard_number=0) as w:
            for i in range(5):
                w.add(f"k{i}", {"txt": f"{text} {i}"})
        cat.register_shard("d", w.close())

    with Catalog(catalog_url) as cat:
        write_dataset(cat, "old")
    old = shardcat.read(catalog_url, "d")
    with dask.config.set(scheduler=client):
        held = old.persist()
        wait(held)
        with Catalog(catalog_url) as cat:
            cat.delete_dataset("d")
            with pytest.warns(HistoryWarning):  # the old dataset's history is moved aside
                write_dataset(cat, "new")
        new = shardcat.read(catalog_url, "d")
        assert not task_keys(new) & task_keys(old)
        assert sorted(s["txt"] for s in new.compute()) == [f"new {i}" for i in range(5)]
        assert sorted(s["txt"] for s in held.compute()) == [f"old {i}" for i in range(5)]


def test_a_tar_dataset_read_both_ways_in_one_client(client, catalog_url, tmp_path):
    """Tar partitions reopen the catalog on the workers for their rows (SQLite file or PostgreSQL)."""
    from readers.conftest import make_tar_dataset
    from shardcat.testing.tars import wds_samples

    with Catalog(catalog_url) as cat:
        tars = make_tar_dataset(cat, tmp_path / "wds")
    expected = [s for t in tars for s in wds_samples(t)]
    with dask.config.set(scheduler=client):
        classes = shardcat.read(catalog_url, "wds", entries=["cls"]).compute()
        frame, ids = dask.compute(
            shardcat.to_dask_dataframe(catalog_url, "wds", entries=["cls"]),
            shardcat.to_dask_dataframe(catalog_url, "wds", entries=["json"]),
        )
    assert [(s["__key__"], s["cls"]) for s in classes] == [
        (s["__key__"], s["cls"].decode()) for s in expected
    ]
    assert list(frame.columns) == ["__key__", "cls"] and list(ids.columns) == ["__key__", "json.i"]
    assert frame["cls"].tolist() == [s["cls"].decode() for s in expected]
    assert ids["json.i"].tolist() == [json.loads(s["json"])["i"] for s in expected]
