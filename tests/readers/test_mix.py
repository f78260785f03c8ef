"""Mixing datasets in proportions: deterministic draws, no repeats, splits and resume kept."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shardcat.reading import Catalog

from .conftest import make_dataset, stop_and_resume

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.torch import MixedDataset, ShardIterableDataset  # noqa: E402

A_SIZES = (60, 45, 70, 25)  # 200 samples
B_SIZES = (90, 80, 30)  # 200 samples, in another catalog


def keys_only(sample: dict[str, Any]) -> str:
    return sample["__key__"]


@pytest.fixture
def two_catalogs(tmp_path) -> tuple[str, str]:
    urls = []
    for name, sizes in (("a", A_SIZES), ("b", B_SIZES)):
        url = f"sqlite:///{tmp_path / f'{name}.db'}"
        with Catalog(url) as cat:
            make_dataset(cat, str(tmp_path / name), sizes=sizes)
        urls.append(url)
    return urls[0], urls[1]


def mix_of(urls: tuple[str, str], weights=(0.7, 0.3), seed: int = 1, **kw: Any) -> MixedDataset:
    a = ShardIterableDataset(urls[0], "train", seed=10, shuffle_buffer=8, decode=keys_only)
    b = ShardIterableDataset(urls[1], "train", seed=20, shuffle_buffer=8, decode=keys_only)
    return MixedDataset([(a, weights[0]), (b, weights[1])], seed=seed, **kw)


def test_a_mix_keeps_its_proportions_and_repeats_nothing(two_catalogs):
    ds = mix_of(two_catalogs, seed=1)
    draws = ds.mix.draws(0)
    counts = ds.stream_counts()[0]
    assert counts == np.bincount(draws, minlength=2).tolist()
    # The reader stops at the first draw of a used-up stream: here the heavier one.
    assert counts[0] == sum(A_SIZES) and counts[1] < sum(B_SIZES)
    share = counts[0] / sum(counts)
    # 0.7 within 4 standard deviations of a binomial proportion over these draws.
    assert abs(share - 0.7) <= 4 * np.sqrt(0.21 / sum(counts))
    got = list(ds)
    assert len(got) == len(ds) == sum(counts)
    # Each stream's samples come in its own order, each once: the mix only interleaves them.
    from_a = [k for k, d in zip(got, draws) if d == 0]
    from_b = [k for k, d in zip(got, draws) if d == 1]
    alone_a = list(ShardIterableDataset(two_catalogs[0], "train", seed=10, shuffle_buffer=8))
    alone_b = list(ShardIterableDataset(two_catalogs[1], "train", seed=20, shuffle_buffer=8))
    assert from_a == [s["__key__"] for s in alone_a]
    assert from_b == [s["__key__"] for s in alone_b][: counts[1]]


def test_the_same_seed_draws_the_same_mix_and_epochs_differ(two_catalogs):
    first = mix_of(two_catalogs, seed=5)
    again = mix_of(two_catalogs, seed=5)
    assert list(first) == list(again)
    assert first.stream_counts() == again.stream_counts()
    assert not np.array_equal(first.mix.draws(0), mix_of(two_catalogs, seed=6).mix.draws(0))
    e1 = mix_of(two_catalogs, seed=5)
    e1.set_epoch(1)
    assert list(e1) != list(first)


@pytest.mark.parametrize("weights", [(1, 1), (0.2, 0.8), (5, 1)])
def test_draw_counts_are_exact_and_bounded(two_catalogs, weights):
    ds = mix_of(two_catalogs, weights=weights, seed=3)
    for workers in (1, 2, 3):
        per_worker = ds.stream_counts(workers)
        for w, counts in enumerate(per_worker):
            totals = [s.reader_counts(0, 0, 1, workers)[w] for s in ds.mix.streams]
            # One stream is used up exactly; none is read past its share.
            assert any(c == t for c, t in zip(counts, totals))
            assert all(c <= t for c, t in zip(counts, totals))
        assert [sum(c) for c in per_worker] == ds.worker_counts(workers)


def test_ranks_and_workers_split_a_mix_without_overlap(two_catalogs):
    seen: list[tuple[int, str]] = []
    for rank in range(2):
        ds = mix_of(two_catalogs, seed=2, rank=rank, world_size=2)
        for w in range(2):
            picks = ds.mix.draws(0, rank, 2, w, 2)
            keys = list(ds.mix.iter_reader(0, rank, 2, w, 2))
            seen += [(int(p), k) for p, k in zip(picks, keys)]
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(("workers", "stop"), [(0, 5), (2, 3), (2, 8)])
def test_a_stopped_mix_resumes_where_it_stopped(two_catalogs, workers, stop):
    def make() -> MixedDataset:
        ds = mix_of(two_catalogs, seed=4)
        ds.set_epoch(2)
        return ds

    full, resumed = stop_and_resume(make, stop, batch_size=6, num_workers=workers)
    assert sum(len(b) for b in full) == sum(make().worker_counts(workers))
    assert resumed == full


def test_a_mix_batches_in_its_workers_and_refuses_batching_members(two_catalogs):
    ds = mix_of(two_catalogs, seed=4, batch_size=7)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sum(len(b) for b in batches) == sum(ds.worker_counts(2))
    a = ShardIterableDataset(two_catalogs[0], "train", batch_size=3)
    with pytest.raises(ValueError, match="batch_size= instead"):
        MixedDataset([(a, 1.0)])
    with pytest.raises(ValueError, match="positive"):
        mix_of(two_catalogs, weights=(1, 0))


# --- resizing streams per epoch: repeat= and choose= (MosaicML's Stream options) ---------------


def sized_mix(
    urls: tuple[str, str], a: dict[str, Any], b: dict[str, Any], **kw: Any
) -> MixedDataset:
    from shardcat.torch import MixStream

    da = ShardIterableDataset(urls[0], "train", seed=10, shuffle_buffer=8, decode=keys_only)
    db = ShardIterableDataset(urls[1], "train", seed=20, shuffle_buffer=8, decode=keys_only)
    return MixedDataset([MixStream(da, **a), MixStream(db, **b)], seed=3, **kw)


def tally(keys: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for k in keys:
        out[k] = out.get(k, 0) + 1
    return out


@pytest.mark.parametrize("workers", [0, 2])
def test_repeat_and_choose_give_exact_counts_per_epoch(two_catalogs, workers):
    # b: 2.5 passes (500 samples); a: a subsample of 70 of its 200, a new one each epoch.
    ds = sized_mix(two_catalogs, {"choose": 70}, {"repeat": 2.5})
    subsets = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        draws = [ds.mix.draws(epoch, 0, 1, w, max(workers, 1)) for w in range(max(workers, 1))]
        got = [k for b in DataLoader(ds, batch_size=16, num_workers=workers) for k in b]
        assert len(got) == 70 + 500 == sum(len(d) for d in draws)
        # Which dataset each key came from: keys repeat across the two catalogs, so count by draw.
        by_stream: list[list[str]] = [[], []]
        if workers == 0:
            for k, d in zip(got, draws[0]):
                by_stream[int(d)].append(k)
            a, b = tally(by_stream[0]), tally(by_stream[1])
            assert sum(a.values()) == 70 and max(a.values()) == 1  # a subset: each at most once
            assert sum(b.values()) == 500 and len(b) == 200
            assert sorted(set(b.values())) == [2, 3]  # every sample twice, half of them thrice
            assert sum(1 for n in b.values() if n == 3) == 100
            subsets.append(set(a))
        assert ds.stream_counts(workers) == [np.bincount(d, minlength=2).tolist() for d in draws]
    if subsets:
        assert subsets[0] != subsets[1]  # chosen again each epoch


def test_a_small_stream_repeated_within_the_epoch(two_catalogs):
    # Every sample of both datasets: a once, b three times, each pass of b in its own order.
    ds = sized_mix(two_catalogs, {}, {"repeat": 3})
    draws = ds.mix.draws(0)
    got = list(ds)
    assert len(got) == len(ds) == 200 + 600
    from_a = [k for k, d in zip(got, draws) if d == 0]
    from_b = [k for k, d in zip(got, draws) if d == 1]
    assert sorted(from_a) == sorted(set(from_a)) and len(from_a) == 200
    assert set(tally(from_b).values()) == {3} and len(tally(from_b)) == 200
    passes = [from_b[i * 200 : (i + 1) * 200] for i in range(3)]
    assert all(sorted(p) == sorted(passes[0]) for p in passes)
    assert passes[0] != passes[1] != passes[2]
    # The first pass is the dataset's own order: repeat=1 changes nothing.
    alone = ShardIterableDataset(two_catalogs[1], "train", seed=20, shuffle_buffer=8)
    assert passes[0] == [s["__key__"] for s in alone]


def test_ranks_and_workers_share_the_chosen_samples_exactly(two_catalogs):
    seen: list[tuple[int, str]] = []
    for rank in range(2):
        ds = sized_mix(two_catalogs, {"choose": 51}, {"repeat": 0.5}, rank=rank, world_size=2)
        for w in range(3):
            picks = ds.mix.draws(0, rank, 2, w, 3)
            keys = list(ds.mix.iter_reader(0, rank, 2, w, 3))
            assert len(keys) == len(picks)
            seen += [(int(p), k) for p, k in zip(picks, keys)]
    # 51 of a and 100 of b over 2 ranks x 3 workers; no sample twice (both below one pass).
    assert sum(1 for p, _ in seen if p == 0) == 51
    assert sum(1 for p, _ in seen if p == 1) == 100
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize(("workers", "stop"), [(0, 7), (2, 5)])
def test_a_resized_mix_resumes_where_it_stopped(two_catalogs, workers, stop):
    def make() -> MixedDataset:
        ds = sized_mix(two_catalogs, {"choose": 90, "weight": 1.0}, {"repeat": 1.7, "weight": 2.0})
        ds.set_epoch(1)
        return ds

    full, resumed = stop_and_resume(make, stop, batch_size=8, num_workers=workers)
    assert resumed == full
    assert sum(len(b) for b in full) == sum(make().worker_counts(workers))


def test_resizing_arguments_are_checked(two_catalogs):
    with pytest.raises(ValueError, match="not both"):
        sized_mix(two_catalogs, {"choose": 5, "repeat": 2}, {})
    with pytest.raises(ValueError, match="every stream a weight, or none"):
        sized_mix(two_catalogs, {"weight": 1.0}, {})
    with pytest.raises(ValueError, match="repeat must be"):
        sized_mix(two_catalogs, {"repeat": -1}, {})
    with pytest.raises(ValueError, match="cannot take -3"):
        sized_mix(two_catalogs, {"choose": -3}, {})
