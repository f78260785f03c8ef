"""``ShardIterableDataset``: a dataset's samples streamed shard by shard to DataLoader workers."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info

from .._trips import bundled
from ..catalog.kinds import shard_kind
from ..errors import SampleDecodeError
from ..readers import (
    Decoder,
    MixedStream,
    PackedBatch,
    SampleStream,
    pack_samples,
    plan_tasks,
)
from ..readers.stream import OnError, Skipped, check_on_error
from ..reading import Catalog
from ..storage import LocalShardCache
from ._skips import SkipCounts

__all__ = ["ShardIterableDataset", "batched", "check_placement"]


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
        A :class:`~shardcat.Catalog` or its URL.
    dataset:
        The dataset's name.
    version:
        Read the dataset as of this kept version (number or tag), exactly
        the records :func:`shardcat.read` streams at it; default the latest.
    entries:
        Read only these entries of each record.
    where, params:
        A SQL filter choosing the records, with ``:name`` parameters (see
        :meth:`Catalog.select <shardcat.Catalog.select>`), among
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
    on_error:
        A sample whose entries do not decode (an empty or broken ``.json``,
        a bad ``.npy``): ``"raise"`` (default) raises
        :class:`~shardcat.errors.SampleDecodeError` naming the dataset,
        key, entry and shard; ``"skip"`` drops it; ``"log"`` drops it with a
        warning naming it. Dropped samples are counted in :attr:`skipped`
        (over every DataLoader worker) and in :meth:`state_dict`; an epoch
        then yields fewer than ``len()`` samples.

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
        on_error: OnError = "raise",
    ) -> None:
        check_on_error(on_error)
        if shuffle_buffer < 1:
            raise ValueError(f"shuffle_buffer must be at least 1, not {shuffle_buffer}")
        check_placement(rank, world_size, batch_size, collate)
        entries = None if entries is None else tuple(entries)
        with Catalog.opened(catalog, storage_options=storage_options, create=False) as cat:
            opts = dict(cat.storage_options if storage_options is None else storage_options)
            # The plan is made here, once: workers get shard URLs, never a connection.
            tasks = tuple(plan_tasks(cat, dataset, where, params, version, entries=entries))
            # Tars and folders have no footer: readers fetch their record rows from the catalog.
            handle = cat.handle() if any(shard_kind(t.kind).from_rows for t in tasks) else None
        stream = SampleStream(
            tasks,
            opts,
            entries,
            shuffle,
            seed,
            shuffle_buffer,
            decode,
            None if cache_dir is None else LocalShardCache.create(cache_dir, cache_limit),
            handle,
            on_error=on_error,
            dataset=dataset,
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
        # The samples each worker dropped (on_error), counted where the main process sees them.
        self._skips = SkipCounts()
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

    @property
    def groups(self) -> dict[str, dict[str, int]]:
        """How each column group joins the stream: records ``"streamed"`` in order, ``"keyed"`` by location.

        An aligned group has ``keyed`` 0 (docs/GROUPS.md §5); empty without groups.
        """
        stream = self.stream
        return stream.groups if isinstance(stream, SampleStream) else {}

    @property
    def skipped(self) -> int:
        """Samples dropped because they did not decode (``on_error``), by every worker, since made."""
        return self._skips.total

    def _skip_counter(self, worker: int, in_process: bool) -> Skipped:
        """The ``skipped`` callback of a reader: counts in shared memory (and, in process, its place)."""
        skips = self._skips

        def skipped(error: SampleDecodeError) -> None:
            skips.add(worker)
            if in_process:  # a dropped sample's place counts as yielded, for state_dict
                self._yielded += 1

        return skipped

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
        skipped = self._skip_counter(worker, info is None)
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
                skipped=skipped,
            )
            if info is None:
                yield from self._counted_batches(batches, start)
            else:
                yield from bundled(batches, bundle, worker) if bundle > 1 else batches
            return
        samples = self.stream.iter_reader(
            self.epoch, self.rank, self.world_size, role, workers, start, skipped=skipped
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
            "skipped": self.skipped,
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


def check_placement(
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
