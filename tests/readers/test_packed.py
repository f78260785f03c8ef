"""Packed batches: bytes entries in reusable shared memory, through real DataLoader workers."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

import shardcat  # noqa: E402
import shardcat.torch  # noqa: E402
from shardcat.readers import PackedBatch, pack_samples, packed  # noqa: E402
from shardcat.readers.packed import pack_records, process_ring  # noqa: E402
from shardcat.reading import Catalog  # noqa: E402
from shardcat.torch import ShardIterableDataset, ShardLoader  # noqa: E402

from .conftest import make_bytes_dataset, payload, stop_and_resume  # noqa: E402

pytestmark = pytest.mark.skipif(not packed._SHARED, reason="shared blocks need memfd_create")


def contents(batches: list[PackedBatch]) -> dict[str, bytes]:
    got: dict[str, bytes] = {}
    for b in batches:
        assert isinstance(b, PackedBatch)
        for s in b:
            assert s["__key__"] not in got
            label = s["json"]["label"] if isinstance(s["json"], dict) else s["json"]
            assert label == int(s["__key__"][2:]) % 5
            got[s["__key__"]] = bytes(s["bin"])
    return got


def keys_of(batch: PackedBatch) -> list[str]:
    return list(batch["__key__"])


def test_packing_keeps_every_value_and_pickles_to_a_descriptor():
    samples = [
        {"__key__": f"k{i}", "bin": payload(i), "json": {"i": i}, "npy": np.arange(i)}
        for i in range(9)
    ]
    batch = pack_samples(samples)
    assert len(batch) == 9 and batch["__key__"] == [f"k{i}" for i in range(9)]
    assert list(batch.columns) == ["bin"] and list(batch.values) == ["json", "npy"]
    assert [bytes(v) for v in batch["bin"]] == [payload(i) for i in range(9)]
    assert bytes(batch["bin"].data) == b"".join(payload(i) for i in range(9))
    assert batch[3]["json"] == {"i": 3} and bytes(batch[3]["bin"]) == payload(3)
    from multiprocessing.reduction import ForkingPickler

    wire = ForkingPickler.dumps(batch)
    assert len(wire) < 1000 < len(batch["bin"].data)  # the bytes stay in the block
    again = ForkingPickler.loads(wire)
    assert [bytes(v) for v in again["bin"]] == [payload(i) for i in range(9)]
    assert [s["__key__"] for s in again.copy()] == batch["__key__"]
    with pytest.raises(TypeError, match="copy"):
        ForkingPickler.dumps(again)
    with pytest.raises(ValueError, match="same entries"):
        pack_samples([{"__key__": "a", "x": b"1"}, {"__key__": "b", "y": b"1"}])
    with pytest.raises(TypeError, match="sample dicts"):
        pack_samples(["a"])  # type: ignore[list-item]


def test_without_memfd_a_batch_pickles_its_bytes_and_frees_its_block(monkeypatch):
    from multiprocessing.reduction import ForkingPickler

    monkeypatch.setattr(packed, "_SHARED", False)
    monkeypatch.setattr(packed, "_ring", None)
    batch = pack_samples([{"__key__": str(i), "bin": payload(i)} for i in range(5)])
    ring = process_ring()
    assert [b.fd for b in ring.blocks.values()] == [None]
    again = ForkingPickler.loads(ForkingPickler.dumps(batch))
    assert [bytes(v) for v in again["bin"]] == [payload(i) for i in range(5)]
    del batch
    assert ring.held() == 0  # the bytes went with the pickle: the block is free again


def test_records_pack_as_their_decoded_samples(bytes_dataset, tmp_path):
    url, _ = bytes_dataset
    with Catalog(url) as cat:
        shard = cat.shards("train")[0].url
    with shardcat.ShardReader(shard) as r:
        records = list(r.iter_records())
    fast = pack_records(records, {"json": lambda j: j["label"]})
    slow = pack_samples(
        [dict(rec.decode(writable=True), json=rec["json"].decode()["label"]) for rec in records]
    )
    assert fast.copy() == slow.copy()
    assert list(fast.columns) == list(slow.columns) == ["bin"]


def test_a_block_is_reused_only_after_every_view_of_it_is_gone():
    ring = process_ring()
    gc.collect()
    start = ring.held()
    batch = pack_samples([{"__key__": "a", "bin": b"x" * 10}])
    view = batch["bin"][0]
    arr = batch["bin"].data[2:5]
    tensor = torch.from_numpy(batch["bin"].data)
    del batch
    assert ring.held() == start + 1
    other = pack_samples([{"__key__": "b", "bin": b"y" * 10}])  # another block
    assert bytes(view) == b"x" * 10 and bytes(arr) == b"xxx" and int(tensor[0]) == ord("x")
    del view, arr
    assert ring.held() == start + 2
    del tensor
    assert ring.held() == start + 1
    del other
    assert ring.held() == start
    blocks = len(ring.blocks)
    for i in range(50):  # dropped batches: the same blocks again
        pack_samples([{"__key__": str(i), "bin": payload(i)}])
    assert len(ring.blocks) == blocks


@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("workers", [0, 1, 2])
def test_each_sample_once_per_epoch_in_packed_batches(bytes_dataset, workers, persistent):
    url, expected = bytes_dataset
    for shuffle in (False, True):
        ds = ShardIterableDataset(
            url, "train", batch_size=8, collate=pack_samples, shuffle=shuffle, shuffle_buffer=10
        )
        loader = ShardLoader(ds, num_workers=workers, persistent_workers=persistent and workers > 0)
        # The same batches, in the same order, as a loader collating sample dicts.
        plain = ShardIterableDataset(
            url, "train", batch_size=8, collate=list, shuffle=shuffle, shuffle_buffer=10
        )
        for epoch in range(2):
            ds.set_epoch(epoch)
            plain.set_epoch(epoch)
            batches = list(loader)
            assert contents(batches) == expected
            want = [[s["__key__"] for s in b] for b in ShardLoader(plain, num_workers=workers)]
            assert [keys_of(b) for b in batches] == want


def test_kept_batches_are_never_overwritten(bytes_dataset):
    url, expected = bytes_dataset
    ds = ShardIterableDataset(url, "train", batch_size=4, collate=pack_samples, shuffle=False)
    loader = ShardLoader(ds, num_workers=2, prefetch_factor=4)
    kept = list(loader)  # every batch held: the workers must take new blocks
    assert contents(kept) == expected
    tokens = {t: len(blocks) for t, (_, blocks) in packed._maps.items()}
    assert max(tokens.values()) >= 10
    # Dropped as they come, a few blocks per worker go round.
    del kept
    ds2 = ShardIterableDataset(url, "train", batch_size=4, collate=pack_samples, shuffle=False)
    loader2 = ShardLoader(ds2, num_workers=1, bundle=1)  # bundles: test_torch_bundle.py
    seen = {k for b in loader2 for k in b["__key__"]}
    assert seen == set(expected)
    worker = loader2._iterator._workers[0].pid
    mapped = [len(blocks) for pid_, blocks in packed._maps.values() if pid_ == worker]
    assert mapped and mapped[0] <= 6


def boom_at_40(meta: dict) -> int:
    if meta["label"] == 0 and os.environ.get("BOOM"):
        raise ValueError("boom")
    return meta["label"]


def _our_shm(pids: set[int]) -> set[str]:
    return {
        n for n in os.listdir("/dev/shm") if "shardcat" in n or any(f"_{p}_" in n for p in pids)
    }


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_no_shared_memory_is_left_behind(bytes_dataset, method, monkeypatch):
    url, expected = bytes_dataset
    before = set(os.listdir("/dev/shm"))
    pids = {os.getpid()}

    def loader(**kw: Any) -> ShardLoader:
        ds = ShardIterableDataset(
            url, "train", batch_size=4, collate=pack_samples, decode={"json": boom_at_40}
        )
        return ShardLoader(ds, num_workers=2, multiprocessing_context=method, **kw)

    # Normal end, and the blocks are anonymous memory (memfd), never files in /dev/shm.
    ok = loader()
    it = iter(ok)
    first = next(it)
    links = []
    for w in ok._iterator._workers:
        pids.add(w.pid)
        for fd in os.listdir(f"/proc/{w.pid}/fd"):
            # The worker reads on meanwhile (its epoch may arrive in one bundle): a shard file
            # it closes between the listing and the readlink is gone.
            with contextlib.suppress(FileNotFoundError):
                links.append(os.readlink(f"/proc/{w.pid}/fd/{fd}"))
    # (a spawned worker may still be starting: the one that sent the batch has its block)
    assert any(link.startswith("/memfd:shardcat-batch") for link in links)
    assert len(contents([first, *it])) == len(expected)
    del ok, it, first
    # A break, then the loader dropped.
    broken = loader(persistent_workers=False)
    for _ in broken:
        break
    del broken
    # An exception in a worker.
    monkeypatch.setenv("BOOM", "1")
    failing = loader()
    with pytest.raises(ValueError, match="boom"):
        list(failing)
    failing._iterator._shutdown_workers()
    monkeypatch.delenv("BOOM")
    # A killed worker: the loader says so (torch's check, or ours when a batch it had packed
    # arrives after it died).
    # (Bundles of 2: the default of 16 would bring each worker's whole epoch in one trip,
    # received before the kill.)
    killer = loader(bundle=2)
    killed = iter(killer)
    next(killed)
    victim = killer._iterator._workers[0].pid
    pids.add(victim)

    def kill_and_drain(batches: Any) -> None:
        # torch's SIGCHLD handler may raise right at the kill, or the next batch does.
        os.kill(victim, signal.SIGKILL)
        for _ in batches:
            pass

    with pytest.raises(RuntimeError, match=r"killed|exited"):
        kill_and_drain(killed)
    # Shut down now, so torch's SIGCHLD handler stops watching the dead worker.
    with contextlib.suppress(RuntimeError):
        killer._iterator._shutdown_workers()
    del killer, killed
    gc.collect()
    assert _our_shm(pids) - before == set()
    # Mappings of exited workers are forgotten when new workers send their first batch:
    # only the last loader's (exited since) are left.
    for _ in range(3):
        list(loader(persistent_workers=False))
    assert sum(not packed._alive(pid) for pid, _ in packed._maps.values()) <= 2


@pytest.mark.parametrize("stop", [1, 3])
def test_packed_batches_resume(bytes_dataset, stop):
    url, _ = bytes_dataset

    def make() -> ShardIterableDataset:
        ds = ShardIterableDataset(
            url, "train", seed=3, shuffle_buffer=5, batch_size=4, collate=pack_samples
        )
        ds.set_epoch(1)
        return ds

    full, resumed = stop_and_resume(make, stop, num_workers=2)
    assert [[s["__key__"] for s in b] for b in resumed] == [[s["__key__"] for s in b] for b in full]
    # Without workers the dataset counts packed batches itself.
    ds = ShardIterableDataset(url, "train", shuffle=False, batch_size=5, collate=pack_samples)
    it = iter(ds)
    head = [keys_of(next(it)) for _ in range(3)]
    again = ShardIterableDataset(url, "train", shuffle=False, batch_size=5, collate=pack_samples)
    again.load_state_dict(ds.state_dict())
    everything = [
        keys_of(b)
        for b in ShardIterableDataset(
            url, "train", shuffle=False, batch_size=5, collate=pack_samples
        )
    ]
    rest = [k for b in again for k in b["__key__"]]
    assert [k for b in head for k in b] + rest == [k for b in everything for k in b]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_packed_batches_from_either_catalog_and_s3(catalog_url, s3, tmp_path, method):
    opts = s3["storage_options"]
    with Catalog(catalog_url, storage_options=opts) as cat:
        expected = make_bytes_dataset(
            cat, f"{s3['url']}/train", sizes=(6, 10), storage_options=opts
        )
        assert cat.get("train", "s/00000").key == "s/00000"  # used here before the workers start
        ds = ShardIterableDataset(
            cat, "train", batch_size=3, collate=pack_samples, rank=0, world_size=1
        )
        loader = ShardLoader(ds, num_workers=2, multiprocessing_context=method)
        assert contents(list(loader)) == expected
        # Ranks split the packed epoch too.
        parts = [
            contents(
                list(
                    ShardIterableDataset(
                        cat, "train", batch_size=3, collate=pack_samples, rank=r, world_size=2
                    )
                )
            )
            for r in range(2)
        ]
        assert not set(parts[0]) & set(parts[1]) and {**parts[0], **parts[1]} == expected


def test_pin_memory_and_a_plain_dataloader_pass_packed_batches_on(bytes_dataset):
    from torch.utils.data._utils.pin_memory import pin_memory

    url, expected = bytes_dataset
    ds = ShardIterableDataset(url, "train", batch_size=6, collate=pack_samples)
    batches = list(
        DataLoader(ds, batch_size=None, collate_fn=shardcat.torch.unchanged, num_workers=1)
    )
    assert contents(batches) == expected
    assert pin_memory(batches[0]) is batches[0]  # what the loader's pin_memory thread calls


def test_a_loader_collate_fn_packs_per_sample_datasets(bytes_dataset):
    url, expected = bytes_dataset
    ds = ShardIterableDataset(url, "train", shuffle_buffer=7)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=pack_samples)
    assert contents(list(loader)) == expected


def label_only(sample: dict) -> dict:
    # A whole-sample decode (module level, for spawned workers): packed from the sample dicts.
    sample["json"] = sample["json"]["label"]
    return sample


def test_a_whole_sample_decode_and_a_mix_pack_too(bytes_dataset):
    from shardcat.torch import MixedDataset

    url, expected = bytes_dataset
    ds = ShardIterableDataset(
        url, "train", shuffle=False, decode=label_only, batch_size=8, collate=pack_samples
    )
    batches = list(ShardLoader(ds, num_workers=1))
    assert contents(batches) == expected
    assert all(isinstance(label, int) for b in batches for label in b["json"])
    half = ShardIterableDataset(url, "train", where="key < 's/00040'", seed=1)
    rest = ShardIterableDataset(url, "train", where="key >= 's/00040'", seed=2)
    mix = MixedDataset([(half, None), (rest, None)], batch_size=8, collate=pack_samples)
    assert contents(list(ShardLoader(mix, num_workers=2))) == expected
