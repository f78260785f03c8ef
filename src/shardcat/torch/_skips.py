"""Samples dropped by ``on_error``, counted by DataLoader workers where the training process sees them."""

from __future__ import annotations

import torch
from torch.utils.data import get_worker_info

from ..errors import SampleDecodeError

__all__ = ["SkipCounts"]

SLOTS = 64
"""Counters, one per DataLoader worker (ids beyond share one)."""


class SkipCounts:
    """Dropped samples per DataLoader worker, in shared memory.

    torch hands a shared tensor to fork and spawn workers alike, so what a
    worker adds the training process reads. Each worker adds to its own
    slot: no two processes write one counter, so no lock is needed.
    """

    def __init__(self) -> None:
        self._counts = torch.zeros(SLOTS, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]

    @property
    def total(self) -> int:
        """Samples dropped by every worker (and the training process itself) since made."""
        return int(self._counts.sum())

    def add(self, worker: int) -> None:
        """Count one dropped sample of DataLoader worker ``worker`` (0: no workers)."""
        self._counts[worker % SLOTS] += 1

    def __call__(self, error: SampleDecodeError) -> None:
        """Count one dropped sample of the DataLoader worker this runs in (a :data:`Skipped`)."""
        info = get_worker_info()
        self.add(0 if info is None else info.id)
