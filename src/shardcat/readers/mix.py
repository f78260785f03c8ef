"""Several sample streams mixed in given proportions: deterministic per epoch, resumable.

Each reader (a DataLoader worker of one rank) reads its own share of every
stream (the streams' usual split) and, sample by sample, draws which stream
gives the next one, with probability proportional to its weight, from a
generator seeded by ``(seed, epoch, rank, worker)``. The reader stops at the
first draw of a stream it has exhausted, so no sample repeats within an
epoch and the proportions hold to the end. Since the draws are known in
advance, a reader that yielded ``k`` samples resumes from the ``k``-th draw,
each stream from the number of its samples among the first ``k``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .plan import epoch_rng
from .stream import SampleStream

__all__ = ["MixedStream"]

_MIX = 0x6D6978  # keeps the draws apart from the streams' own shuffles of the same seed


@dataclass(frozen=True, slots=True)
class MixedStream:
    """Streams and their weights (normalised to proportions); picklable like the streams.

    Parameters
    ----------
    streams:
        The streams to mix (datasets of any catalogs).
    weights:
        One positive weight per stream.
    seed:
        With the epoch, decides the draws (each stream keeps its own seed
        for its shuffle).

    Raises
    ------
    ValueError
        No streams, a weight that is not positive, or counts that differ.
    """

    streams: tuple[SampleStream, ...]
    weights: tuple[float, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.streams:
            raise ValueError("mix at least one stream")
        if len(self.weights) != len(self.streams):
            raise ValueError(f"{len(self.weights)} weights for {len(self.streams)} streams")
        if not all(w > 0 and np.isfinite(w) for w in self.weights):
            raise ValueError(f"weights must be positive and finite, not {self.weights}")

    @property
    def proportions(self) -> np.ndarray:
        w = np.asarray(self.weights, dtype=np.float64)
        return np.asarray(w / w.sum())

    def draws(
        self, epoch: int, rank: int = 0, world: int = 1, worker: int = 0, workers: int = 1
    ) -> np.ndarray:
        """Which stream gives each sample of one reader in ``epoch``, until one runs out."""
        counts = [s.reader_counts(epoch, rank, world, workers)[worker] for s in self.streams]
        rng = epoch_rng(self.seed, epoch, _MIX, rank, worker)
        # One more draw than there are samples: some stream is drawn once too often by then.
        picks = rng.choice(len(counts), size=sum(counts) + 1, p=self.proportions)
        taken = np.zeros(len(picks), dtype=np.int64)
        for i, n in enumerate(counts):
            mine = picks == i
            # 1-based rank of each draw among the draws of its stream.
            taken[mine] = np.arange(1, int(mine.sum()) + 1) - n
        over = np.flatnonzero(taken > 0)
        return picks[: int(over[0])].astype(np.int16)

    def rank_count(self, epoch: int, rank: int = 0, world: int = 1) -> int:
        """Samples rank ``rank`` yields in ``epoch`` with one reader (workers change it)."""
        return self.reader_counts(epoch, rank, world, 1)[0]

    def reader_counts(
        self, epoch: int, rank: int = 0, world: int = 1, workers: int = 1
    ) -> list[int]:
        """Samples each of the rank's ``workers`` yields in ``epoch``."""
        return [len(self.draws(epoch, rank, world, w, workers)) for w in range(workers)]

    def stream_counts(
        self, epoch: int, rank: int = 0, world: int = 1, worker: int = 0, workers: int = 1
    ) -> list[int]:
        """Samples one reader takes from each stream in ``epoch``."""
        picks = self.draws(epoch, rank, world, worker, workers)
        return [int(n) for n in np.bincount(picks, minlength=len(self.streams))]

    def iter_reader(
        self,
        epoch: int,
        rank: int = 0,
        world: int = 1,
        worker: int = 0,
        workers: int = 1,
        start: int = 0,
    ) -> Iterator[Any]:
        """The mixed samples of one reader in ``epoch``, from its ``start``-th on.

        Resuming at ``start`` yields what an uninterrupted run yields after
        its first ``start`` samples; each stream skips what it gave before.
        """
        picks = self.draws(epoch, rank, world, worker, workers)
        done = np.bincount(picks[:start], minlength=len(self.streams)).tolist()
        readers: list[Iterator[Any]] = [
            s.iter_reader(epoch, rank, world, worker, workers, d)
            for s, d in zip(self.streams, done)
        ]
        for pick in picks[start:].tolist():
            yield next(readers[pick])

    @classmethod
    def of(cls, streams: Sequence[tuple[SampleStream, float]], seed: int = 0) -> MixedStream:
        """``MixedStream`` from ``(stream, weight)`` pairs."""
        return cls(tuple(s for s, _ in streams), tuple(float(w) for _, w in streams), seed)
