"""The epoch plan: shard assignment, the shuffle buffer's order, and DataLoader positions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat.readers import ShardTask, assign, buffered_order, epoch_rng, positions_after

counts = st.lists(st.integers(0, 50), min_size=0, max_size=30)


@given(counts, st.integers(1, 9), st.integers(0, 2**32), st.integers(0, 5), st.booleans())
@settings(max_examples=200, deadline=None)
def test_every_shard_goes_to_exactly_one_slot_balanced_by_records(
    sizes, slots, seed, epoch, shuffle
):
    tasks = [ShardTask(f"s{i}", n) for i, n in enumerate(sizes)]
    picks = assign(tasks, slots, seed=seed, epoch=epoch, shuffle=shuffle)
    assert len(picks) == slots
    assert sorted(i for p in picks for i in p) == list(range(len(tasks)))
    loads = [sum(sizes[i] for i in p) for p in picks]
    # Greedy least-loaded: slots differ by at most the largest shard.
    assert max(loads) - min(loads) <= max(sizes, default=0)
    assert picks == assign(tasks, slots, seed=seed, epoch=epoch, shuffle=shuffle)


def test_the_epoch_changes_the_shard_order_and_the_seed_fixes_it():
    tasks = [ShardTask(f"s{i}", 10) for i in range(40)]
    a = assign(tasks, 1, seed=7, epoch=0, shuffle=True)
    assert a == assign(tasks, 1, seed=7, epoch=0, shuffle=True)
    assert a != assign(tasks, 1, seed=7, epoch=1, shuffle=True)
    assert a != assign(tasks, 1, seed=8, epoch=0, shuffle=True)
    assert assign(tasks, 1, seed=7, epoch=0, shuffle=False) == [list(range(40))]


def test_assign_refuses_zero_slots():
    with pytest.raises(ValueError, match="at least 1"):
        assign([], 0, seed=0, epoch=0, shuffle=True)


@given(st.integers(0, 300), st.integers(1, 64), st.integers(0, 2**32))
@settings(max_examples=200, deadline=None)
def test_the_buffer_order_is_a_permutation_that_never_runs_ahead(n, buffer, seed):
    order = buffered_order(n, buffer, epoch_rng(seed, 0))
    assert sorted(order.tolist()) == list(range(n))
    # The k-th emitted item has been read: at most `buffer` items are read ahead.
    assert all(order[k] <= k + buffer for k in range(n))
    # Pending (read, not yet emitted) items never exceed the buffer.
    emitted = np.zeros(n, dtype=bool)
    for k in range(max(0, n - buffer)):
        emitted[order[k]] = True
        read = min(n, k + buffer + 1)
        assert read - emitted[:read].sum() <= buffer


def test_the_buffer_shuffles_and_without_rng_keeps_the_order():
    assert buffered_order(50, 10, None).tolist() == list(range(50))
    assert buffered_order(50, 1, epoch_rng(0, 0)).tolist() == list(range(50))
    shuffled = buffered_order(50, 10, epoch_rng(0, 0))
    assert shuffled.tolist() != list(range(50))
    assert shuffled.tolist() == buffered_order(50, 10, epoch_rng(0, 0)).tolist()


def test_positions_follow_the_dataloaders_round_robin():
    # Worker 0 has 2 batches of 4 (the second short), worker 1 has 4 batches.
    counts = [5, 16]
    assert positions_after(counts, 4, 0) == ([0, 0], 0)
    assert positions_after(counts, 4, 1) == ([4, 0], 1)
    assert positions_after(counts, 4, 3) == ([5, 4], 1)
    # Worker 0 is exhausted: the rest come from worker 1.
    assert positions_after(counts, 4, 4) == ([5, 8], 0)
    assert positions_after(counts, 4, 6) == ([5, 16], 0)
    assert positions_after(counts, 4, 99) == ([5, 16], 0)
    # drop_last drops each worker's short batch.
    assert positions_after(counts, 4, 2, drop_last=True) == ([4, 4], 0)
    assert positions_after(counts, 4, 3, drop_last=True) == ([4, 8], 0)
    assert positions_after([9, 9, 9], 4, 4) == ([8, 4, 4], 1)
