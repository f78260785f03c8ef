"""``shardcat.compact``: rewrite mostly-dead shards' live records into new shards, as one version.

The client picks the latest version's native shards whose live fraction
(records the latest version still sees / records in the file) is below
``min_live``, and groups them into runs of about ``shard_size`` live bytes.
One Dask task per group reads the live records by offset (every record's
CRC is checked as it is decoded), writes them with the
:class:`~shardcat.storage.shards.RollingShardWriter` and stages the new
shards under one job, like a write's partition task. The client then
commits the job with ``on_duplicate="replace"`` and operation ``compact``:
in one transaction every compacted key points at its new record and the
old shards get their ``removed_version`` (older kept versions still read
them; ``gc`` deletes them once ``expire`` lets no kept version read them).

What goes live is decided inside the commit's transaction
(``commit_job(rewrite=True)``): a rewritten record replaces the record it
copies only if that key's live record is still one that was live when the
job began. A key another process deleted, replaced, overwrote or compacted
meanwhile keeps what that process left, and its rewritten copy is added and
removed in the compaction's version (``superseded`` in the summary), so
nothing deleted comes back and no newer value is lost. Tar shards are never
compacted (their bytes are the user's tar files).

Column groups stay groups (docs/GROUPS.md §5): compaction rewrites base
shards only, and a sample's group records are found by its key, not by its
base record's place, so they keep joining the rewritten base records (the
rewrite's replacement compares ``group_id``, as every duplicate rule does).
Group shards themselves are not compacted, and groups are not folded into
the base.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._units import count_of, format_bytes, parse_size
from ..catalog import internal
from ..errors import ChecksumError, CommitConflictError
from ..storage import dataset_prefix, first_free, redact
from ..storage.shards import RollingShardWriter, ShardReader
from .cluster import ClientChoice, client_for
from .plan import SHARDS_PER_PARTITION, WritePlan
from .reach import refuse_in_memory, refuse_unreachable, refuse_unreachable_stores
from .tasks import ATTEMPT, PartitionResult, _remove_quietly, catalog_for
from .watch import JobRef, TaskProgressCallback, gather, interrupted

if TYPE_CHECKING:
    from ..catalog import ShardRow
    from ..reading import Catalog

__all__ = ["CompactSummary", "Source", "compact", "compact_group"]

log = logging.getLogger(__name__)

_BATCH = 256
"""Records read per ranged read while rewriting (bounds a task's memory)."""


@dataclass(frozen=True, slots=True)
class Source:
    """One shard to compact, as the client saw it: which file, and which records to keep."""

    url: str
    shard_id: int
    file_id: str
    data_crc: int
    hidden: frozenset[int]
    """Byte offsets of its records the latest version no longer sees (not rewritten)."""


@dataclass(frozen=True)
class CompactSummary:
    """What a compaction did (``version`` is None when no shard needed compacting)."""

    dataset: str
    version: int | None
    job_id: int | None
    compacted: list[str]
    """URLs of the shards removed from the new version on (gc reclaims them after expire)."""
    written: list[str]
    """URLs of the new shards."""
    records: int
    """Rewritten records the new version serves."""
    bytes_before: int
    """Size of the compacted shards."""
    bytes_after: int
    """Size of the new shards."""
    tar_shards: int
    """Tar shards of the latest version, never compacted."""
    seconds: float
    kept: list[str] = field(default_factory=list)
    """Native shards at or above ``min_live``, left as they are."""
    superseded: int = 0
    """Rewritten records left out at commit: another commit deleted or replaced their keys."""

    def __str__(self) -> str:
        if self.version is None:
            head = f"{self.dataset}: nothing to compact ({count_of(len(self.kept), 'native shard')} kept)"
        else:
            head = (
                f"{self.dataset}: version {self.version} (job {self.job_id}) rewrote "
                f"{count_of(self.records, 'live record')} of {count_of(len(self.compacted), 'shard')} "
                f"({format_bytes(self.bytes_before)}) into {count_of(len(self.written), 'shard')} "
                f"({format_bytes(self.bytes_after)}) in {self.seconds:.2f} s; "
                f"{count_of(len(self.kept), 'shard')} kept; run expire and gc to reclaim the old bytes"
            )
        if self.superseded:
            head += (
                f"; {count_of(self.superseded, 'rewritten record')} left out: other commits "
                "deleted or replaced their keys meanwhile"
            )
        if self.tar_shards:
            head += f"; {count_of(self.tar_shards, 'tar shard')} never compacted"
        return head


def compact_group(plan: WritePlan, group: int, sources: Sequence[Source]) -> PartitionResult:
    """Rewrite the live records of ``sources`` into new shards staged under the job; on a worker.

    Raises
    ------
    ChecksumError
        A source is not the file the catalog registered, or a record fails its CRC.
    CommitConflictError
        The job is no longer open (its client gave up): nothing more is staged.
    """
    t0 = time.perf_counter()
    catalog = catalog_for(plan.catalog)

    def name(number: int, index: int) -> str:
        if index >= SHARDS_PER_PARTITION:
            raise ValueError(
                f"compaction group {group} needs more than {SHARDS_PER_PARTITION} shards: "
                "use a larger shard_size"
            )
        # A retried task takes the next free name where an earlier attempt published one.
        return first_free(plan.root, plan.names(group, index), plan.storage_options)

    # (source shard id, source offset) of each record written to the open shard, in order.
    pending: list[tuple[int, int]] = []

    def stage(info: Any) -> None:
        try:
            row = catalog.register_shard(plan.dataset, info, job=plan.job_id)
        except CommitConflictError:
            # The job ended without us (its client gave up): the file is ours alone.
            _remove_quietly(info.path, plan)
            raise
        moved = pending[: info.record_count]
        del pending[: info.record_count]
        if plan.fields:  # declared fields' values follow their records
            offsets = info.offsets.tolist()
            internal.copy_fields(
                catalog, plan.dataset, row.id, [(s, o, n) for (s, o), n in zip(moved, offsets)]
            )

    writer = RollingShardWriter(
        plan.root,
        name,
        max_bytes=plan.shard_size,
        start=plan.first_shard_number(group),
        storage_options=plan.storage_options,
        on_shard_closed=stage,
        exclusive=True,
        metadata={
            **plan.metadata,
            "dataset": plan.dataset,
            "job": plan.job_id,
            ATTEMPT: uuid.uuid4().hex,
        },
    )
    with writer:
        for src in sources:
            with ShardReader(src.url, storage_options=plan.storage_options) as reader:
                info = reader.info
                if info.file_id != src.file_id or info.data_crc != src.data_crc:
                    raise ChecksumError(
                        f"{redact(src.url)} is not the shard the catalog registered (file id or "
                        "data CRC differ); nothing was compacted: run shardcat verify DATASET",
                        path=redact(src.url),
                    )
                offsets = np.asarray(reader.footer.records["offset"], dtype=np.int64)
                keep = [i for i, off in enumerate(offsets.tolist()) if off not in src.hidden]
                for start in range(0, len(keep), _BATCH):
                    batch = keep[start : start + _BATCH]
                    for i, record in zip(batch, reader.take(batch)):
                        pending.append((src.shard_id, int(offsets[i])))
                        writer.add(record.key, record)
    infos = writer.shards
    return PartitionResult(
        partition=group,
        shards=tuple(i.path for i in infos),
        records=sum(i.record_count for i in infos),
        bytes=sum(i.size for i in infos),
        payload_bytes=sum(i.payload_bytes() for i in infos),
        seconds=time.perf_counter() - t0,
    )


def compact(
    catalog: Catalog | str,
    dataset: str,
    *,
    min_live: float = 0.5,
    shard_size: int | str = "256MB",
    client: ClientChoice = None,
    storage_options: Mapping[str, Any] | None = None,
    message: str | None = None,
    retries: int = 2,
    progress: TaskProgressCallback | None = None,
) -> CompactSummary:
    """Rewrite the live records of the dataset's mostly-dead shards into new shards, as one version.

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.Catalog` or its SQLAlchemy URL.
    dataset:
        The dataset to compact.
    min_live:
        Compact the latest version's native shards whose live fraction
        (records the latest version sees / records in the file) is below
        this (0 to 1; 1 compacts every shard with a removed record).
    shard_size:
        Live bytes per task and size of the new shards (``"256MB"``, bytes).
    client:
        A ``distributed.Client``, or a :class:`~shardcat.orchestration.DaskCluster`
        (a scheduler's address, or N local worker processes started for this
        call); by default the current client, else a local cluster started
        for this call (:func:`~shardcat.orchestration.client_for`).
    storage_options:
        fsspec options (by default the catalog's); never stored.
    message:
        Recorded with the new version (``shardcat log``).
    retries:
        How often Dask may retry a failed task.
    progress:
        Called as ``progress(done, total)`` with the groups of shards rewritten
        so far, in the calling thread, as the tasks finish (the CLI draws a bar).

    Returns
    -------
    CompactSummary

    Raises
    ------
    ValueError
        ``min_live`` is not between 0 and 1.
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout`` seconds;
        the job was aborted.
    ChecksumError
        A shard to compact is damaged (the job is aborted, nothing changes).
    """
    from ..catalog.commit import SUPERSEDED
    from ..reading import Catalog

    if not 0 <= min_live <= 1:
        raise ValueError(f"min_live must be between 0 and 1, not {min_live!r}")
    size = parse_size(shard_size)
    with Catalog.opened(catalog) as cat:
        refuse_in_memory(cat)
        opts = dict(storage_options if storage_options is not None else cat.storage_options)
        t0 = time.perf_counter()
        root = cat.info(dataset).root_url
        chosen, kept, tars = _choose(cat, dataset, min_live)
        if tars:
            log.info("%s: %d tar shards are never compacted", dataset, tars)
        if not chosen:
            return CompactSummary(
                dataset, None, None, [], [], 0, 0, 0, tars, time.perf_counter() - t0, kept
            )
        # The job, then the choice again: the job's base version is what the commit's
        # key-conflict check compares to, so any change after the shards are chosen is seen.
        job = cat.begin_job(
            dataset, description="shardcat.compact", properties={"operation": "compact"}
        )
        ref = JobRef("compact", dataset, job.id)
        try:
            chosen, kept, tars = _choose(cat, dataset, min_live)
            if not chosen:  # another compaction took them meanwhile
                cat.abort_job(job)
                return CompactSummary(
                    dataset, None, None, [], [], 0, 0, 0, tars, time.perf_counter() - t0, kept
                )
            plan = WritePlan(
                dataset=dataset,
                root=root,
                prefix=dataset_prefix(dataset),
                job_id=job.id,
                catalog=cat.handle(),
                shard_size=size,
                storage_options=opts,
                fields=tuple(cat.fields(dataset)),
            )
            groups = _groups(chosen, size)
            refuse_unreachable_stores({root: opts})  # before a cluster starts
            with client_for(client, root) as dask_client:
                refuse_unreachable(cat, dask_client)
                refuse_unreachable_stores({root: opts}, dask_client)
                futures = [
                    dask_client.submit(compact_group, plan, n, group, pure=False, retries=retries)
                    for n, group in enumerate(groups)
                ]
                try:
                    results: list[PartitionResult] = gather(dask_client, futures, ref, progress)
                except BaseException:
                    with contextlib.suppress(Exception):
                        dask_client.cancel(futures)
                    raise
            written = [url for r in results for url in r.shards]
            cat.commit_job(
                job,
                shards=written,
                rewrite=True,
                operation="compact",
                message=message,
                storage_options=opts,
            )
        except KeyboardInterrupt as e:
            with contextlib.suppress(Exception):
                cat.abort_job(job)
            raise interrupted(ref) from e
        except BaseException:
            with contextlib.suppress(Exception):
                cat.abort_job(job)
            raise
        ended = cat.job(job.id)
        rewritten = sum(r.records for r in results)
        superseded = int((ended.properties or {}).get(SUPERSEDED, 0))
        summary = CompactSummary(
            dataset=dataset,
            version=ended.version,
            job_id=job.id,
            compacted=[row.url for row, _ in chosen],
            written=written,
            records=rewritten - superseded,
            bytes_before=sum(row.size_bytes for row, _ in chosen),
            bytes_after=sum(r.bytes for r in results),
            tar_shards=tars,
            seconds=time.perf_counter() - t0,
            kept=kept,
            superseded=superseded,
        )
        log.info("%s", summary)
        return summary


def _choose(
    cat: Catalog, dataset: str, min_live: float
) -> tuple[list[tuple[ShardRow, frozenset[int]]], list[str], int]:
    """The latest version's native shards below ``min_live``, the other native ones, the tar count."""
    _, visible = internal.visible_shards(cat, dataset)
    chosen = [
        (row, hidden)
        for row, hidden in visible
        if row.kind == "native" and _live(row, hidden) < min_live
    ]
    picked = {row.id for row, _ in chosen}
    kept = [row.url for row, _ in visible if row.kind == "native" and row.id not in picked]
    return chosen, kept, sum(row.kind != "native" for row, _ in visible)


def _live(row: ShardRow, hidden: frozenset[int]) -> float:
    return (row.record_count - len(hidden)) / row.record_count if row.record_count else 0.0


def _groups(chosen: list[tuple[ShardRow, frozenset[int]]], size: int) -> list[list[Source]]:
    """Consecutive runs of shards holding about ``size`` live bytes each (estimated by fraction)."""
    groups: list[list[Source]] = [[]]
    filled = 0
    for row, hidden in chosen:
        live_bytes = int(row.size_bytes * _live(row, hidden))
        if groups[-1] and filled + live_bytes > size:
            groups.append([])
            filled = 0
        groups[-1].append(Source(row.url, row.id, row.file_id, row.data_crc, hidden))
        filled += live_bytes
    return groups
