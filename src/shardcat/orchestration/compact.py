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

``fold_groups`` folds groups into the base instead (docs/GROUPS.md §6): the
same job also rewrites every base shard holding a sample with entries in a
folded group, each record merged with its groups' records by the readers'
join (:func:`~shardcat.orchestration.joins.join_records`, whose merge is
:class:`~shardcat.format.merged.MergedRecord`, the one rule ``get`` uses),
and its commit (``commit_job(fold=)``) removes the groups' records and drops
the groups in the same version.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .._units import count_of, format_bytes, parse_size
from ..catalog import internal
from ..errors import (
    ChecksumError,
    CommitConflictError,
    EntryExistsError,
    GroupsUnsupportedError,
    Hint,
)
from ..format import Record
from ..storage import dataset_prefix, first_free, redact
from ..storage.shards import RollingShardWriter, ShardReader
from .cluster import ClientChoice, client_for
from .joins import GroupJoin, join_records, plan_joins
from .plan import SHARDS_PER_PARTITION, WritePlan
from .reach import refuse_in_memory, refuse_unreachable, refuse_unreachable_stores
from .tasks import ATTEMPT, PartitionResult, _remove_quietly, catalog_for
from .watch import JobRef, TaskProgressCallback, gather, interrupted

if TYPE_CHECKING:
    from ..catalog import GroupInfo, ShardRow
    from ..catalog.group_rows import GroupRows
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
    joins: tuple[GroupJoin, ...] = ()
    """The folded groups' records of its samples (``fold_groups``), merged into the copies."""


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
    folded: dict[str, int] = field(default_factory=dict)
    """Group name -> its records folded into the base records (``fold_groups``); the
    groups are dropped in ``version``."""

    def __str__(self) -> str:
        if self.version is not None and self.folded:
            groups = ", ".join(
                f"{name!r} ({count_of(n, 'record')})" for name, n in self.folded.items()
            )
            head = (
                f"{self.dataset}: version {self.version} (job {self.job_id}) folded groups {groups} "
                f"into {count_of(self.records, 'base record')}, rewriting "
                f"{count_of(len(self.compacted), 'shard')} ({format_bytes(self.bytes_before)}) into "
                f"{count_of(len(self.written), 'shard')} ({format_bytes(self.bytes_after)}) in "
                f"{self.seconds:.2f} s; {count_of(len(self.kept), 'shard')} kept; run expire and gc "
                "to reclaim the old bytes"
            )
        elif self.version is None:
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
                offsets = reader.footer.records["offset"].tolist()
                keep = [i for i, off in enumerate(offsets) if off not in src.hidden]
                records: Iterator[Record] = (
                    record
                    for start in range(0, len(keep), _BATCH)
                    for record in reader.take(keep[start : start + _BATCH])
                )
                if src.joins:  # a fold: each sample's groups merged in, as get merges them
                    records = join_records(records, src.joins, plan.storage_options)
                for record in records:
                    pending.append((src.shard_id, record.offset))
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
    fold_groups: bool | Sequence[str] = False,
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
    fold_groups:
        ``True`` (every live column group) or a list of group names: fold
        them into the base (docs/GROUPS.md §6). Every base shard holding a
        sample with entries in one is rewritten too, each sample's record
        holding its merged entries exactly as ``get`` returns them; the
        same version removes the groups' records and drops the groups
        (``summary.folded`` counts them; operation ``fold`` in ``log``).
        Older versions keep reading the group shards until expire and gc.

    Returns
    -------
    CompactSummary

    Raises
    ------
    ValueError
        ``min_live`` is not between 0 and 1.
    GroupNotFoundError
        A group of ``fold_groups`` is not a live group of the dataset.
    GroupsUnsupportedError
        A folded group has entries of samples whose base is indexed in place
        (tars, a folder, MDS/LitData): their base is the user's files.
    EntryExistsError
        An older group that is not folded holds entry names a folded one
        replaced (after the fold the older one's would be read): fold it too.
    KeyConflictError
        Another commit changed a folded group, or the base record of a
        sample with entries in one, while the fold ran; nothing changed.
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout`` seconds;
        the job was aborted.
    ChecksumError
        A shard to compact is damaged (the job is aborted, nothing changes).
    """
    from ..catalog.commit import SUPERSEDED
    from ..catalog.groups import FOLDED
    from ..catalog.models import COMPACT, FOLD
    from ..reading import Catalog

    if not 0 <= min_live <= 1:
        raise ValueError(f"min_live must be between 0 and 1, not {min_live!r}")
    size = parse_size(shard_size)
    with Catalog.opened(catalog) as cat:
        refuse_in_memory(cat)
        opts = dict(storage_options if storage_options is not None else cat.storage_options)
        t0 = time.perf_counter()
        root = cat.info(dataset).root_url
        folding: list[GroupInfo] = []
        if fold_groups is not False:
            names: list[str] | None = None
            if isinstance(fold_groups, str):  # one name, not its letters
                names = [fold_groups]
            elif fold_groups is not True:
                names = [str(n) for n in fold_groups]
            folding = internal.live_groups(cat, dataset, names)
        chosen, kept, tars = _choose(cat, dataset, min_live, folding)
        if tars:
            log.info("%s: %d tar shards are never compacted", dataset, tars)
        if not chosen and not folding:
            return CompactSummary(
                dataset, None, None, [], [], 0, 0, 0, tars, time.perf_counter() - t0, kept
            )
        operation = FOLD if folding else COMPACT
        # The job, then the choice again: the job's base version is what the commit's
        # key-conflict check compares to, so any change after the shards are chosen is seen.
        job = cat.begin_job(
            dataset, description="shardcat.compact", properties={"operation": operation}
        )
        ref = JobRef("compact", dataset, job.id)
        try:
            chosen, kept, tars = _choose(cat, dataset, min_live, folding)
            if not chosen and not folding:  # another compaction took them meanwhile
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
            results: list[PartitionResult] = []
            if groups:
                refuse_unreachable_stores({root: opts})  # before a cluster starts
                with client_for(client, root) as dask_client:
                    refuse_unreachable(cat, dask_client)
                    refuse_unreachable_stores({root: opts}, dask_client)
                    futures = [
                        dask_client.submit(
                            compact_group, plan, n, group, pure=False, retries=retries
                        )
                        for n, group in enumerate(groups)
                    ]
                    try:
                        results = gather(dask_client, futures, ref, progress)
                    except BaseException:
                        with contextlib.suppress(Exception):
                            dask_client.cancel(futures)
                        raise
            written = [url for r in results for url in r.shards]
            cat.commit_job(
                job,
                shards=written,
                rewrite=True,
                operation=operation,
                message=message,
                storage_options=opts,
                fold=[g.id for g in folding] or None,
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
        properties = ended.properties or {}
        superseded = int(properties.get(SUPERSEDED, 0))
        summary = CompactSummary(
            dataset=dataset,
            version=ended.version,
            job_id=job.id,
            compacted=[row.url for row, _, _ in chosen],
            written=written,
            records=rewritten - superseded,
            bytes_before=sum(row.size_bytes for row, _, _ in chosen),
            bytes_after=sum(r.bytes for r in results),
            tar_shards=tars,
            seconds=time.perf_counter() - t0,
            kept=kept,
            superseded=superseded,
            # In group order (a JSON column may keep its keys in another).
            folded={g.name: int(properties[FOLDED][g.name]) for g in folding},
        )
        log.info("%s", summary)
        return summary


def _choose(
    cat: Catalog, dataset: str, min_live: float, folding: Sequence[GroupInfo] = ()
) -> tuple[list[tuple[ShardRow, frozenset[int], tuple[GroupJoin, ...]]], list[str], int]:
    """The latest version's native shards to rewrite, the other native ones, the tar count.

    To rewrite: those below ``min_live``, and (``folding``) those holding a
    sample with entries in a folded group, each with its joins.
    """
    number, visible = internal.visible_shards(cat, dataset)
    joins = _fold_joins(cat, dataset, number, visible, folding) if folding else {}
    chosen = [
        (row, hidden, joins.get(row.id, ()))
        for row, hidden in visible
        if row.kind == "native" and (_live(row, hidden) < min_live or row.id in joins)
    ]
    picked = {row.id for row, _, _ in chosen}
    kept = [row.url for row, _ in visible if row.kind == "native" and row.id not in picked]
    return chosen, kept, sum(row.kind != "native" for row, _ in visible)


def _fold_joins(
    cat: Catalog,
    dataset: str,
    number: int,
    visible: list[tuple[ShardRow, frozenset[int]]],
    folding: Sequence[GroupInfo],
) -> dict[int, tuple[GroupJoin, ...]]:
    """Base shard id -> the folded groups' joins of its samples (the readers' plan, §5).

    Raises
    ------
    GroupsUnsupportedError
        A folded group has entries of samples whose base shard is not native.
    EntryExistsError
        An older group that is not folded shares entry names with a folded one.
    """
    found = internal.group_rows(cat, dataset, number)
    ids = {g.id for g in folding}
    _refuse_overtaking(dataset, found, ids)
    rows = [r for r in found.rows if r[2] in ids]
    kinds = {row.id: row.kind for row, _ in visible}
    in_place = sorted({kinds.get(r[0], "?") for r in rows} - {"native"})
    if in_place:
        raise GroupsUnsupportedError(
            f"dataset {dataset!r} is indexed in place (base shards of kind "
            f"{', '.join(map(repr, in_place))}): its base is "
            "the user's files, which a fold of column groups cannot rewrite; nothing was changed",
            hint=Hint(
                python="keep the groups as groups (compact without fold_groups), or pack the "
                "dataset into native shards (shardcat.write(shardcat.read(...)) into a new "
                "dataset) and fold there",
                cli="keep the groups as groups (compact without --fold-groups), or pack the "
                "dataset into native shards (shardcat.write of shardcat.read) and fold there",
            ),
        )
    subset = replace(
        found,
        names={i: n for i, n in found.names.items() if i in ids},
        entries={i: e for i, e in found.entries.items() if i in ids},
        rows=rows,
    )
    return plan_joins(subset)


def _refuse_overtaking(dataset: str, found: GroupRows, ids: set[int]) -> None:
    """Refuse a fold after which an older, unfolded group's entry would win over a folded one's.

    Groups merge in creation order, the base first: a folded group's entry
    that replaced an older group's (``replace_entries``) would, once in the
    base, lose to the older group's again. Judged by the entry names each
    group's records hold (``GroupRows.entries``), per sample.
    """
    pairs = {
        (old, new)
        for old in found.names
        for new in ids
        if old not in ids
        and old < new
        and found.entries.get(old, frozenset()) & found.entries.get(new, frozenset())
    }
    if not pairs:
        return
    groups_of: dict[tuple[int, int], set[int]] = {}
    for bsid, boff, gid, _, _ in found.rows:
        groups_of.setdefault((bsid, boff), set()).add(gid)
    hit = sorted({p for gids in groups_of.values() for p in pairs if p[0] in gids and p[1] in gids})
    if not hit:
        return
    old, new = hit[0]
    names = sorted(found.entries[old] & found.entries[new])
    # The groups asked for and the older ones they need, in group (creation) order.
    fold = [found.names[i] for i in sorted(ids | {o for o, _ in hit}) if i in found.names]
    raise EntryExistsError(
        f"folding group {found.names[new]!r} of dataset {dataset!r} into the base would let the "
        f"older group {found.names[old]!r} win again for entries {names[:20]} it replaced "
        "(groups merge in the order they were created); nothing was changed",
        names=names,
        hint=Hint(
            python=f"fold those groups too: fold_groups={fold!r}, or fold_groups=True",
            cli="fold those groups too: "
            + " ".join(f"--fold-group {shlex.quote(n)}" for n in fold)
            + ", or --fold-groups alone (every group)",
        ),
    )


def _live(row: ShardRow, hidden: frozenset[int]) -> float:
    return (row.record_count - len(hidden)) / row.record_count if row.record_count else 0.0


def _groups(
    chosen: list[tuple[ShardRow, frozenset[int], tuple[GroupJoin, ...]]], size: int
) -> list[list[Source]]:
    """Consecutive runs of shards holding about ``size`` live bytes each (estimated by fraction)."""
    groups: list[list[Source]] = [[]]
    filled = 0
    for row, hidden, joins in chosen:
        live_bytes = int(row.size_bytes * _live(row, hidden))
        if groups[-1] and filled + live_bytes > size:
            groups.append([])
            filled = 0
        groups[-1].append(Source(row.url, row.id, row.file_id, row.data_crc, hidden, joins))
        filled += live_bytes
    return groups if groups[0] else []
