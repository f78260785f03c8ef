"""SampleStream: what each reader yields, exactly once per epoch, resumable, filtered, decoded."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

import shardcat
from shardcat.errors import ChecksumError, QueryError
from shardcat.readers import SampleStream, plan_tasks
from shardcat.reading import Catalog

from .conftest import SHARD_SIZES, key, make_dataset, sample


def stream_of(url, where=None, params=None, **kw) -> SampleStream:
    with Catalog(url) as cat:
        return SampleStream(tuple(plan_tasks(cat, "train", where, params)), **kw)


def keys_of(samples) -> list[str]:
    return [s["__key__"] for s in samples]


@pytest.mark.parametrize(("world", "workers"), [(1, 1), (1, 2), (1, 7), (2, 1), (2, 2), (3, 2)])
@pytest.mark.parametrize("epoch", [0, 1])
def test_the_readers_of_an_epoch_yield_every_sample_exactly_once(
    local_dataset, world, workers, epoch
):
    url, keys = local_dataset
    stream = stream_of(url, shuffle_buffer=8, seed=3)
    flat = []
    for rank in range(world):
        got = [keys_of(stream.iter_reader(epoch, rank, world, w, workers)) for w in range(workers)]
        assert [len(g) for g in got] == stream.reader_counts(epoch, rank, world, workers)
        # A rank's share does not depend on its number of workers.
        assert sum(map(len, got)) == stream.rank_count(epoch, rank, world)
        assert max(map(len, got)) - min(map(len, got)) <= max(SHARD_SIZES)
        flat += [k for g in got for k in g]
    assert sorted(flat) == sorted(keys)
    shares = [stream.rank_count(epoch, r, world) for r in range(world)]
    # Balanced by records: no rank has more than the largest shard beyond another.
    assert max(shares) - min(shares) <= max(SHARD_SIZES)


def test_epochs_differ_and_a_seed_repeats_them(local_dataset):
    url, keys = local_dataset
    stream = stream_of(url, shuffle_buffer=16, seed=11)
    e0 = keys_of(stream.iter_reader(0))
    assert e0 == keys_of(stream.iter_reader(0))
    assert e0 != keys_of(stream.iter_reader(1))
    assert e0 != keys
    assert sorted(e0) == sorted(keys)
    assert keys_of(stream_of(url, shuffle=False).iter_reader(0)) == keys


def test_file_order_resumes_at_any_sample(local_dataset):
    # Unshuffled (or a buffer of 1) a reader streams in file order without per-sample bookkeeping.
    url, keys = local_dataset
    stream = stream_of(url, shuffle=False)
    for start in range(len(keys) + 1):
        assert keys_of(stream.iter_reader(0, start=start)) == keys[start:]
    one = stream_of(url, shuffle_buffer=1, seed=5)
    tasks = one.reader_tasks(3)
    in_files = [rec.key for t in tasks for rec in one._records(t)]
    assert keys_of(one.iter_reader(3)) == in_files != keys  # shards shuffled, records in order


@pytest.mark.parametrize("buffer", [1, 5, 64])
def test_resuming_at_any_sample_yields_the_rest_of_the_uninterrupted_run(local_dataset, buffer):
    url, _ = local_dataset
    stream = stream_of(url, shuffle_buffer=buffer, seed=5)
    for worker in range(2):
        full = keys_of(stream.iter_reader(2, 0, 1, worker, 2))
        for start in range(len(full) + 1):
            assert keys_of(stream.iter_reader(2, 0, 1, worker, 2, start)) == full[start:]


def test_resuming_skips_shards_already_yielded(local_dataset, monkeypatch):
    url, _ = local_dataset
    stream = stream_of(url, shuffle=False)
    opened = []
    module = importlib.import_module("shardcat.orchestration.read")
    real = module.ShardReader

    def counting(url, **kw):
        opened.append(url)
        return real(url, **kw)

    monkeypatch.setattr(module, "ShardReader", counting)
    rest = keys_of(stream.iter_reader(0, start=SHARD_SIZES[0] + 2))
    assert rest[0] == key(SHARD_SIZES[0] + 2)
    assert os.path.basename(opened[0]) == "train-000001.shard"


def test_where_chooses_records_in_sql_without_reading_others(local_dataset):
    url, keys = local_dataset
    stream = stream_of(url, "key >= :lo AND shard_number IN (0, 2)", {"lo": key(10)}, shuffle=False)
    got = keys_of(stream.iter_reader(0))
    first, third = range(0, 23), range(30, 61)
    assert got == [key(i) for i in [*first, *third] if i >= 10]
    assert stream.num_samples == len(got)
    with Catalog(url) as cat:
        assert cat.select("train", "key = :k", {"k": key(3)}).count == 1
        assert cat.select("train", "job_id IS NOT NULL").count == len(keys)


@pytest.mark.parametrize(
    ("where", "error"),
    [
        ("1 = 1; DELETE FROM records", "one statement"),
        ("no_such_column = 1", None),
        ("   ", "empty"),
    ],
)
def test_a_bad_where_is_refused_and_changes_nothing(local_dataset, where, error):
    url, keys = local_dataset
    with Catalog(url) as cat:
        with pytest.raises(shardcat.errors.CatalogError, match=error) as e:
            cat.select("train", where)
        if error is None:
            assert isinstance(e.value, QueryError)
        assert cat.count("train") == len(keys)


def test_entries_come_back_as_stored_types_and_decode_applies(local_dataset):
    url, _ = local_dataset
    plain = next(stream_of(url, shuffle=False).iter_reader(0))
    assert plain["json"] == {"label": 0, "i": 0}
    assert plain["txt"] == "sample 0"
    assert isinstance(plain["npy"], np.ndarray) and plain["npy"].flags.writeable
    np.testing.assert_array_equal(plain["npy"], sample(0)["npy"])
    mapped = stream_of(url, shuffle=False, decode={"json": lambda j: j["label"], "nope": str})
    assert next(mapped.iter_reader(0))["json"] == 0
    whole = stream_of(url, shuffle=False, decode=lambda s: s["txt"].upper())
    assert next(whole.iter_reader(0)) == "SAMPLE 0"
    only = stream_of(url, shuffle=False, entries=("txt",))
    assert set(next(only.iter_reader(0))) == {"__key__", "txt"}


def test_a_shard_replaced_since_registration_is_an_error(local_dataset, tmp_path):
    url, _ = local_dataset
    stream = stream_of(url, shuffle=False)
    path = tmp_path / "shards" / "train-000000.shard"
    with shardcat.ShardWriter(str(path)) as w:
        w.add(key(0), sample(0))
    with pytest.raises(ChecksumError, match="not the one registered"):
        list(stream.iter_reader(0))


def test_an_empty_dataset_yields_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        make_dataset(cat, str(tmp_path / "s"), sizes=())
    stream = stream_of(url)
    assert list(stream.iter_reader(0, 0, 3)) == []
    assert stream.reader_counts(0, 0, 1, 3) == [0, 0, 0]


def test_deleted_and_replaced_keys_are_never_streamed_or_selected(local_dataset, tmp_path):
    """Versions hide records without rewriting shards: the readers must hide them too."""
    url, keys = local_dataset
    gone = {key(3), key(40), key(41)}
    with Catalog(url) as cat:
        shardcat.delete_keys(cat, "train", sorted(gone))
        shardcat.write(
            [{"__key__": key(7), "txt": "replaced"}],
            str(tmp_path / "shards"),
            catalog=cat,
            dataset="train",
            mode="append",
            on_duplicate="replace",
            progress=False,
        )
    live = sorted(set(keys) - gone)
    stream = stream_of(url, shuffle=False)
    got = list(stream.iter_reader(0))
    assert sorted(keys_of(got)) == live
    assert stream.num_samples == len(live)
    assert [s["txt"] for s in got if s["__key__"] == key(7)] == ["replaced"]
    # where= sees the latest version too: a deleted key matches nothing, the replaced one once.
    with Catalog(url) as cat:
        assert cat.select("train", "key = :k", {"k": key(3)}).count == 0
        assert cat.select("train", "key = :k", {"k": key(7)}).count == 1
    chosen = stream_of(url, "key <= :hi", {"hi": key(8)}, shuffle=False)
    assert sorted(keys_of(chosen.iter_reader(0))) == [k for k in live if k <= key(8)]
