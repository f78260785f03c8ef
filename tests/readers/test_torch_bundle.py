"""ShardLoader's bundles: several batches of a worker per trip, handed out one by one in order."""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.readers import PackedBatch, pack_samples, packed  # noqa: E402
from shardcat.reading import Catalog  # noqa: E402
from shardcat.torch import Bundle, ShardIterableDataset, ShardLoader, unchanged  # noqa: E402

from .conftest import make_bytes_dataset, stop_and_resume  # noqa: E402


def key_batch(samples: list[dict[str, Any]]) -> list[str]:
    # Module level: a collate that spawned workers can unpickle.
    return [s["__key__"] for s in samples]


def packs(url: str, **kw: Any) -> ShardIterableDataset:
    kw.setdefault("batch_size", 3)
    kw.setdefault("collate", pack_samples)
    ds = ShardIterableDataset(url, "train", seed=5, shuffle_buffer=7, **kw)
    ds.set_epoch(1)
    return ds


def keyed(batches: Any) -> list[tuple[list[str], list[bytes]]]:
    """Each batch's keys and bytes (copied: the batch's block may go after this)."""
    out = []
    for b in batches:
        assert isinstance(b, PackedBatch)
        out.append((list(b["__key__"]), [bytes(v) for v in b["bin"]]))
    return out


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_each_sample_once_per_epoch_over_ranks_with_bundles(bytes_dataset, workers):
    url, expected = bytes_dataset
    seen: dict[str, bytes] = {}
    for rank in range(2):
        ds = packs(url, rank=rank, world_size=2)
        loader = ShardLoader(ds, num_workers=workers, bundle=2)
        assert loader.bundle == (2 if workers else 1)  # nothing to bundle in one process
        got = keyed(loader)
        # Bundled or not, the rank sees the same batches in the same order.
        assert got == keyed(
            ShardLoader(packs(url, rank=rank, world_size=2), num_workers=workers, bundle=1)
        )
        for keys, values in got:
            for k, v in zip(keys, values):
                assert k not in seen
                seen[k] = v
        assert sum(len(k) for k, _ in got) == len(ds)
    assert seen == expected


@pytest.mark.parametrize("bundle", [2, 3, 5, 100])
def test_bundled_batches_come_in_the_unbundled_order(tmp_path, bundle):
    # Unequal workers (one gets the 40-record shard): the short one runs out early, and the
    # loader must then take every batch from the other, as torch does without bundles.
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        make_bytes_dataset(cat, str(tmp_path / "s"), sizes=(40, 3, 2, 8))

    def epoch(bundle: int, **kw: Any) -> list[Any]:
        ds = ShardIterableDataset(url, "train", seed=2, shuffle_buffer=4, batch_size=2, **kw)
        return list(ShardLoader(ds, num_workers=2, bundle=bundle))

    plain = epoch(1, collate=key_batch)
    counts = sorted(len(b) for b in plain)
    assert counts[0] == 1 and len(plain) > 10  # a short last batch; many trips
    assert epoch(bundle, collate=key_batch) == plain
    assert [list(b["__key__"]) for b in epoch(bundle, collate=pack_samples)] == plain
    # Lists of sample dicts (no collate) are bundled too.
    assert [key_batch(b) for b in epoch(bundle)] == plain


@pytest.mark.parametrize(("workers", "stop"), [(1, 1), (1, 4), (2, 1), (2, 3), (2, 5), (2, 8)])
def test_resume_at_a_batch_inside_a_bundle(bytes_dataset, workers, stop):
    url, _ = bytes_dataset

    def make() -> ShardIterableDataset:
        return packs(url, collate=key_batch)

    # Bundles of 3: stops 1, 4, 5 and 8 fall inside a worker's bundle.
    full, resumed = stop_and_resume(make, stop, num_workers=workers, bundle=3)
    assert resumed == full
    assert full == [list(b) for b in ShardLoader(make(), num_workers=workers, bundle=1)]


def test_a_packed_resume_inside_a_bundle(bytes_dataset):
    url, expected = bytes_dataset
    loader = ShardLoader(packs(url), num_workers=2, bundle=4)
    head = []
    for b in loader:
        head.append(b)
        if len(head) == 6:  # 3 batches of each worker: inside their first bundles of 4
            break
    state = loader.state_dict()
    resumed = packs(url)
    resumed.load_state_dict(state)
    whole = keyed(ShardLoader(packs(url), num_workers=2, bundle=4))
    assert keyed(head) + keyed(ShardLoader(resumed, num_workers=2, bundle=4)) == whole
    assert {k: v for keys, vals in whole for k, v in zip(keys, vals)} == expected


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_fork_and_spawn_persistent_workers_send_bundles(bytes_dataset, method):
    url, _ = bytes_dataset
    ds = packs(url)
    loader = ShardLoader(ds, num_workers=2, multiprocessing_context=method, bundle=3)
    reference = packs(url)
    one_by_one = ShardLoader(reference, num_workers=2, bundle=1)
    for epoch in range(2):
        ds.set_epoch(epoch)
        reference.set_epoch(epoch)
        assert keyed(loader) == keyed(one_by_one)


