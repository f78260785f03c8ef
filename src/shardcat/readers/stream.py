"""The samples one reader (a DataLoader worker of one rank) yields in one epoch.

:class:`SampleStream` is a small picklable description (shard URLs, counts,
options): it travels to worker processes by fork or by spawn and opens its
own filesystems there, reading each shard in one sequential stream
(:meth:`ShardReader.iter_records <shardcat.format.ShardReader.iter_records>`).
It needs no torch; :mod:`shardcat.torch` wraps it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._onerror import (
    BAD_SAMPLE,
    DROPPED,
    ON_ERROR,
    Dropped,
    OnError,
    Skipped,
    check_on_error,
    drop_or_raise,
)
from ..catalog import internal
from ..catalog.kinds import shard_kind
from ..catalog.results import RecordRow
from ..errors import CatalogError, SampleDecodeError
from ..format import Record
from ..orchestration import iter_row_records, open_registered, tar_rows
from ..orchestration.joins import GroupJoin, join_records, join_summary, log_joins, plan_joins
from ..orchestration.tasks import catalog_for
from ..reading import Catalog, CatalogHandle
from ..storage import LocalShardCache, is_local, redact
from . import direct
from .packed import PackedBatch, pack_records, pack_samples
from .plan import ShardTask, assign, buffered_order, epoch_rng

__all__ = [
    "ON_ERROR",
    "Decoder",
    "OnError",
    "SampleStream",
    "Skipped",
    "apply_decoder",
    "check_on_error",
    "iter_task_records",
    "plan_tasks",
    "positions_after",
]

Decoder = Callable[[dict[str, Any]], Any] | Mapping[str, Callable[[Any], Any]] | None
"""A function of the whole sample, or one function per entry name (of its stored-type value)."""


def apply_decoder(sample: dict[str, Any], decode: Decoder) -> Any:
    """``sample`` (entries as stored types) through the user's ``decode``."""
    if decode is None:
        return sample
    if callable(decode):
        return decode(sample)
    for name, fn in decode.items():
        if name in sample:
            sample[name] = fn(sample[name])
    return sample


def plan_tasks(
    catalog: Catalog,
    dataset: str,
    where: str | None,
    params: Mapping[str, Any] | None,
    version: int | str | None = None,
    *,
    entries: Collection[str] | None = None,
) -> list[ShardTask]:
    """The shards of a version (default the latest) as tasks, by shard number; with ``where`` only chosen records.

    Exactly the records :func:`shardcat.read` streams at that version: its
    shards minus the records it hides (deleted or replaced by then). Each
    task carries its samples' column groups as that version sees them
    (:func:`~shardcat.orchestration.joins.plan_joins`; with ``entries`` only
    groups holding one of them). Three queries at most (shards, groups,
    then the filter) and one more per group; no shard is read.

    Raises
    ------
    VersionNotFoundError
        If there is no such kept version or tag.
    """
    number, visible = internal.visible_shards(catalog, dataset, version)
    for s, _ in visible:
        shard_kind(s.kind)  # a kind this shardcat cannot read fails here, not in a worker
    if where is None:
        joins = _joins(catalog, dataset, number, entries, None)
        return [
            ShardTask(
                s.url,
                s.record_count - len(hidden),
                (s.file_id, s.footer_crc),
                None,
                hidden,
                s.kind,
                s.id,
                joins.get(s.id, ()),
            )
            for s, hidden in visible
            if s.record_count > len(hidden)
        ]
    chosen = catalog.select(dataset, where, params, version=version).offsets
    joins = _joins(catalog, dataset, number, entries, chosen)
    return [
        ShardTask(
            s.url,
            len(chosen[s.id]),
            (s.file_id, s.footer_crc),
            tuple(chosen[s.id]),
            kind=s.kind,
            shard_id=s.id,
            joins=joins.get(s.id, ()),
        )
        for s, _ in visible
        if s.id in chosen
    ]


def _joins(
    catalog: Catalog,
    dataset: str,
    number: int,
    entries: Collection[str] | None,
    chosen: Mapping[int, Collection[int]] | None,
) -> dict[int, tuple[GroupJoin, ...]]:
    """Each base shard's column-group joins at version ``number``, logged per group."""
    joins = plan_joins(internal.group_rows(catalog, dataset, number), entries, chosen)
    if joins:
        log_joins(dataset, join_summary(joins.values()))
    return joins


