"""Who reads which shard, in which order, for one epoch: pure arithmetic, no IO.

Everything here is a function of ``(seed, epoch)`` and the shard list, so
every worker process and every rank computes the same plan on its own, and
a resumed job computes the plan it stopped in.

- :func:`assign` splits the shards of an epoch over ``slots`` readers (one
  per DataLoader worker per rank), balanced by record count: shards in the
  epoch's shuffled order, each to the slot with the fewest records so far.
- :func:`buffered_order` is the order in which a bounded shuffle buffer
  emits a slot's stream, computed on positions instead of samples. A reader
  that knows it can resume at any sample: it skips what was emitted and
  reads from the first shard still holding a sample to come.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..orchestration.joins import GroupJoin

__all__ = ["ShardTask", "assign", "buffered_order", "epoch_rng"]


@dataclass(frozen=True, slots=True)
class ShardTask:
    """One shard to read: its URL, how many of its records to yield, and which.

    ``offsets`` (sorted byte offsets) restricts the shard to the records a
    filter chose; None means every record but the ``hidden`` ones (deleted or
    replaced in the latest version, docs/LIFECYCLE.md). ``expect`` is the
    registered ``(file_id, footer_crc)``, checked when the shard is opened.
    ``kind`` is the shard row's kind: a ``"tar"`` indexed in place has no
    footer, so its records are read from the catalog rows of ``shard_id``.
    ``joins`` are its samples' column groups (docs/GROUPS.md §5), in group order.
    """

    url: str
    count: int
    expect: tuple[str, int] | None = None
    offsets: tuple[int, ...] | None = None
    hidden: frozenset[int] = frozenset()
    kind: str = "native"
    shard_id: int | None = None
    joins: tuple[GroupJoin, ...] = ()


def epoch_rng(seed: int, epoch: int, *stream: int) -> np.random.Generator:
    """The random generator of one epoch (and optionally one slot): same inputs, same draws."""
    return np.random.default_rng([seed, epoch, *stream])


def assign(
    tasks: Sequence[ShardTask], slots: int, *, seed: int, epoch: int, shuffle: bool
) -> list[list[int]]:
    """Indices of ``tasks`` for each of ``slots`` readers, each shard to exactly one.

    With ``shuffle`` the shards are taken in an order drawn from
    ``(seed, epoch)``; otherwise in the given order. Each goes to the slot
    with the fewest records so far (the lowest slot on a tie), so slots
    differ by at most the largest shard's count.
    """
    if slots < 1:
        raise ValueError(f"slots must be at least 1, not {slots}")
    order = np.arange(len(tasks))
    if shuffle:
        order = epoch_rng(seed, epoch).permutation(len(tasks))
    loads = [0] * slots
    out: list[list[int]] = [[] for _ in range(slots)]
    for i in order.tolist():
        slot = min(range(slots), key=loads.__getitem__)
        out[slot].append(i)
        loads[slot] += tasks[i].count
    return out


def buffered_order(n: int, buffer: int, rng: np.random.Generator | None) -> np.ndarray:
    """Positions ``0..n-1`` of a stream in the order a shuffle buffer of ``buffer`` emits them.

    The buffer fills with the first ``buffer`` items; each further item
    replaces a uniformly drawn one, which is emitted; at the end the rest is
    emitted in a random order. ``rng`` None (or ``buffer`` <= 1) keeps the
    stream order. An item is never emitted before it is read, and never
    more than ``buffer`` items after it was read are pending, which is what
    bounds the reader's memory.
    """
    if rng is None or buffer <= 1 or n <= 1:
        return np.arange(n, dtype=np.int64)
    size = min(buffer, n)
    buf = list(range(size))
    out = np.empty(n, dtype=np.int64)
    draws = rng.integers(0, size, size=n - size).tolist()
    k = 0
    for p, i in zip(range(size, n), draws):
        out[k] = buf[i]
        buf[i] = p
        k += 1
    out[k:] = rng.permutation(np.asarray(buf, dtype=np.int64))
    return out
