"""shardcat.torch through real DataLoaders: worker processes (fork and spawn), ranks, resuming."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.reading import Catalog  # noqa: E402
from shardcat.torch import KeyDataset, ShardIterableDataset, ShardLoader  # noqa: E402

from .conftest import key, make_dataset, stop_and_resume  # noqa: E402


def keys_only(sample: dict[str, Any]) -> str:
    # Module level: spawned workers unpickle it by name.
    return sample["__key__"]


def batches(loader) -> list[list[str]]:
    return [list(b) for b in loader]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_each_sample_once_per_epoch_through_a_dataloader(local_dataset, workers):
    url, keys = local_dataset
    ds = ShardIterableDataset(url, "train", decode=keys_only, shuffle_buffer=16)
    loader = DataLoader(ds, batch_size=5, num_workers=workers)
    seen = [k for b in batches(loader) for k in b]
    assert sorted(seen) == sorted(keys)
    assert len(ds) == len(keys)
    ds.set_epoch(1)
    again = [k for b in batches(loader) for k in b]
    assert sorted(again) == sorted(keys) and again != seen


@pytest.mark.parametrize("workers", [0, 2])
def test_ranks_split_the_epoch_between_them(local_dataset, workers):
    url, keys = local_dataset
    per_rank = []
    for rank in range(3):
        ds = ShardIterableDataset(url, "train", decode=keys_only, rank=rank, world_size=3)
        got = [k for b in DataLoader(ds, batch_size=4, num_workers=workers) for k in b]
        assert len(got) == len(ds)
        per_rank.append(got)
    flat = [k for r in per_rank for k in r]
    assert sorted(flat) == sorted(keys)


def test_rank_arguments_are_checked(local_dataset):
    url, _ = local_dataset
    with pytest.raises(ValueError, match="together"):
        ShardIterableDataset(url, "train", rank=0)
    with pytest.raises(ValueError, match="range"):
        ShardIterableDataset(url, "train", rank=2, world_size=2)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize(("workers", "stop"), [(0, 3), (2, 1), (2, 4), (2, 9), (3, 6)])
def test_stop_save_resume_equals_an_uninterrupted_run(local_dataset, workers, stop):
    url, _ = local_dataset

    def make():
        return ShardIterableDataset(url, "train", decode=keys_only, seed=9, shuffle_buffer=6)

    ds = make()
    ds.set_epoch(2)
    full = batches(ShardLoader(ds, batch_size=4, num_workers=workers))

    ds = make()
    ds.set_epoch(2)
    loader = ShardLoader(ds, batch_size=4, num_workers=workers)
    first = []
    for b in loader:
        first.append(list(b))
        if len(first) == stop:
            break
    state = loader.state_dict()
    del loader

    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.epoch == 2
    loader = ShardLoader(resumed, batch_size=4, num_workers=workers)
    rest = batches(loader)
    assert first + rest == full
    # Once through, the state says the epoch is done; a second resume yields nothing more.
    done = make()
    done.load_state_dict(loader.state_dict())
    assert batches(ShardLoader(done, batch_size=4, num_workers=workers)) == []
    done.set_epoch(3)
    assert len([k for b in ShardLoader(done, batch_size=4) for k in b]) == len(done)


@pytest.mark.parametrize("stop", [2, 5, 7, 12])
def test_resume_after_one_worker_ran_out(tmp_path, stop):
    # One worker gets the 40-record shard, the other 5 records: it runs out after 3 batches,
    # and the DataLoader then takes every batch from the first.
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        make_dataset(cat, str(tmp_path / "s"), sizes=(40, 3, 2))

    def make():
        return ShardIterableDataset(url, "train", decode=keys_only, seed=2, shuffle_buffer=4)

    full, resumed = stop_and_resume(make, stop, batch_size=2, num_workers=2)
    assert sorted(len(b) for b in full)[0] == 1  # the short worker's last batch
    assert resumed == full


def test_resuming_twice_in_one_epoch(local_dataset):
    url, _ = local_dataset

    def make():
        return ShardIterableDataset(url, "train", decode=keys_only, seed=1, shuffle_buffer=5)

    full = batches(ShardLoader(make(), batch_size=3, num_workers=2))
    got: list[list[str]] = []
    state = None
    for stop in (3, 4, 5):
        ds = make()
        if state is not None:
            ds.load_state_dict(state)
        loader = ShardLoader(ds, batch_size=3, num_workers=2)
        for i, b in enumerate(loader, 1):
            got.append(list(b))
            if i == stop:
                break
        state = loader.state_dict()
    ds = make()
    ds.load_state_dict(state)
    assert got + batches(ShardLoader(ds, batch_size=3, num_workers=2)) == full


def test_a_state_is_resumed_with_the_same_workers_and_seed(local_dataset):
    url, _ = local_dataset
    ds = ShardIterableDataset(url, "train", decode=keys_only)
    loader = ShardLoader(ds, batch_size=4, num_workers=2)
    next(iter(loader))
    state = loader.state_dict()
    other = ShardIterableDataset(url, "train", decode=keys_only)
    other.load_state_dict(state)
    with pytest.raises(ValueError, match="2 worker"):
        next(iter(ShardLoader(other, batch_size=4, num_workers=1)))
    with pytest.raises(ValueError, match="seed"):
        ShardIterableDataset(url, "train", seed=1).load_state_dict(state)
    with pytest.raises(TypeError, match="ShardIterableDataset"):
        ShardLoader(KeyDataset(url, "train"), batch_size=4)


def test_direct_iteration_keeps_its_own_position(local_dataset):
    url, _ = local_dataset
    ds = ShardIterableDataset(url, "train", decode=keys_only, seed=4)
    full = list(ds)
    ds2 = ShardIterableDataset(url, "train", decode=keys_only, seed=4)
    it = iter(ds2)
    head = [next(it) for _ in range(17)]
    state = ds2.state_dict()
    ds3 = ShardIterableDataset(url, "train", decode=keys_only, seed=4)
    ds3.load_state_dict(state)
    assert head + list(ds3) == full


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_fork_and_spawn_workers_reopen_catalog_and_shards(catalog_url, tmp_path, method):
    with Catalog(catalog_url) as cat:
        keys = make_dataset(cat, str(tmp_path / "shards"), sizes=(9, 4, 11))
        ds = ShardIterableDataset(cat, "train", decode=keys_only)
        kd = KeyDataset(cat, "train", decode=keys_only)
        # The catalog is used in this process first: workers must not share its connections.
        assert cat.get("train", key(0)).key == key(0)
        got = [
            k
            for b in DataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context=method)
            for k in b
        ]
        assert sorted(got) == sorted(keys)
        by_key = [
            k
            for b in DataLoader(kd, batch_size=5, num_workers=2, multiprocessing_context=method)
            for k in b
        ]
        assert by_key == sorted(keys)
        assert cat.get("train", key(1)).key == key(1)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_s3_shards_through_worker_processes(s3, tmp_path, method):
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    opts = s3["storage_options"]
    with Catalog(url, storage_options=opts) as cat:
        keys = make_dataset(cat, f"{s3['url']}/train", sizes=(6, 10), storage_options=opts)
        # The parent touches S3 first, so a forked child inherits a live filesystem.
        assert cat.get("train", key(0)).key == key(0)
        ds = ShardIterableDataset(cat, "train", decode=keys_only, shuffle_buffer=4)
        got = [
            k
            for b in DataLoader(ds, batch_size=4, num_workers=2, multiprocessing_context=method)
            for k in b
        ]
        assert sorted(got) == sorted(keys)
        kd = KeyDataset(cat, "train", where="key < :k", params={"k": key(8)}, decode=keys_only)
        assert len(kd) == 8
        loader = DataLoader(kd, batch_size=3, num_workers=2, multiprocessing_context=method)
        assert [k for b in loader for k in b] == [key(i) for i in range(8)]


def test_a_local_cache_serves_later_epochs_of_s3_shards(s3, tmp_path):
    import s3fs

    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    opts = s3["storage_options"]
    with Catalog(url, storage_options=opts) as cat:
        keys = make_dataset(cat, f"{s3['url']}/train", sizes=(6, 10, 3), storage_options=opts)
        sizes = sorted(s.size_bytes for s in cat.shards("train"))
    # A limit below the dataset keeps the most recent copies within it.
    small = ShardIterableDataset(
        url, "train", storage_options=opts, cache_dir=tmp_path / "small", cache_limit=sizes[-1] + 1
    )
    assert sorted(s["__key__"] for s in small) == sorted(keys)
    assert sum(p.stat().st_size for p in (tmp_path / "small").iterdir()) <= sizes[-1] + 1
    cache = tmp_path / "cache"
    ds = ShardIterableDataset(
        url, "train", decode=keys_only, storage_options=opts, cache_dir=cache, cache_limit="1GB"
    )
    loader = DataLoader(ds, batch_size=4, num_workers=2)
    assert sorted(k for b in loader for k in b) == sorted(keys)
    assert sorted(p.stat().st_size for p in cache.iterdir()) == sizes
    # Epoch 2 reads the copies: the store may lose the shards meanwhile.
    s3fs.S3FileSystem(**opts).rm(f"{s3['url']}/train", recursive=True)
    ds.set_epoch(1)
    assert sorted(k for b in loader for k in b) == sorted(keys)


def test_key_dataset_reads_by_position_by_key_and_in_batches(local_dataset):
    url, keys = local_dataset
    ds = KeyDataset(url, "train", decode={"json": lambda j: j["label"]})
    assert len(ds) == len(keys) and ds.keys == sorted(keys)
    assert ds[7]["__key__"] == ds.keys[7]
    assert ds.get(key(12))["json"] == 12 % 5
    got = ds.__getitems__([5, 1, 5])
    assert [s["__key__"] for s in got] == [ds.keys[5], ds.keys[1], ds.keys[5]]
    loader = DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(0))
    labels = torch.cat([b["json"] for b in loader])
    assert sorted(labels.tolist()) == sorted(int(k[2:]) % 5 for k in keys)
    chosen = KeyDataset(url, "train", keys=[key(3), key(1)])
    assert [s["__key__"] for s in chosen.__getitems__([0, 1])] == [key(3), key(1)]


def test_a_dataloader_batch_is_one_get_many(local_dataset, monkeypatch):
    url, keys = local_dataset
    ds = KeyDataset(url, "train", decode=keys_only)
    calls = []
    real_many, real_get = Catalog.get_many, Catalog.get
    monkeypatch.setattr(
        Catalog, "get_many", lambda self, *a, **k: calls.append("many") or real_many(self, *a, **k)
    )
    monkeypatch.setattr(
        Catalog, "get", lambda self, *a, **k: calls.append("get") or real_get(self, *a, **k)
    )
    got = [k for b in DataLoader(ds, batch_size=10) for k in b]
    assert got == sorted(keys)
    assert calls == ["many"] * -(-len(keys) // 10)


def test_key_dataset_names_missing_keys(local_dataset):
    url, _ = local_dataset
    ds = KeyDataset(url, "train", keys=[key(0), "nope/1"])
    with pytest.raises(KeyError, match="nope/1"):
        ds.__getitems__([0, 1])
    with pytest.raises(KeyError):
        ds[1]
    with pytest.raises(ValueError, match="not both"):
        KeyDataset(url, "train", keys=[key(0)], where="1 = 1")


def test_where_selects_for_the_iterable_dataset(local_dataset):
    url, _ = local_dataset
    ds = ShardIterableDataset(url, "train", where="key LIKE 's/0001%'", decode=keys_only)
    assert sorted(ds) == [key(i) for i in range(10, 20)]
    assert len(ds) == 10


def key_batch(samples: list[dict[str, Any]]) -> list[str]:
    # Module level: a collate that spawned workers can unpickle.
    return [s["__key__"] for s in samples]


@pytest.mark.parametrize(("workers", "stop"), [(0, 2), (2, 3)])
def test_batches_made_in_the_dataset_cover_the_epoch_and_resume(local_dataset, workers, stop):
    url, keys = local_dataset

    def make(**kw: Any) -> ShardIterableDataset:
        ds = ShardIterableDataset(url, "train", seed=4, shuffle_buffer=6, batch_size=5, **kw)
        ds.set_epoch(1)
        return ds

    per_sample = ShardIterableDataset(url, "train", seed=4, shuffle_buffer=6, decode=keys_only)
    per_sample.set_epoch(1)
    full = [key_batch(b) for b in ShardLoader(make(), num_workers=workers)]
    # The same samples in the same order as a loader batching them itself.
    expected = [list(b) for b in ShardLoader(per_sample, batch_size=5, num_workers=workers)]
    assert full == expected
    assert sorted(k for b in full for k in b) == sorted(keys)
    collated = list(ShardLoader(make(collate=key_batch), num_workers=workers))
    assert collated == full
    loader = ShardLoader(make(collate=key_batch), num_workers=workers)
    head = []
    for b in loader:
        head.append(b)
        if len(head) == stop:
            break
    resumed = make(collate=key_batch)
    resumed.load_state_dict(loader.state_dict())
    assert head + list(ShardLoader(resumed, num_workers=workers)) == full


def test_a_batching_dataset_refuses_a_batching_loader(local_dataset):
    url, _ = local_dataset
    ds = ShardIterableDataset(url, "train", batch_size=4)
    with pytest.raises(ValueError, match="batch_size=None"):
        ShardLoader(ds, batch_size=4)
    with pytest.raises(ValueError, match="pass batch_size= too"):
        ShardIterableDataset(url, "train", collate=list)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_persistent_workers_see_each_epoch(local_dataset, method):
    url, keys = local_dataset

    def epochs(persistent: bool, method: str) -> list[list[str]]:
        ds = ShardIterableDataset(url, "train", seed=7, shuffle_buffer=6, batch_size=5)
        loader = ShardLoader(
            ds,
            num_workers=2,
            multiprocessing_context=method,
            collate_fn=key_batch,
            persistent_workers=persistent,
        )
        assert loader.persistent_workers is persistent
        out = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            out.append([k for b in loader for k in b])
        return out

    persistent = epochs(True, method)
    # Started once, the workers still read each epoch's own order: the one fresh workers read
    # (forked: the order does not depend on the start method, and spawning is slow).
    assert persistent == epochs(False, "fork")
    assert all(sorted(e) == sorted(keys) for e in persistent)
    assert persistent[0] != persistent[1] != persistent[2]
    assert ShardLoader(ShardIterableDataset(url, "train"), num_workers=1).persistent_workers


def test_persistent_workers_resume_and_refuse_a_late_state(local_dataset):
    url, _ = local_dataset

    def make() -> ShardIterableDataset:
        ds = ShardIterableDataset(url, "train", decode=keys_only, seed=9, shuffle_buffer=6)
        ds.set_epoch(1)
        return ds

    full, resumed = stop_and_resume(make, 3, batch_size=4, num_workers=2)
    assert resumed == full  # ShardLoader's default: persistent workers
    ds = make()
    loader = ShardLoader(ds, batch_size=4, num_workers=2)
    first = iter(loader)
    next(first)
    state = loader.state_dict()
    for _ in first:
        pass
    # These workers copied the dataset before: they would start the epoch over.
    ds.load_state_dict(state)
    with pytest.raises(RuntimeError, match="new DataLoader"):
        list(loader)
    assert batches(ShardLoader(ds, batch_size=4, num_workers=2)) == full[1:]


def test_the_loader_widens_its_workers_pipe(local_dataset):
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe sizes are a Linux feature")
    from shardcat.torch import RESULT_PIPE_BYTES, widen_result_pipe

    url, keys = local_dataset
    ds = ShardIterableDataset(url, "train", decode=keys_only, batch_size=4)
    loader = ShardLoader(ds, num_workers=1, collate_fn=list)
    it = iter(loader)
    first = next(it)  # the workers start with the first batch asked for
    pipe = loader._iterator._worker_result_queue._reader.fileno()
    assert fcntl.fcntl(pipe, fcntl.F_GETPIPE_SZ) == RESULT_PIPE_BYTES
    assert sorted(k for b in [first, *it] for k in b) == sorted(keys)
    # Best effort: no such attribute (another torch) or a size the kernel refuses is no error.
    assert widen_result_pipe(object()) is None
    assert widen_result_pipe(loader._iterator, size=-1) is None