def test_workers_send_bundles_and_a_plain_dataloader_gets_batches(bytes_dataset):
    url, _ = bytes_dataset
    ds = packs(url, collate=key_batch)
    # What travels: bundles of 4 batches, the last of each worker shorter and marked.
    trips = list(DataLoader(ds, batch_size=None, num_workers=2, collate_fn=unchanged))
    assert all(isinstance(t, list) for t in trips)  # the flag is off: one batch per trip
    loader = ShardLoader(ds, num_workers=2, bundle=4)
    it = iter(loader)
    next(it)
    raw = list(loader._iterator)  # the rest of this epoch's trips, as torch delivers them
    assert raw and all(isinstance(t, Bundle) for t in raw)
    assert all(len(t.batches) == 4 for t in raw if not t.last)
    assert sorted(t.worker for t in raw if t.last) == [0, 1]
    del it  # the loader's iteration ends: the next plain loader gets batches again
    gc.collect()
    assert list(DataLoader(ds, batch_size=None, num_workers=2, collate_fn=unchanged)) == trips


def test_bundle_size_by_default_and_checked(bytes_dataset):
    url, _ = bytes_dataset
    assert ShardLoader(packs(url, batch_size=64), num_workers=1).bundle == 4
    assert ShardLoader(packs(url, batch_size=100), num_workers=1).bundle == 3
    assert ShardLoader(packs(url, batch_size=256), num_workers=1).bundle == 1
    assert ShardLoader(packs(url, batch_size=2), num_workers=1).bundle == 16  # blocks held
    assert ShardLoader(packs(url, batch_size=64)).bundle == 1  # no workers
    per_sample = ShardIterableDataset(url, "train")
    assert ShardLoader(per_sample, batch_size=8, num_workers=1).bundle == 1  # the loader batches
    with pytest.raises(ValueError, match="at least 1"):
        ShardLoader(packs(url), num_workers=1, bundle=0)


@pytest.mark.skipif(not packed._SHARED, reason="shared blocks need memfd_create")
def test_a_batch_keeps_its_block_until_the_user_drops_it_and_no_block_leaks(bytes_dataset):
    url, _ = bytes_dataset
    ds = packs(url, batch_size=2)
    bundle, prefetch = 2, 2
    loader = ShardLoader(ds, num_workers=2, bundle=bundle, prefetch_factor=prefetch)
    kept = None
    before = set(packed._maps)  # senders of other tests
    for epoch in range(3):
        ds.set_epoch(epoch)
        for i, batch in enumerate(loader):
            if epoch == 0 and i == 4:  # worker 0's third batch: the first of its second bundle
                kept, data = batch, bytes(batch["bin"].data)
        del batch
        gc.collect()
        if epoch == 0:
            assert kept._lease is not None
            block = kept._lease.map  # its state byte, without holding the lease
            assert block[0] == packed.HELD  # split from its bundle long ago, still held
            assert bytes(kept["bin"].data) == data  # not overwritten by later batches
            del kept
            gc.collect()
            assert block[0] == packed.FREE
        # Every block this process mapped from the workers is free once its batch is gone...
        ours = [maps for token, (_, maps) in packed._maps.items() if token not in before]
        assert len(ours) == 2  # the two persistent workers' rings
        assert all(m[0] == packed.FREE for maps in ours for m in maps.values())
        # ...and each worker reuses its ring, not one block a batch (an epoch is 24 batches per
        # worker). At most held at once: a bundle being filled and the next batch, `prefetch`
        # bundles on their way, a split bundle waiting its turn, the user's batch and `kept`.
        assert max(len(maps) for maps in ours) <= (prefetch + 2) * bundle + 3


def test_the_loaders_collate_fn_runs_on_each_batch_of_a_bundle(bytes_dataset):
    url, expected = bytes_dataset

    def epoch(bundle: int) -> list[Any]:
        ds = ShardIterableDataset(url, "train", seed=1, shuffle_buffer=4, batch_size=3)
        return list(ShardLoader(ds, num_workers=2, collate_fn=key_batch, bundle=bundle))

    plain = epoch(1)
    assert epoch(3) == plain
    assert sorted(k for b in plain for k in b) == sorted(expected)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_a_worker_with_nothing_to_read_is_not_waited_for(tmp_path):
    # Two shards, three workers: one reads nothing and sends one empty last bundle.
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        expected = make_bytes_dataset(cat, str(tmp_path / "s"), sizes=(11, 6))

    def epoch(bundle: int) -> list[list[str]]:
        ds = ShardIterableDataset(url, "train", seed=3, batch_size=2, collate=key_batch)
        assert sorted(ds.worker_counts(3)) == [0, 6, 11]
        return list(ShardLoader(ds, num_workers=3, bundle=bundle))

    plain = epoch(1)
    assert epoch(2) == plain
    assert sorted(k for b in plain for k in b) == sorted(expected)