@dataclass(frozen=True, slots=True)
class SampleStream:
    """Shards to stream, and how: picklable, so worker processes rebuild everything they need.

    Parameters
    ----------
    tasks:
        The shards (see :func:`plan_tasks`).
    storage_options:
        fsspec options to open them with.
    entries:
        Read only these entries (None: all).
    shuffle:
        Shuffle the shard order per epoch and pass samples through a buffer.
    seed:
        With the epoch, decides every random choice.
    shuffle_buffer:
        Samples held by the shuffle buffer (1: shards shuffled, samples in file order).
    decode:
        Applied to each sample as it is yielded (see :data:`Decoder`).
    cache:
        Copy remote shards to this local cache and read them there (None:
        stream them straight from the store).
    catalog:
        Where readers find the record rows of tar shards (which have no
        footer); reopened once per worker process. Needed only when a task
        is a tar.
    direct:
        Make packed batches (:meth:`iter_packed`) straight from the shards'
        bytes where that applies (:mod:`.direct`); False: from records always.
    on_error:
        A sample whose entries do not decode (:class:`~shardcat.errors.SampleDecodeError`):
        ``"raise"`` it (default), ``"skip"`` it or ``"log"`` a warning and
        skip it. Skipped samples keep their place (resuming counts them) and
        are reported to the ``skipped`` callback of :meth:`iter_reader`.
    dataset:
        The dataset's name, for the errors.
    """

    tasks: tuple[ShardTask, ...]
    storage_options: dict[str, Any] = field(default_factory=dict)
    entries: tuple[str, ...] | None = None
    shuffle: bool = True
    seed: int = 0
    shuffle_buffer: int = 1000
    decode: Decoder = None
    cache: LocalShardCache | None = None
    catalog: CatalogHandle | None = None
    direct: bool = True
    on_error: OnError = "raise"
    dataset: str | None = None

    def __post_init__(self) -> None:
        check_on_error(self.on_error)

    def _bad(self, error: SampleDecodeError, url: str, skipped: Skipped | None) -> Dropped:
        """What takes a sample's place when it does not decode: raises, or drops it."""
        # The shard as registered (a record may name its cached copy).
        return drop_or_raise(error, self.on_error, skipped, dataset=self.dataset, path=redact(url))

    @property
    def num_samples(self) -> int:
        """Samples in one epoch, over every reader."""
        return sum(t.count for t in self.tasks)

    @property
    def groups(self) -> dict[str, dict[str, int]]:
        """How each column group is joined: ``{name: {"streamed": n, "keyed": m}}``.

        ``streamed`` records are read in order beside the base (an aligned
        group: all of them); ``keyed`` ones by location in batched ranged
        reads (docs/GROUPS.md §5). Empty for a dataset without groups.
        """
        return join_summary(t.joins for t in self.tasks)

    def reader_tasks(
        self, epoch: int, rank: int = 0, world: int = 1, worker: int = 0, workers: int = 1
    ) -> list[ShardTask]:
        """The shards one reader (``worker`` of ``workers`` on ``rank`` of ``world``) reads, in order.

        Shards go to ranks first, then a rank's shards to its workers (both
        balanced by records), so a rank's share does not depend on how many
        workers it runs.
        """
        ranks = assign(self.tasks, world, seed=self.seed, epoch=epoch, shuffle=self.shuffle)
        mine = [self.tasks[i] for i in ranks[rank]]
        # Already in the epoch's order: the workers' split keeps it.
        picks = assign(mine, workers, seed=self.seed, epoch=epoch, shuffle=False)
        return [mine[i] for i in picks[worker]]

    def rank_count(self, epoch: int, rank: int = 0, world: int = 1) -> int:
        """Samples rank ``rank`` of ``world`` yields in ``epoch`` (whatever its number of workers)."""
        ranks = assign(self.tasks, world, seed=self.seed, epoch=epoch, shuffle=self.shuffle)
        return sum(self.tasks[i].count for i in ranks[rank])

    def reader_counts(
        self, epoch: int, rank: int = 0, world: int = 1, workers: int = 1
    ) -> list[int]:
        """Samples each of the rank's ``workers`` yields in ``epoch``."""
        return [
            sum(t.count for t in self.reader_tasks(epoch, rank, world, w, workers))
            for w in range(workers)
        ]

    def order(self, epoch: int, reader: tuple[int, ...], n: int) -> np.ndarray:
        """Positions of a reader's (``(rank, worker)``) stream in the order it yields them."""
        rng = epoch_rng(self.seed, epoch, *reader) if self.shuffle else None
        return buffered_order(n, self.shuffle_buffer, rng)

    def iter_reader(
        self,
        epoch: int,
        rank: int = 0,
        world: int = 1,
        worker: int = 0,
        workers: int = 1,
        start: int = 0,
        *,
        repeat: int = 0,
        keep: np.ndarray | None = None,
        skipped: Skipped | None = None,
    ) -> Iterator[Any]:
        """Samples of one reader in ``epoch``, from its ``start``-th on.

        Resuming at ``start`` yields exactly what an uninterrupted run yields
        after its first ``start`` samples, and reads no shard whose samples
        were all yielded before. ``repeat`` > 0 reads the reader's samples
        again in another order (the ``repeat``-th pass of a stream repeated
        within an epoch); ``keep`` (booleans, one per sample of the reader,
        in file order) yields only those samples, in the same order as the
        rest would have come. ``skipped`` is told of each sample dropped
        (``on_error``); a dropped sample counts as yielded for ``start``.

        Raises
        ------
        SampleDecodeError
            A sample does not decode, with ``on_error="raise"``.
        """
        tasks = self.reader_tasks(epoch, rank, world, worker, workers)
        counts = np.fromiter((t.count for t in tasks), dtype=np.int64, count=len(tasks))
        bases = np.concatenate([[0], np.cumsum(counts)])
        n = int(bases[-1])
        order = self.order(epoch, (rank, worker, repeat) if repeat else (rank, worker), n)
        if keep is not None:
            if len(keep) != n:
                raise ValueError(f"keep has {len(keep)} flags for a reader of {n} samples")
            keep = np.asarray(keep, dtype=bool)
            order = order[keep[order]]
        if start >= len(order):
            return
        if keep is None and (not self.shuffle or self.shuffle_buffer <= 1):
            # File order (the buffer changes nothing): no bookkeeping per sample.
            yield from self._in_file_order(tasks, bases, start, skipped)
            return
        # Python ints and bytes, not numpy scalars: this loop runs once per sample.
        skip = np.zeros(n, dtype=bool) if keep is None else ~keep
        skip[order[:start]] = True
        done = skip.tobytes()
        todo = iter(order[start:].tolist())
        first_shard = int(np.searchsorted(bases, int(order[start:].min()), side="right")) - 1
        pending: dict[int, dict[str, Any] | Dropped] = {}
        decode = self.decode
        want = next(todo)
        for t in range(first_shard, len(tasks)):
            p = int(bases[t]) - 1
            for rec in self._records(tasks[t]):
                p += 1
                if done[p]:
                    continue
                # Decoded at once (writable copies): a pending sample must not pin
                # the shard's read buffer, and torch wants writable arrays.
                sample: dict[str, Any] | Dropped
                try:
                    sample = rec.decode(writable=True)
                except BAD_SAMPLE as e:
                    sample = self._bad(e, tasks[t].url, skipped)
                if p != want:
                    pending[p] = sample
                    continue
                if sample is not DROPPED:
                    yield sample if decode is None else apply_decoder(sample, decode)
                want = next(todo, -1)
                while want in pending:
                    sample = pending.pop(want)
                    if sample is not DROPPED:
                        yield apply_decoder(sample, decode)
                    want = next(todo, -1)
                if want < 0:
                    return

    def _in_file_order(
        self,
        tasks: Sequence[ShardTask],
        bases: np.ndarray,
        start: int,
        skipped: Skipped | None = None,
    ) -> Iterator[Any]:
        """The reader's samples in file order from the ``start``-th: what ``buffered_order`` is then."""
        decode = self.decode
        for task, records in self._file_order_shards(tasks, bases, start):
            for rec in records:
                try:
                    sample = rec.decode(writable=True)
                except BAD_SAMPLE as e:
                    self._bad(e, task.url, skipped)
                    continue
                yield sample if decode is None else apply_decoder(sample, decode)

    def _file_order_records(
        self, tasks: Sequence[ShardTask], bases: np.ndarray, start: int
    ) -> Iterator[Record]:
        for _, records in self._file_order_shards(tasks, bases, start):
            yield from records

    def _file_order_shards(
        self, tasks: Sequence[ShardTask], bases: np.ndarray, start: int
    ) -> Iterator[tuple[ShardTask, Iterator[Record]]]:
        """Each shard from the one holding the ``start``-th sample, with its records from there."""
        first = int(np.searchsorted(bases, start, side="right")) - 1
        for t in range(first, len(tasks)):
            records = self._records(tasks[t])
            if t == first and start > bases[t]:
                # Records are decoded lazily: the ones yielded before are skipped, not decoded.
                records = itertools.islice(records, start - int(bases[t]), None)
            yield tasks[t], records

    def iter_packed(
        self,
        epoch: int,
        rank: int = 0,
        world: int = 1,
        worker: int = 0,
        workers: int = 1,
        start: int = 0,
        *,
        batch_size: int,
        skipped: Skipped | None = None,
    ) -> Iterator[PackedBatch]:
        """:meth:`iter_reader`'s samples from the ``start``-th, in packed batches of ``batch_size``.

        The same batches as :func:`pack_samples` over ``iter_reader`` (the
        same samples in the same order). Without ``decode``, from local (or
        cached) native shards, they are read straight from the shards'
        bytes (:mod:`.direct`), through the shuffle buffer too: it then
        holds the positions of its samples, not the samples. Otherwise, in
        file order and without a whole-sample ``decode``, they are packed
        from the records' read buffers, with no sample dict made in between.
        With ``on_error`` other than ``"raise"`` they are packed from
        :meth:`iter_reader`'s samples (which drops the bad ones).
        """
        tasks = self.reader_tasks(epoch, rank, world, worker, workers)
        decode = self.decode
        buffered = self.shuffle and self.shuffle_buffer > 1
        dropping = self.on_error != "raise"
        straight = (
            self.direct
            and decode is None
            and not dropping
            and all(
                not shard_kind(t.kind).from_rows
                and not t.joins  # a group's entries come from other shards: records path
                and (self.cache is not None or is_local(t.url))
                for t in tasks
            )
        )
        if straight:
            # Local files only: a remote shard streams better with read-ahead than in ranged
            # reads of a batch each (unless the cache makes a local copy first).
            order = None
            if buffered:
                sizes = [t.count for t in tasks]
                order = self.order(epoch, (rank, worker), sum(sizes))[start:]
                # A buffer spanning too many small shards would hold them all open: the
                # record path below reads one shard at a time instead.
                at_once = direct.shards_needed_at_once(sizes, order, batch_size)
                straight = at_once <= direct.MAX_OPEN_SHARDS
            if straight:
                yield from self._named(
                    direct.iter_direct(
                        tasks,
                        self.storage_options,
                        self.entries,
                        self.cache,
                        batch_size,
                        start=start,
                        order=order,
                    )
                )
                return
        if buffered or callable(decode) or dropping:
            samples = self.iter_reader(epoch, rank, world, worker, workers, start, skipped=skipped)
            for batch in _chunks(samples, batch_size):
                yield pack_samples(batch)
            return
        counts = np.fromiter((t.count for t in tasks), dtype=np.int64, count=len(tasks))
        bases = np.concatenate([[0], np.cumsum(counts)])
        if start >= int(bases[-1]):
            return
        records = self._file_order_records(tasks, bases, start)
        yield from self._named(
            pack_records(batch, decode) for batch in _chunks(records, batch_size)
        )

    def _named(self, batches: Iterator[PackedBatch]) -> Iterator[PackedBatch]:
        """``batches``; a sample in them that does not decode is raised naming the dataset."""
        try:
            yield from batches
        except SampleDecodeError as e:
            e.locate(dataset=self.dataset)
            raise

    def _records(self, task: ShardTask) -> Iterator[Record]:
        return iter_task_records(task, self.storage_options, self.entries, self.cache, self.catalog)


