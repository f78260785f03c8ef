"""Bundles: several batches of one DataLoader worker per trip between processes.

Each item a DataLoader worker sends costs the training process a fixed
~250-330 µs (torch's queues, feeder thread, polling, pickling; measured
with packed batches of 64), whatever its size. A worker of a dataset that
makes its own batches therefore sends them in bundles, and
:class:`~shardcat.torch.ShardLoader` splits them again in the order the
batches would have come one by one. Nothing here imports torch until a
bundle is pinned (``pin_memory=True``, in the training process).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["BUNDLE_BATCHES", "BUNDLE_SAMPLES", "Bundle", "PerBatch", "bundled", "unbundled"]


BUNDLE_SAMPLES = 256
"""A :class:`ShardLoader` bundles a dataset's batches so that one trip carries at least this many samples."""


BUNDLE_BATCHES = 16
"""At most this many batches per bundle by default: each holds its own shared-memory block."""


class Bundle:
    """Consecutive batches of one DataLoader worker, sent in one trip; :class:`ShardLoader` splits it.

    ``last``: the worker has no batch after these (a worker that has no
    batch at all sends one empty last bundle, so the loader never waits for
    it).
    """

    __slots__ = ("batches", "last", "worker")

    def __init__(self, worker: int, batches: list[Any], last: bool) -> None:
        self.worker = worker
        self.batches = batches
        self.last = last

    def pin_memory(self) -> Bundle:
        """Each batch pinned as ``DataLoader(pin_memory=True)`` would pin it alone."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.batches = [pin_memory(b) for b in self.batches]  # type: ignore[no-untyped-call]
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Bundle, (self.worker, self.batches, self.last))


class PerBatch:
    """A ``collate_fn`` applied to each batch of a bundle, in the worker (pickles for spawn)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, item: Any) -> Any:
        if isinstance(item, Bundle):
            item.batches = [self.fn(b) for b in item.batches]
            return item
        return self.fn(item)

    def __reduce__(self) -> tuple[Any, ...]:
        return (PerBatch, (self.fn,))


def bundled(batches: Iterator[Any], size: int, worker: int) -> Iterator[Bundle]:
    """``batches`` in bundles of ``size``, the last one (maybe shorter, maybe empty) marked ``last``."""
    group: list[Any] = []
    for batch in batches:
        if len(group) == size:
            # Sent once the next batch exists, so the final bundle can say it is the last.
            yield Bundle(worker, group, False)
            group = []
        group.append(batch)
    yield Bundle(worker, group, True)


def unbundled(trips: Iterator[Any], workers: int) -> Iterator[Any]:
    """The batches of ``trips`` (:class:`Bundle` objects) in the order unbundled batches would come.

    A DataLoader takes one item from each worker in turn (skipping a worker
    once it has run out); so does this, batch by batch, from each worker's
    bundles: the user sees the batches in the same order, whatever the
    bundle size. Every worker ends with a bundle marked ``last``, so none
    is waited for once it has run out. A worker's batches wait here until
    their turn (at most about one bundle per worker); a batch is handed
    on, not kept, so its shared-memory block goes when the user drops it.
    """
    pending: list[deque[Any]] = [deque() for _ in range(workers)]
    done = [False] * workers
    order = list(range(workers))
    turn = 0
    while order:
        w = order[turn]
        while not pending[w] and not done[w]:
            trip = next(trips, None)
            if trip is None:  # every worker has stopped: what is queued is all there is
                done = [True] * len(done)
                break
            if not isinstance(trip, Bundle):
                raise TypeError(
                    f"a DataLoader worker sent a {type(trip).__name__}, not a Bundle: "
                    "iterate the dataset with one ShardLoader at a time"
                )
            pending[trip.worker].extend(trip.batches)
            done[trip.worker] = done[trip.worker] or trip.last
            del trip  # hold no batch past its turn
        if pending[w]:
            yield pending[w].popleft()
            turn = (turn + 1) % len(order)
        else:
            del order[turn]
            turn = turn % len(order) if order else 0
