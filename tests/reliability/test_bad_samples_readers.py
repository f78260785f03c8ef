"""``on_error`` beyond the streaming readers: ``KeyDataset``, ``to_dask_dataframe``, ``shardcat.read``.

The same dataset as ``test_bad_samples.py`` (30 samples, ``k07``'s JSON
entry empty and ``k23``'s cut short), written with ``ShardWriter``; every
test runs on SQLite and on PostgreSQL, the S3 ones through moto. For each
reader: ``"raise"`` names the dataset, key, entry and shard; ``"skip"``
gives exactly the good samples and counts or drops the bad ones; ``"log"``
does the same with a warning per bad sample; an error that is not the
sample's (a missing shard or key) raises under every ``on_error``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import KeyNotFoundError, SampleDecodeError, ShardNotFoundError
from shardcat.reading import Catalog

from .badsamples import (
    BAD,
    GOOD,
    N,
    assert_names_the_sample,
    keys_of,
    tar_dataset_with_an_empty_json,
    write_bad_dataset,
)

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.torch import KeyDataset, collate_good  # noqa: E402

POSITION = {f"k{i:02d}": i for i in range(N)}
"""A key's position in a KeyDataset of every key (key order)."""


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "skipped a sample" in r.getMessage()]


def assert_logged(caplog: pytest.LogCaptureFixture, on_error: str, keys: list[str]) -> None:
    """One warning per dropped sample with ``"log"``, naming it as the typed error does; none with ``"skip"``."""
    warned = warnings_of(caplog)
    if on_error == "skip":
        assert warned == []
        return
    assert len(warned) == len(keys)
    for key in keys:
        shard = "imgs-000000.shard" if key == "k07" else "imgs-000001.shard"
        assert any(
            f"cannot decode dataset 'imgs', key '{key}', entry 'json'" in w and shard in w
            for w in warned
        ), warned


# --- KeyDataset (and the KeySamples it wraps) ----------------------------------


def test_key_dataset_raises_the_typed_error_by_default(bad_dataset):
    with KeyDataset(bad_dataset, "imgs") as ds:
        assert ds[6]["json"] == {"label": 2}
        with pytest.raises(SampleDecodeError) as e:
            ds[POSITION["k07"]]
        assert_names_the_sample(e.value, "k07")
        with pytest.raises(SampleDecodeError) as e:
            ds.__getitems__([6, POSITION["k23"], 24])
        assert_names_the_sample(e.value, "k23")
        with pytest.raises(SampleDecodeError) as e:
            ds.get("k07")
        assert_names_the_sample(e.value, "k07")
        assert ds.skipped == 0


@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_key_dataset_leaves_bad_samples_out_of_batches_and_counts_them(
    bad_dataset, on_error, caplog
):
    with (
        KeyDataset(bad_dataset, "imgs", on_error=on_error) as ds,
        caplog.at_level(logging.WARNING, logger="shardcat"),
    ):
        batch = ds.__getitems__(list(range(N)))
        assert [s["__key__"] for s in batch] == GOOD  # in the order asked, without the bad ones
        assert all(s["json"] == {"label": POSITION[s["__key__"]] % 4} for s in batch)
        assert ds.skipped == 2 and ds.samples.skipped == 2
        assert_logged(caplog, on_error, ["k07", "k23"])


