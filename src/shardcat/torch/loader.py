"""``ShardLoader``: a DataLoader that saves where it is and brings batches several per trip."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from .._trips import BUNDLE_BATCHES, BUNDLE_SAMPLES, PerBatch, unbundled
from ..readers import positions_after
from ._pipe import widen_result_pipe
from .datasets import ShardIterableDataset

__all__ = ["ShardLoader", "unchanged"]


def unchanged(batch: Any) -> Any:
    """A ``collate_fn`` that passes a batch on as it is.

    For ``DataLoader(ds, batch_size=None, collate_fn=unchanged)`` over a
    dataset that makes its own batches: the loader's default for
    ``batch_size=None`` (``default_convert``) walks every sample and entry
    of every batch again, which costs more than reading them.
    """
    return batch


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
            if self.num_workers > 0:
                widen_result_pipe(trips)  # torch's private internals: _pipe.py
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
