"""PyTorch datasets over a shardcat catalog (the ``torch`` extra: ``pip install shardcat[torch]``).

- :class:`ShardIterableDataset` streams whole shards sequentially, split over
  DataLoader workers and ranks by record count, shuffled per epoch by a seed,
  every sample exactly once per epoch, resumable mid-epoch.
- :class:`ShardLoader` is a ``DataLoader`` that knows how far each worker got,
  so its :meth:`~ShardLoader.state_dict` resumes exactly, and that brings a
  dataset's batches from its workers several per trip.
- :class:`KeyDataset` is map-style: ``ds[i]``, ``ds.get(key)``, and batches
  fetched with one query plus coalesced reads.

Both datasets pickle small (shard URLs or the catalog's handle) and reopen
their catalog and filesystems in each worker, under fork and spawn alike.
The rest of shardcat never imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from ._trips import BUNDLE_BATCHES, BUNDLE_SAMPLES, Bundle, PerBatch, bundled, unbundled
from .catalog import Catalog
from .readers import (
    Decoder,
    KeySamples,
    MixedStream,
    PackedBatch,
    SampleStream,
    pack_samples,
    plan_tasks,
    positions_after,
)
from .storage import LocalShardCache

__all__ = [
    "BUNDLE_BATCHES",
    "BUNDLE_SAMPLES",
    "RESULT_PIPE_BYTES",
    "Bundle",
    "KeyDataset",
    "MixStream",
    "MixedDataset",
    "PackedBatch",
    "ShardIterableDataset",
    "ShardLoader",
    "pack_samples",
    "unchanged",
    "widen_result_pipe",
]


class ShardIterableDataset(IterableDataset[Any]):
    """A dataset's samples streamed shard by shard, for ``DataLoader`` with any number of workers.

    Each epoch the shards are shuffled (``seed`` and the epoch decide how)
    and dealt to the readers, one per DataLoader worker per rank, balanced
    by record count; each reader streams its shards in full sequential
    reads through a shuffle buffer of ``shuffle_buffer`` samples. Together
    the readers of all ranks yield every sample exactly once per epoch.

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.catalog.Catalog` or its URL.
    dataset:
        The dataset's name.
    version:
        Read the dataset as of this kept version (number or tag), exactly
        the records :func:`shardcat.read` streams at it; default the latest.
    entries:
        Read only these entries of each record.
    where, params:
        A SQL filter choosing the records, with ``:name`` parameters (see
        :meth:`Catalog.select <shardcat.catalog.Catalog.select>`), among
        those of ``version``.
    shuffle:
        Shuffle shards and samples (default), or read in shard-number and file order.
    seed:
        With the epoch, decides every random choice.
    shuffle_buffer:
        How many samples the shuffle buffer holds (memory grows with it).
    decode:
        A function of each sample dict, or a mapping of entry name to a
        function of that entry's value. Values arrive as their stored types
        (bytes, str, JSON, writable ``np.ndarray``). Must pickle for spawn.
    rank, world_size:
        This process's place among ranks (default: ``torch.distributed``
        when it is initialised, else 0 of 1).
    storage_options:
        fsspec options for the shards (default: the catalog's).
    cache_dir, cache_limit:
        Copy remote shards into this local folder, keeping at most
        ``cache_limit`` bytes (least recently used copies go first), and read
        them there; the folder may be shared by workers and jobs. Without
        ``cache_dir`` shards stream straight from the store.
    batch_size, collate:
        Yield batches instead of samples: lists of ``batch_size`` samples
        from one reader (its last one shorter), passed through ``collate``
        if given (e.g. ``torch.utils.data.default_collate``), built inside
        the worker. Use it with :class:`ShardLoader` or with
        ``DataLoader(ds, batch_size=None, collate_fn=shardcat.torch.unchanged)``:
        the loader then moves one object per batch between processes and
        runs no per-sample loop of its own. ``len()`` still counts samples.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    VersionNotFoundError
        If there is no such kept version or tag.
    CatalogError
        If ``where`` is refused.
    """

    def __init__(
        self,
        catalog: Catalog | str,
        dataset: str,
        *,
        version: int | str | None = None,
        entries: Iterable[str] | None = None,
        where: str | None = None,
        params: Mapping[str, Any] | None = None,
        shuffle: bool = True,
        seed: int = 0,
        shuffle_buffer: int = 1000,
        decode: Decoder = None,
        rank: int | None = None,
        world_size: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str = "20GB",
        batch_size: int | None = None,
        collate: Callable[[list[Any]], Any] | None = None,
    ) -> None:
        if shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be at least 1, not {shuffle_buffer}")
        _check_placement(rank, world_size, batch_size, collate)
        with Catalog.opened(catalog, storage_options=storage_options, create=False) as cat:
            opts = dict(cat.storage_options if storage_options is None else storage_options)
            # The plan is made here, once: workers get shard URLs, never a connection.
            tasks = tuple(plan_tasks(cat, dataset, where, params, version))
            # Tars have no footer: readers fetch their record rows from the catalog.
            handle = cat.handle() if any(t.kind == "tar" for t in tasks) else None
        stream = SampleStream(
            tasks,
            opts,
            None if entries is None else tuple(entries),
            shuffle,
            seed,
            shuffle_buffer,
            decode,
            None if cache_dir is None else LocalShardCache.create(cache_dir, cache_limit),
            handle,
        )
        self.dataset = dataset
        self._setup(stream, rank, world_size, batch_size, collate)

    def _setup(
        self,
        stream: SampleStream | MixedStream,
        rank: int | None,
        world_size: int | None,
        batch_size: int | None,
        collate: Callable[[list[Any]], Any] | None,
    ) -> None:
        self.stream = stream
        self.batch_size = batch_size
        self.collate = collate
        self._rank = rank
        self._world_size = world_size
        # The epoch, a count of load_state_dict calls and how many batches a worker sends
        # per trip (set by ShardLoader), in shared memory: persistent DataLoader workers
        # keep the dataset they started with, but see set_epoch() through this (torch
        # passes a shared tensor to fork and spawn workers alike).
        self._shared = torch.zeros(3, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        self._loads = 0
        # Resuming: per reader (rank * workers + worker), the samples it yielded
        # before; and which reader the new loader's worker 0 takes over.
        self._resume: dict[int, int] = {}
        self._resume_epoch = -1
        self._resume_workers: int | None = None
        self._rotation = 0
        self._yielded = 0  # samples yielded in this process (no workers)

    # --- placement ---------------------------------------------------------

    @property
    def rank(self) -> int:
        if self._rank is not None:
            return self._rank
        return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0

    @property
    def world_size(self) -> int:
        if self._world_size is not None:
            return self._world_size
        return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1

    @property
    def epoch(self) -> int:
        """The epoch read next (:meth:`set_epoch`); shared with persistent DataLoader workers."""
        return int(self._shared[0])

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self._shared[0] = epoch

    def __len__(self) -> int:
        """Samples this rank yields per epoch (ranks differ by at most one shard's records)."""
        return self.stream.rank_count(self.epoch, self.rank, self.world_size)

    def set_epoch(self, epoch: int) -> None:
        """Read epoch ``epoch`` next: its own shard order, split and shuffle (call before iterating)."""
        if epoch != self.epoch:
            self._yielded = 0
        self.epoch = epoch

    def worker_counts(self, num_workers: int) -> list[int]:
        """Samples each DataLoader worker of this rank yields in the current epoch, from its start."""
        workers = max(num_workers, 1)
        totals = self.stream.reader_counts(self.epoch, self.rank, self.world_size, workers)
        return [totals[r] for r in self.worker_roles(workers)]

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        if int(self._shared[1]) != self._loads:
            # A persistent worker's copy predates load_state_dict: it would not resume.
            raise RuntimeError(
                "load_state_dict() was called after this DataLoader's persistent workers "
                "started: create a new DataLoader to resume"
            )
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        role = self.worker_roles(workers)[worker]
        start = self.resume_positions(workers)[role]
        bundle = int(self._shared[2]) if info is not None else 0
        if (
            self.collate is pack_samples
            and self.batch_size is not None
            and isinstance(self.stream, SampleStream)
        ):
            # Packed straight from the records where it can (no sample dicts in between).
            batches: Iterator[Any] = self.stream.iter_packed(
                self.epoch,
                self.rank,
                self.world_size,
                role,
                workers,
                start,
                batch_size=self.batch_size,
            )
            if info is None:
                yield from self._counted_batches(batches, start)
            else:
                yield from bundled(batches, bundle, worker) if bundle > 1 else batches
            return
        samples = self.stream.iter_reader(
            self.epoch, self.rank, self.world_size, role, workers, start
        )
        if info is None:
            samples = self._counted(samples, start)
        if self.batch_size is None:
            yield from samples
            return
        batches = batched(samples, self.batch_size, self.collate)
        yield from bundled(batches, bundle, worker) if bundle > 1 else batches

    def _counted_batches(self, batches: Iterator[PackedBatch], start: int) -> Iterator[Any]:
        self._yielded = start
        for batch in batches:
            self._yielded += len(batch)
            yield batch

    def _counted(self, samples: Iterator[Any], start: int) -> Iterator[Any]:
        # Without workers the dataset knows itself how far it got (for state_dict).
        self._yielded = start
        for sample in samples:
            self._yielded += 1
            yield sample

    # --- resuming ----------------------------------------------------------

    def state_dict(
        self, positions: Mapping[int, int] | None = None, rotation: int = 0
    ) -> dict[str, Any]:
        """Where this rank is in the epoch: save it with the model, resume with :meth:`load_state_dict`.

        Without ``positions`` the dataset counts for itself: right when it
        is iterated in this process (no workers). With DataLoader workers
        use :meth:`ShardLoader.state_dict`, which knows what each worker
        yielded (``positions``: reader → samples yielded; ``rotation``: the
        reader whose batch comes next).
        """
        if positions is None:
            positions = {0: self._yielded}
        workers = len(positions)
        base = self.rank * workers
        return {
            "epoch": self.epoch,
            "seed": self.stream.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "num_workers": workers,
            "positions": {base + w: int(n) for w, n in positions.items()},
            "rotation": rotation,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume: the next iteration of ``state["epoch"]`` yields what had not been yielded yet.

        Iterate it with the same number of DataLoader workers (and ranks) as
        when it was saved; a later epoch starts from its beginning.

        Raises
        ------
        ValueError
            If the state comes from another seed or another number of ranks.
        """
        if state["seed"] != self.stream.seed:
            raise ValueError(f"the state has seed {state['seed']}, this dataset {self.stream.seed}")
        if state["world_size"] != self.world_size:
            raise ValueError(
                f"the state is of {state['world_size']} rank(s), this job has {self.world_size}"
            )
        self.epoch = int(state["epoch"])
        self._loads += 1
        self._shared[1] = self._loads
        self._resume_epoch = self.epoch
        self._resume = {int(k): int(v) for k, v in state["positions"].items()}
        self._resume_workers = int(state["num_workers"])
        self._rotation = int(state.get("rotation", 0))

    def _resuming(self, workers: int) -> bool:
        if self._resume_epoch != self.epoch or self._resume_workers is None:
            return False
        if self._resume_workers != workers:
            raise ValueError(
                f"the state was saved with {self._resume_workers} worker(s): iterate it with "
                f"that many, not {workers}"
            )
        return True

    def resume_positions(self, num_workers: int) -> list[int]:
        """Samples each reader of this rank skips in the current epoch (after :meth:`load_state_dict`).

        Raises
        ------
        ValueError
            If the state was saved with another number of workers.
        """
        workers = max(num_workers, 1)
        if not self._resuming(workers):
            return [0] * workers
        base = self.rank * workers
        return [self._resume.get(base + w, 0) for w in range(workers)]

    def worker_roles(self, num_workers: int) -> list[int]:
        """The reader each DataLoader worker plays: rotated on resume so batches keep their turn."""
        workers = max(num_workers, 1)
        shift = self._rotation if self._resuming(workers) else 0
        return [(w + shift) % workers for w in range(workers)]


def _check_placement(
    rank: int | None,
    world_size: int | None,
    batch_size: int | None,
    collate: Callable[[list[Any]], Any] | None,
) -> None:
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, not {batch_size}")
    if collate is not None and batch_size is None:
        raise ValueError("collate= applies to batches: pass batch_size= too")
    if (rank is None) != (world_size is None):
        raise ValueError("pass rank and world_size together")
    if world_size is not None and rank is not None and not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in range(world_size={world_size})")


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
        _check_placement(rank, world_size, batch_size, collate)
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


def unchanged(batch: Any) -> Any:
    """A ``collate_fn`` that passes a batch on as it is.

    For ``DataLoader(ds, batch_size=None, collate_fn=unchanged)`` over a
    dataset that makes its own batches: the loader's default for
    ``batch_size=None`` (``default_convert``) walks every sample and entry
    of every batch again, which costs more than reading them.
    """
    return batch


def batched(
    samples: Iterator[Any], size: int, collate: Callable[[list[Any]], Any] | None
) -> Iterator[Any]:
    """``samples`` in lists of ``size`` (the last one shorter), each through ``collate``."""
    batch: list[Any] = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == size:
            yield batch if collate is None else collate(batch)
            batch = []
    if batch:
        yield batch if collate is None else collate(batch)


RESULT_PIPE_BYTES = 2**20
"""The pipe that carries batches from workers is widened to this (Linux; its default is 64 KiB)."""


def widen_result_pipe(iterator: Any, size: int = RESULT_PIPE_BYTES) -> int | None:
    """Widen the pipe a DataLoader iterator's workers send batches through; its new size or None.

    With the default 64 KiB pipe a batch of 64 samples of 4 KiB crosses in
    five writes and reads, the loop and the worker waking each other for
    each; in a 1 MiB pipe it goes in one. Measured with bench_readers
    (persistent workers, 2 of them): 15-30% less CPU in the training
    process per sample. Best effort: torch's private attributes may move,
    and a pipe may not grow past ``/proc/sys/fs/pipe-max-size`` or the
    user's pipe quota; the pipe then stays as it is.
    """
    try:
        import fcntl

        grow = fcntl.F_SETPIPE_SZ  # Linux only
        reader = iterator._worker_result_queue._reader
        return int(fcntl.fcntl(reader.fileno(), grow, size))
    except (AttributeError, ImportError, OSError, ValueError):
        return None


class ShardLoader(DataLoader[Any]):
    """A ``DataLoader`` over a :class:`ShardIterableDataset` that can save where it is.

    Takes every ``DataLoader`` argument; with workers ``persistent_workers``
    defaults to True: they are started once, not every epoch (at 20,000
    samples an epoch, starting them took as long as reading, see
    docs/TRAINING.md), and see :meth:`ShardIterableDataset.set_epoch`
    through shared memory. :meth:`state_dict` records, for
    each worker, how many samples of the epoch reached the training loop
    (a DataLoader takes whole batches from its workers in turn); a new
    loader on a dataset given that state resumes with the next batch.
    A dataset that batches itself (``batch_size=``) goes with
    ``batch_size=None`` here (the default then).

    With workers, a dataset that batches itself sends its batches in
    bundles of ``bundle`` consecutive batches per trip between processes
    (default: enough for :data:`BUNDLE_SAMPLES` samples, at most
    :data:`BUNDLE_BATCHES`; 1 sends each batch alone), and this loader
    hands them out one by one in the order unbundled batches come: the
    same batches, sequence and state, with a fraction of the per-trip
    cost. A ``collate_fn`` given here still runs on each batch in the
    worker. Only a ``ShardLoader`` splits bundles: a plain ``DataLoader``
    gets batches one per trip.

    Raises
    ------
    TypeError
        If ``dataset`` is not a :class:`ShardIterableDataset`.
    ValueError
        If both the dataset and the loader make batches, or ``bundle`` is below 1.
    """

    dataset: ShardIterableDataset

    def __init__(
        self, dataset: ShardIterableDataset, *args: Any, bundle: int | None = None, **kwargs: Any
    ) -> None:
        if not isinstance(dataset, ShardIterableDataset):
            raise TypeError("ShardLoader reads a ShardIterableDataset")
        if bundle is not None and bundle < 1:
            raise ValueError(f"bundle must be at least 1 batch, not {bundle}")
        if kwargs.get("num_workers", 0) > 0:
            kwargs.setdefault("persistent_workers", True)
        # A dataset that batches in its workers: the loader must pass batches on as they are.
        if dataset.batch_size is not None and (
            kwargs.setdefault("batch_size", None) is not None or args
        ):
            raise ValueError(
                "the dataset makes batches itself (batch_size="
                f"{dataset.batch_size}): pass batch_size=None to the loader"
            )
        size = dataset.batch_size
        if bundle is None:
            bundle = 1 if size is None else min(-(-BUNDLE_SAMPLES // size), BUNDLE_BATCHES)
        # Bundles only carry batches the dataset made, and only between processes.
        bundle = bundle if size is not None and kwargs.get("num_workers", 0) > 0 else 1
        if size is not None:
            collate = kwargs.setdefault("collate_fn", unchanged)
            if bundle > 1 and collate is not unchanged:
                # The loader's collate_fn runs in the worker on what the dataset yields.
                kwargs["collate_fn"] = PerBatch(collate)
        super().__init__(dataset, *args, **kwargs)
        self.bundle = bundle
        self._batches = 0
        self._roles: list[int] = []
        self._start: list[int] = []  # per reader
        self._counts: list[int] = []  # per worker, from where it starts

    def _get_iterator(self) -> Any:
        iterator = super()._get_iterator()
        if self.num_workers > 0:
            widen_result_pipe(iterator)
        return iterator

    def _begin(self) -> None:
        ds = self.dataset
        self._roles = ds.worker_roles(self.num_workers)
        self._start = ds.resume_positions(self.num_workers)
        self._counts = ds.worker_counts(self.num_workers)
        self._counts = [c - self._start[r] for c, r in zip(self._counts, self._roles)]
        self._batches = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        self._begin()
        # Read by the workers when they start the epoch (persistent ones too: shared memory).
        self.dataset._shared[2] = self.bundle if self.bundle > 1 else 0
        try:
            trips: Iterator[Any] = super().__iter__()
            if self.bundle > 1:
                trips = unbundled(trips, self.num_workers)
            for batch in trips:
                self._batches += 1
                yield batch
        finally:
            # A plain DataLoader iterating the dataset next must get its batches one by one.
            self.dataset._shared[2] = 0

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state after the batches this loader has returned so far.

        Raises
        ------
        ValueError
            If neither the loader nor the dataset has a ``batch_size`` (it counts whole batches).
        """
        size, drop_last = self.batch_size, self.drop_last
        if size is None:
            size, drop_last = self.dataset.batch_size, False
        if size is None:
            raise ValueError(
                "ShardLoader.state_dict needs a batch_size (the loader's or the dataset's)"
            )
        if not self._roles:  # not iterated yet: where the dataset stands
            self._begin()
        done, following = positions_after(self._counts, size, self._batches, drop_last=drop_last)
        positions = list(self._start)
        for worker, role in enumerate(self._roles):
            positions[role] += done[worker]
        return self.dataset.state_dict(dict(enumerate(positions)), self._roles[following])


class KeyDataset(Dataset[Any]):
    """Map-style: ``ds[i]`` is the sample of the ``i``-th key, ``ds.get(key)`` any sample by key.

    The key list is read from the catalog once (every committed key in key
    order, the keys a ``where`` filter chose, or ``keys``). A DataLoader
    asks for whole batches through ``__getitems__``: one query and
    coalesced, concurrent reads per batch. A catalog opened here from a URL
    is closed by :meth:`close` (or a ``with`` block, or garbage collection).

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.catalog.Catalog` or its URL.
    dataset:
        The dataset's name.
    keys:
        The keys positions refer to.
    where, params:
        A SQL filter choosing the keys instead.
    version:
        Read the dataset as of this kept version (number or tag): its keys,
        and their records at that version; default the latest.
    entries:
        Read only these entries.
    decode:
        As for :class:`ShardIterableDataset`.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    VersionNotFoundError
        If there is no such kept version or tag.
    """

    def __init__(
        self,
        catalog: Catalog | str,
        dataset: str,
        keys: Iterable[str] | None = None,
        *,
        where: str | None = None,
        params: Mapping[str, Any] | None = None,
        version: int | str | None = None,
        entries: Iterable[str] | None = None,
        decode: Decoder = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.samples = KeySamples(
            catalog,
            dataset,
            keys,
            where=where,
            params=params,
            version=version,
            entries=entries,
            decode=decode,
            storage_options=storage_options,
        )

    @property
    def keys(self) -> list[str]:
        return self.samples.keys

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        return self.samples[i]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return self.samples.getitems(indices)

    def get(self, key: str) -> Any:
        """The sample with this key.

        Raises
        ------
        KeyNotFoundError
            If the dataset has no committed record with this key.
        """
        return self.samples.get(key)

    def close(self) -> None:
        """Close the catalog if it was opened here from a URL (idempotent)."""
        self.samples.close()

    def __enter__(self) -> KeyDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