@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_key_dataset_gives_none_for_a_bad_sample_read_alone(bad_dataset, on_error, caplog):
    with (
        KeyDataset(bad_dataset, "imgs", on_error=on_error) as ds,
        caplog.at_level(logging.WARNING, logger="shardcat"),
    ):
        assert ds[POSITION["k07"]] is None
        assert ds.skipped == 1
        assert_logged(caplog, on_error, ["k07"])
        assert ds.get("k23") is None and ds.skipped == 2
        assert ds[POSITION["k08"]]["json"] == {"label": 0} and ds.skipped == 2
        assert ds.__getitems__([POSITION["k07"]]) == [] and ds.skipped == 3


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_key_dataset_through_a_data_loader_with_two_workers(bad_dataset, context):
    ds = KeyDataset(bad_dataset, "imgs", on_error="skip")
    loader = DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        collate_fn=collate_good,
        multiprocessing_context=context,
    )
    batches = list(loader)
    assert len(batches) == -(-N // 4)  # a batch per 4 positions, shorter where a sample was bad
    assert sorted(k for b in batches for k in b["__key__"]) == GOOD
    # k07's and k23's batches are one short; the last one holds positions 28 and 29.
    assert sorted(len(b["__key__"]) for b in batches) == [2, 3, 3, 4, 4, 4, 4, 4]
    assert ds.skipped == 2  # counted in the workers, seen here
    ds.close()


def test_collate_good_makes_a_batch_of_bad_samples_none(bad_dataset):
    ds = KeyDataset(bad_dataset, "imgs", keys=["k07", "k23", "k06"], on_error="log")
    loader = DataLoader(ds, batch_size=2, num_workers=2, collate_fn=collate_good)
    first, second = list(loader)
    assert first is None  # every sample of it was bad: the loop skips it
    assert second["__key__"] == ["k06"] and second["json"]["label"].tolist() == [2]
    assert ds.skipped == 2
    # Another collate sees only the good samples.
    assert collate_good([None, {"a": 1}, None], collate=list) == [{"a": 1}]
    assert collate_good([None, None]) is None
    ds.close()


@pytest.mark.parametrize("on_error", ["raise", "skip", "log"])
def test_key_dataset_raises_what_is_not_the_samples_fault(bad_dataset, tmp_path, on_error):
    with KeyDataset(bad_dataset, "imgs", keys=[*GOOD, "nope"], on_error=on_error) as ds:
        with pytest.raises(KeyNotFoundError, match="nope"):
            ds.__getitems__([0, len(GOOD)])
        with pytest.raises(KeyNotFoundError):
            ds.get("nope")
    os.remove(tmp_path / "shards" / "imgs-000001.shard")
    with KeyDataset(bad_dataset, "imgs", on_error=on_error) as ds:
        with pytest.raises(ShardNotFoundError):
            ds.__getitems__([0, POSITION["k20"]])
        with pytest.raises(ShardNotFoundError):
            ds[POSITION["k23"]]  # the bad sample's shard is gone: that is no decoding error
        assert ds.skipped == 0


def test_key_dataset_on_error_must_be_one_of_the_three(bad_dataset):
    with pytest.raises(ValueError, match="on_error must be one of 'raise', 'skip', 'log'"):
        KeyDataset(bad_dataset, "imgs", on_error="ignore")  # type: ignore[arg-type]


# --- to_dask_dataframe ---------------------------------------------------------


def test_dataframe_raises_the_typed_error_by_default(bad_dataset):
    df = shardcat.to_dask_dataframe(bad_dataset, "imgs", entries=["json"])
    with pytest.raises(SampleDecodeError) as e:
        df.compute(scheduler="sync")
    assert e.value.key in BAD
    assert_names_the_sample(e.value, e.value.key)


@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_dataframe_partitions_hold_the_good_samples(bad_dataset, on_error, caplog):
    df = shardcat.to_dask_dataframe(bad_dataset, "imgs", entries=["json"], on_error=on_error)
    assert df.npartitions == 2 and list(df.columns) == ["__key__", "json.label"]
    with caplog.at_level(logging.WARNING, logger="shardcat"):
        parts = [p.compute(scheduler="sync") for p in df.partitions]
    assert [len(p) for p in parts] == [14, 14]  # one bad sample left out of each shard's partition
    frame = df.compute(scheduler="sync")
    assert sorted(frame["__key__"]) == GOOD
    assert all(frame["json.label"] == [POSITION[k] % 4 for k in frame["__key__"]])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="shardcat"):
        df.compute(scheduler="sync")
    assert_logged(caplog, on_error, ["k07", "k23"])


def test_dataframe_whose_first_record_is_bad(bad_dataset):
    """The columns are read now from the first record: with skip, from the first that decodes."""
    where = {"where": "key >= :k", "params": {"k": "k07"}}
    with pytest.raises(SampleDecodeError) as e:
        shardcat.to_dask_dataframe(bad_dataset, "imgs", entries=["json"], **where)
    assert_names_the_sample(e.value, "k07")
    df = shardcat.to_dask_dataframe(bad_dataset, "imgs", entries=["json"], on_error="skip", **where)
    assert list(df.columns) == ["__key__", "json.label"]
    assert sorted(df.compute(scheduler="sync")["__key__"]) == [k for k in GOOD if k >= "k07"]


@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_dataframe_raises_a_missing_shard(bad_dataset, tmp_path, on_error):
    df = shardcat.to_dask_dataframe(bad_dataset, "imgs", on_error=on_error)
    os.remove(tmp_path / "shards" / "imgs-000001.shard")
    with pytest.raises(ShardNotFoundError):
        df.compute(scheduler="sync")


# --- shardcat.read ---------------------------------------------------------------


def test_read_raises_the_typed_error_by_default(bad_dataset):
    with pytest.raises(SampleDecodeError) as e:
        shardcat.read(bad_dataset, "imgs").compute(scheduler="sync")
    assert e.value.key in BAD
    assert_names_the_sample(e.value, e.value.key)