def _chunks(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of ``size``, the last one shorter (``itertools.batched`` from 3.12)."""
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def iter_task_records(
    task: ShardTask,
    storage_options: Mapping[str, Any],
    entries: Sequence[str] | None,
    cache: LocalShardCache | None = None,
    catalog: CatalogHandle | None = None,
) -> Generator[Record, None, None]:
    """The records of one task in file order, in one sequential read of its shard.

    A task with column groups (``task.joins``) yields whole samples: each
    base record merged with its groups' records (docs/GROUPS.md §5).

    With ``cache`` a remote shard is read from its local copy (downloaded
    first if needed). A tar's records come from its catalog rows (read from
    ``catalog``) and its bytes in ranges of whole samples, every entry
    checked against the CRC32C recorded when the tar was indexed.

    Raises
    ------
    ChecksumError
        The shard was replaced since it was registered (a tar: a payload changed).
    ShardNotFoundError, FormatError
        As :class:`~shardcat.ShardReader` does.
    CatalogError
        A tar task without ``catalog``, or whose rows no longer match the plan.
    """
    base = _base_records(task, storage_options, entries, cache, catalog)
    if not task.joins:
        yield from base
        return
    yield from join_records(base, task.joins, storage_options, entries, cache)


def _base_records(
    task: ShardTask,
    storage_options: Mapping[str, Any],
    entries: Sequence[str] | None,
    cache: LocalShardCache | None,
    catalog: CatalogHandle | None,
) -> Generator[Record, None, None]:
    """The base records of one task (:func:`iter_task_records` without the groups)."""
    url = task.url
    kind = shard_kind(task.kind)
    if cache is not None and task.expect is not None and kind.is_file:
        url = cache.fetch(url, task.expect[0], storage_options)
    if kind.from_rows:
        rows = _tar_rows(task, catalog)
        yield from iter_row_records(task.kind, url, rows, entries, storage_options)
        return
    with open_registered(url, storage_options, task.expect) as reader:
        records = reader.iter_records(entries)
        if task.offsets is None:
            if not task.hidden:
                yield from records
                return
            for rec in records:
                if rec.offset not in task.hidden:
                    yield rec
            return
        chosen = frozenset(task.offsets)
        for rec in records:
            if rec.offset in chosen:
                yield rec


def _tar_rows(task: ShardTask, catalog: CatalogHandle | None) -> list[RecordRow]:
    """The catalog rows of a tar task's records, in file order: the ones the plan counted."""
    if catalog is None or task.shard_id is None:
        raise CatalogError(
            f"{redact(task.url)} is a tar indexed in place: reading it needs the catalog's "
            "rows (pass SampleStream(catalog=cat.handle()) and tasks from plan_tasks)"
        )
    rows = tar_rows(catalog_for(catalog), task.shard_id, task.offsets, task.hidden)
    if len(rows) != task.count:
        raise CatalogError(
            f"the catalog holds {len(rows)} readable records of tar {redact(task.url)}, the "
            f"epoch was planned with {task.count}: its rows changed since; create the "
            "dataset object again"
        )
    return rows


def positions_after(
    counts: Sequence[int], batch_size: int, batches: int, *, drop_last: bool = False
) -> tuple[list[int], int]:
    """What each of ``counts``' workers had yielded once a DataLoader returned ``batches``.

    A DataLoader over an iterable dataset takes whole batches from its
    workers in turn (worker 0, 1, ..., 0, ...), skipping a worker once it
    is exhausted; each worker's last batch may be short (or dropped with
    ``drop_last``). Returns the samples per worker and the worker whose
    batch would come next.
    """
    full = [(c // batch_size if drop_last else -(-c // batch_size)) for c in counts]
    taken = [0] * len(counts)
    left = batches
    rnd = 0
    following = 0
    while left > 0 and any(rnd < f for f in full):
        for w, f in enumerate(full):
            if left and rnd < f:
                taken[w] += 1
                left -= 1
                following = (w + 1) % len(counts)
        rnd += 1
    return [min(t * batch_size, c) for t, c in zip(taken, counts)], following
