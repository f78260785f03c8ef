"""Several sample streams mixed in given proportions: deterministic per epoch, resumable.

Each reader (a DataLoader worker of one rank) reads its own share of every
stream (the streams' usual split) and, sample by sample, draws which stream
gives the next one, with probability proportional to its weight, from a
generator seeded by ``(seed, epoch, rank, worker)``. The reader stops at the
first draw of a stream it has exhausted, so no sample repeats within an
epoch and the proportions hold to the end. Since the draws are known in
advance, a reader that yielded ``k`` samples resumes from the ``k``-th draw,
each stream from the number of its samples among the first ``k``.

A stream may also be resized per epoch, as MosaicML's ``Stream(repeat=,
choose=)``: ``choose`` samples of it per epoch (``repeat`` × its size), dealt
to the readers in proportion to their shares (:func:`allot`). A reader whose
share is ``n`` samples and whose allotment is ``m`` reads its share
``m // n`` times in full (each pass in its own order) and then ``m % n``
samples drawn without replacement from ``(seed, epoch, stream, rank,
worker)``: a sample comes at most ``ceil(repeat)`` times in an epoch, and
with ``repeat`` < 1 at most once. Without weights the mix yields every
chosen sample exactly once, in an order drawn like the rest.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .plan import epoch_rng
from .stream import SampleStream, Skipped

__all__ = ["MixedStream"]

_MIX = 0x6D6978  # keeps the draws apart from the streams' own shuffles of the same seed
_CHOOSE = 0x63686F  # and the subsets of resized streams apart from both
_ENDED: Any = object()
"""What an exhausted stream gives: it dropped samples (on_error), so fewer than allotted."""


def allot(counts: Sequence[int], total: int) -> list[int]:
    """``total`` split over readers in proportion to ``counts``: exact sum, largest remainders first.

    >>> allot([3, 1], 6)
    [5, 1]
    """
    n = sum(counts)
    if n == 0:
        if total:
            raise ValueError(f"cannot choose {total} samples from an empty stream")
        return [0] * len(counts)
    base = [c * total // n for c in counts]
    # The samples left over go to the readers with the largest remainders (the lowest first on a tie).
    by_remainder = sorted(range(len(counts)), key=lambda r: (-(counts[r] * total % n), r))
    for r in by_remainder[: total - sum(base)]:
        base[r] += 1
    return base


@dataclass(frozen=True, slots=True)
class MixedStream:
    """Streams and their weights (normalised to proportions); picklable like the streams.

    Parameters
    ----------
    streams:
        The streams to mix (datasets of any catalogs).
    weights:
        One positive weight per stream, or None for every stream: then the
        mix yields every (chosen) sample of every stream once per epoch.
    seed:
        With the epoch, decides the draws (each stream keeps its own seed
        for its shuffle).
    sizes:
        Per stream, how many of its samples an epoch has (None: all once;
        more than it holds repeats them); empty: every stream as it is. See
        :meth:`of` for ``repeat``/``choose``.

    Raises
    ------
    ValueError
        No streams, a weight that is not positive, weights for some streams
        only, counts that differ, or a negative size.
    """

    streams: tuple[SampleStream, ...]
    weights: tuple[float, ...] | None
    seed: int = 0
    sizes: tuple[int | None, ...] = ()

    def __post_init__(self) -> None:
        if not self.streams:
            raise ValueError("mix at least one stream")
        if self.weights is not None:
            if len(self.weights) != len(self.streams):
                raise ValueError(f"{len(self.weights)} weights for {len(self.streams)} streams")
            if not all(w > 0 and np.isfinite(w) for w in self.weights):
                raise ValueError(f"weights must be positive and finite, not {self.weights}")
        if self.sizes and len(self.sizes) != len(self.streams):
            raise ValueError(f"{len(self.sizes)} sizes for {len(self.streams)} streams")
        for size, stream in zip(self.sizes, self.streams):
            if size is not None and (size < 0 or (size and not stream.num_samples)):
                raise ValueError(
                    f"cannot take {size} samples per epoch from a stream of {stream.num_samples}"
                )

    @property
    def proportions(self) -> np.ndarray:
        if self.weights is None:
            w = np.asarray(self.epoch_sizes, dtype=np.float64)
        else:
            w = np.asarray(self.weights, dtype=np.float64)
        return np.asarray(w / w.sum())

    @property
    def epoch_sizes(self) -> list[int]:
        """Samples per epoch of each stream (over every reader), before the mix stops any early."""
        sizes = self.sizes or (None,) * len(self.streams)
        return [s.num_samples if n is None else n for s, n in zip(self.streams, sizes)]

    def allotted(
        self, epoch: int, rank: int = 0, world: int = 1, worker: int = 0, workers: int = 1
    ) -> list[int]:
        """Samples one reader may take from each stream in ``epoch`` (its share, resized)."""
        out = []
        sizes = self.sizes or (None,) * len(self.streams)
        for stream, size in zip(self.streams, sizes):
            if size is None:
                out.append(stream.reader_counts(epoch, rank, world, workers)[worker])
                continue
            # Every reader of every rank: the allotment sums to ``size`` over all of them.
            shares = [
                n for r in range(world) for n in stream.reader_counts(epoch, r, world, workers)
            ]
            out.append(allot(shares, size)[rank * workers + worker])
        return out

    def draws(
        self, epoch: int, rank: int = 0, world: int = 1, worker: int = 0, workers: int = 1
    ) -> np.ndarray:
        """Which stream gives each sample of one reader in ``epoch``, until one runs out."""
        counts = self.allotted(epoch, rank, world, worker, workers)
        rng = epoch_rng(self.seed, epoch, _MIX, rank, worker)
        if self.weights is None:
            # Every allotted sample once, in a random order of the streams.
            labels = np.repeat(np.arange(len(counts), dtype=np.int16), counts)
            return np.asarray(rng.permutation(labels))
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
        *,
        skipped: Skipped | None = None,
    ) -> Iterator[Any]:
        """The mixed samples of one reader in ``epoch``, from its ``start``-th on.

        Resuming at ``start`` yields what an uninterrupted run yields after
        its first ``start`` samples; each stream skips what it gave before.
        ``skipped`` is told of the samples a stream dropped (its
        ``on_error``); a stream that dropped some ends early, and its later
        picks are passed over.
        """
        picks = self.draws(epoch, rank, world, worker, workers)
        done = np.bincount(picks[:start], minlength=len(self.streams)).tolist()
        allotted = self.allotted(epoch, rank, world, worker, workers)
        readers: list[Iterator[Any]] = [
            self._resized(i, m, epoch, rank, world, worker, workers, d, skipped)
            for i, (m, d) in enumerate(zip(allotted, done))
        ]
        for pick in picks[start:].tolist():
            sample = next(readers[pick], _ENDED)
            if sample is not _ENDED:
                yield sample

    def _resized(
        self,
        index: int,
        allotted: int,
        epoch: int,
        rank: int,
        world: int,
        worker: int,
        workers: int,
        start: int,
        skipped: Skipped | None = None,
    ) -> Iterator[Any]:
        """``allotted`` samples of one reader's share of stream ``index``, from the ``start``-th.

        Whole passes over the share first (pass ``k`` in its own order),
        then a subset of it drawn without replacement.
        """
        stream = self.streams[index]
        if not self.sizes or self.sizes[index] is None:
            yield from stream.iter_reader(
                epoch, rank, world, worker, workers, start, skipped=skipped
            )
            return
        n = stream.reader_counts(epoch, rank, world, workers)[worker]
        if n == 0:
            return
        full, rest = divmod(allotted, n)
        for k in range(full + (1 if rest else 0)):
            size = n if k < full else rest
            if start >= size:
                start -= size
                continue
            keep = None
            if k == full:
                rng = epoch_rng(self.seed, epoch, _CHOOSE, index, rank, worker)
                keep = np.zeros(n, dtype=bool)
                keep[rng.choice(n, size=rest, replace=False)] = True
            yield from stream.iter_reader(
                epoch, rank, world, worker, workers, start, repeat=k, keep=keep, skipped=skipped
            )
            start = 0

    @classmethod
    def of(
        cls,
        streams: Sequence[tuple[SampleStream, float | None]],
        seed: int = 0,
        *,
        repeat: Sequence[float | None] = (),
        choose: Sequence[int | None] = (),
    ) -> MixedStream:
        """``MixedStream`` from ``(stream, weight)`` pairs, each stream optionally resized.

        ``repeat[i]``: stream ``i`` gives ``round(repeat[i] * its size)``
        samples per epoch (2.5: every sample twice and half of them a third
        time; 0.1: a tenth of them); ``choose[i]``: exactly that many. A
        weight of None for every stream mixes every chosen sample once.

        Raises
        ------
        ValueError
            ``repeat`` and ``choose`` both given for one stream, a negative
            one, or weights for some streams only.
        """
        weights = [w for _, w in streams]
        if all(w is None for w in weights):
            mixed: tuple[float, ...] | None = None
        elif any(w is None for w in weights):
            raise ValueError("give every stream a weight, or none (mix every chosen sample once)")
        else:
            mixed = tuple(float(w) for w in weights if w is not None)
        sizes: list[int | None] = []
        for i, (s, _) in enumerate(streams):
            r = repeat[i] if i < len(repeat) else None
            c = choose[i] if i < len(choose) else None
            if r is not None and c is not None:
                raise ValueError(f"stream {i}: give repeat or choose, not both")
            if r is not None and not (r >= 0 and np.isfinite(r)):
                raise ValueError(f"stream {i}: repeat must be a finite number >= 0, not {r}")
            sizes.append(c if r is None else round(r * s.num_samples))
        resized = tuple(sizes) if any(n is not None for n in sizes) else ()
        return cls(tuple(s for s, _ in streams), mixed, seed, resized)