@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_read_partitions_hold_the_good_samples(bad_dataset, on_error, caplog):
    bag = shardcat.read(bad_dataset, "imgs", on_error=on_error)
    with caplog.at_level(logging.WARNING, logger="shardcat"):
        samples = bag.compute(scheduler="sync")
    assert keys_of(samples) == GOOD
    assert all(s["json"] == {"label": POSITION[s["__key__"]] % 4} for s in samples)
    assert_logged(caplog, on_error, ["k07", "k23"])
    assert [len(p.compute(scheduler="sync")) for p in bag.to_delayed()] == [14, 14]


def test_read_skips_in_worker_processes(bad_dataset):
    """The processes scheduler pickles every partition's arguments (on_error among them)."""
    samples = shardcat.read(bad_dataset, "imgs", on_error="skip").compute(scheduler="processes")
    assert keys_of(samples) == GOOD


def test_read_without_decoding_has_nothing_to_drop(bad_dataset):
    raw = shardcat.read(bad_dataset, "imgs", decode=False, on_error="skip").compute(
        scheduler="sync"
    )
    assert len(raw) == N
    assert {s["__key__"]: s["json"].data for s in raw if s["__key__"] in BAD} == BAD


@pytest.mark.parametrize("on_error", ["skip", "log"])
def test_read_raises_a_missing_shard(bad_dataset, tmp_path, on_error):
    bag = shardcat.read(bad_dataset, "imgs", on_error=on_error)
    os.remove(tmp_path / "shards" / "imgs-000000.shard")
    with pytest.raises(ShardNotFoundError):
        bag.compute(scheduler="sync")


def test_read_a_tar_indexed_in_place_with_an_empty_json(catalog_url, tmp_path):
    tar_dataset_with_an_empty_json(catalog_url, tmp_path / "wds")
    with pytest.raises(SampleDecodeError) as e:
        shardcat.read(catalog_url, "wds").compute(scheduler="sync")
    assert (e.value.dataset, e.value.key, e.value.entry) == ("wds", "t/s05", "json")
    assert e.value.path is not None and e.value.path.endswith("part-000000.tar")
    samples = shardcat.read(catalog_url, "wds", on_error="skip").compute(scheduler="sync")
    assert keys_of(samples) == [f"t/s{i:02d}" for i in range(12) if i != 5]
    with KeyDataset(catalog_url, "wds", on_error="skip") as ds:
        assert len(ds.__getitems__(list(range(12)))) == 11 and ds.skipped == 1


@pytest.mark.parametrize("read", [shardcat.read, shardcat.to_dask_dataframe])
def test_read_and_dataframe_on_error_must_be_one_of_the_three(bad_dataset, read):
    with pytest.raises(ValueError, match="on_error must be one of 'raise', 'skip', 'log'"):
        read(bad_dataset, "imgs", on_error="ignore")


# --- on S3 -------------------------------------------------------------------------


def test_every_reader_on_s3(catalog_url, s3):
    root = f"{s3['url']}/imgs"
    opts: dict[str, Any] = s3["storage_options"]
    write_bad_dataset(catalog_url, root, opts)
    shard0 = f"{root}/imgs-000000.shard"

    with pytest.raises(SampleDecodeError) as e:
        shardcat.read(catalog_url, "imgs", storage_options=opts).compute(scheduler="sync")
    assert e.value.dataset == "imgs" and e.value.key in BAD
    assert e.value.path is not None and e.value.path.startswith(f"{root}/imgs-00000")
    bag = shardcat.read(catalog_url, "imgs", storage_options=opts, on_error="skip")
    assert keys_of(bag.compute(scheduler="sync")) == GOOD

    df = shardcat.to_dask_dataframe(catalog_url, "imgs", storage_options=opts, on_error="skip")
    assert sorted(df.compute(scheduler="sync")["__key__"]) == GOOD

    with KeyDataset(catalog_url, "imgs", storage_options=opts) as ds:
        with pytest.raises(SampleDecodeError) as e:
            ds.__getitems__(list(range(N)))
        assert (e.value.dataset, e.value.key, e.value.path) == ("imgs", "k07", shard0)
        assert "testing" not in str(e.value)  # never a credential
    with KeyDataset(catalog_url, "imgs", storage_options=opts, on_error="skip") as ds:
        assert keys_of(ds.__getitems__(list(range(N)))) == GOOD and ds.skipped == 2


def test_the_fixture_is_what_the_tests_assume(bad_dataset, tmp_path: Path):
    """Guards the counts above: 2 bad samples of 30, one per shard, positions in key order."""
    with Catalog(bad_dataset) as cat:
        assert list(cat.keys("imgs")) == sorted(POSITION)
    shards = sorted(n for n in os.listdir(tmp_path / "shards") if n.endswith(".shard"))
    assert shards == ["imgs-000000.shard", "imgs-000001.shard"]
    assert len(GOOD) == N - len(BAD) == 28
