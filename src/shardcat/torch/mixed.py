"""``MixedDataset``: several datasets mixed in proportions, each repeated or subsampled per epoch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..readers import MixedStream, SampleStream
from .datasets import ShardIterableDataset, check_placement

__all__ = ["MixStream", "MixedDataset"]


@dataclass(frozen=True, slots=True)
class MixStream:
    """One dataset of a :class:`MixedDataset`, with its weight and its size per epoch.

    As MosaicML's ``Stream(proportion=, repeat=, choose=)``:

    - ``weight``: the mix draws this dataset with probability proportional
      to it. None for every dataset of a mix: every (chosen) sample of every
      dataset comes once per epoch, in a random interleaving.
    - ``repeat``: ``round(repeat * len)`` samples per epoch: 3 repeats a
      small dataset three times within the epoch (each pass in its own
      order), 2.5 every sample twice and half of them a third time, 0.1 a
      tenth of it. A sample never comes more than ``ceil(repeat)`` times.
    - ``choose``: exactly this many samples per epoch (a subsample, or more
      than the dataset holds to oversample).

    The chosen samples are drawn again each epoch from the seed and the
    epoch, deterministic and resumable like the rest.
    """

    dataset: ShardIterableDataset
    weight: float | None = None
    repeat: float | None = None
    choose: int | None = None


class MixedDataset(ShardIterableDataset):
    """Several :class:`ShardIterableDataset` mixed in proportions (MosaicML streams, LitData's combined datasets).

    ``MixedDataset([(ds_a, 0.7), (ds_b, 0.3)], seed=0)``: each reader (a
    DataLoader worker of a rank) reads its usual share of every dataset
    (each shuffled by its own seed) and draws, sample by sample, which
    dataset gives the next one, with probability proportional to the
    weights, from ``(seed, epoch, rank, worker)``. A reader stops at the
    first draw of a dataset whose share it has used up: no sample repeats
    in an epoch, and the proportions hold to the end (so a small dataset
    with a large weight ends the epoch early). The datasets may come from
    different catalogs and stores.

    A dataset given as :class:`MixStream` may be resized per epoch:
    ``MixedDataset([MixStream(big, choose=10_000), MixStream(small, repeat=3)])``
    reads 10,000 samples of ``big`` (a new subset each epoch) and every
    sample of ``small`` three times, all once in a random interleaving
    (no weights: the epoch is exactly 10,000 + 3 × len(small) samples).

    Everything else is :class:`ShardIterableDataset`'s: ``set_epoch``,
    ``state_dict``/``load_state_dict`` (with :class:`ShardLoader`; the
    state is each reader's position, from which each dataset's position
    follows), ``rank``/``world_size``, ``batch_size``/``collate``.
    ``len()`` counts samples with one reader per rank; with workers use
    :meth:`worker_counts`.

    Raises
    ------
    ValueError
        No datasets, a weight that is not positive, weights for some
        datasets only, ``repeat`` and ``choose`` together, or a dataset that
        makes batches itself (batch the mix instead).
    """

    def __init__(
        self,
        datasets: Sequence[tuple[ShardIterableDataset, float | None] | MixStream],
        *,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        batch_size: int | None = None,
        collate: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        check_placement(rank, world_size, batch_size, collate)
        members = [d if isinstance(d, MixStream) else MixStream(d[0], d[1]) for d in datasets]
        streams: list[tuple[SampleStream, float | None]] = []
        for m in members:
            if m.dataset.batch_size is not None:
                raise ValueError(
                    f"dataset {m.dataset.dataset!r} makes batches itself: give the mix "
                    "batch_size= instead"
                )
            if not isinstance(m.dataset.stream, SampleStream):
                raise ValueError("mix datasets, not mixes: list every dataset with its weight")
            streams.append((m.dataset.stream, m.weight))
        self.dataset = "+".join(m.dataset.dataset for m in members)
        self.mix = MixedStream.of(
            streams,
            seed,
            repeat=[m.repeat for m in members],
            choose=[m.choose for m in members],
        )
        self._setup(self.mix, rank, world_size, batch_size, collate)

    def stream_counts(self, num_workers: int = 0) -> list[list[int]]:
        """Per DataLoader worker of this rank, the samples it takes from each dataset this epoch."""
        workers = max(num_workers, 1)
        return [
            self.mix.stream_counts(self.epoch, self.rank, self.world_size, r, workers)
            for r in self.worker_roles(workers)
        ]
