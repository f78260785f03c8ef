"""Resume a write job whose client died: keep the partitions it finished, write the rest.

A job started with a name (``job_name=``) or as resumable records in its
properties how its partitions are numbered (``partition_base``) and what it
saw (``base_version``), so a rerun maps partition ``p`` to the same shard
numbers. Every shard a partition task writes carries in its footer the
task attempt that wrote it (``attempt``, random per attempt) and the last
shard of an attempt also ``partition_shards``, the count of that attempt's
shards. A partition is finished when one attempt staged all of its shards
``first .. first + partition_shards - 1`` and each file still exists and
passes a full verification (every CRC) matching its catalog row. Anything
else of the job (a half-written partition, a corrupted or missing file,
a killed attempt's leftovers) is rewritten, and left out of the commit's
manifest, so it is retired and later removed by gc.

A job also records a fingerprint of its inputs (``inputs``, :mod:`.inputs`);
a resume given other inputs is refused (:func:`check_inputs`), since its
finished partitions hold what the first run was given.

Why no ``jobs.name`` column: a name is looked up only among the open and
committed jobs of one dataset (a handful of rows), so it lives in the job's
``properties`` and needs no schema change; so does the fingerprint.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import JobExistsError, JobInputsChangedError, ShardcatError
from ..storage.shards import ShardReader
from .files import SampleFiles
from .inputs import INPUTS_PROPERTY, InputsFingerprint, differences
from .plan import SHARDS_PER_PARTITION
from .tasks import ATTEMPT, LAST_COUNT, PartitionResult
from .watch import JobRef, gather

if TYPE_CHECKING:
    from distributed import Client

    from ..catalog import JobInfo, ShardRow
    from ..reading import Catalog

__all__ = [
    "ResumePoint",
    "check_attempt",
    "check_inputs",
    "finished_partitions",
    "resumable_job",
]

log = logging.getLogger(__name__)

_DESCRIPTION = "shardcat.write"


@dataclass(frozen=True)
class ResumePoint:
    """An open job to continue, and how its partitions were numbered."""

    job: JobInfo
    partition_base: int
    base_version: int


def job_properties(
    *,
    mode: str,
    root: str,
    base_version: int,
    partition_base: int,
    job_name: str | None,
    inputs: InputsFingerprint | None = None,
) -> dict[str, Any]:
    """What a resumable write job records when it starts (its ``properties``)."""
    props: dict[str, Any] = {
        "mode": mode,
        "root": root,
        "base_version": base_version,
        "partition_base": partition_base,
    }
    if job_name is not None:
        props["job_name"] = job_name
    if inputs is not None:
        props[INPUTS_PROPERTY] = inputs.to_json()
    return props


def check_inputs(
    point: ResumePoint,
    now: InputsFingerprint,
    *,
    allow_changed: bool,
    parts: Sequence[Sequence[SampleFiles]] = (),
) -> None:
    """Refuse to resume ``point``'s job with inputs other than those it began with.

    ``allow_changed`` lets it go on anyway (logged as a warning): the
    finished partitions keep what the first run wrote, the rest is written
    from ``now``'s inputs.

    Raises
    ------
    JobInputsChangedError
        The inputs differ from the recorded ones, or cannot be compared (a
        generator; a job begun before fingerprints were kept), naming what.
    """
    recorded = InputsFingerprint.from_json((point.job.properties or {}).get(INPUTS_PROPERTY))
    why = differences(recorded, now, parts=parts)
    if why is None:
        return
    name = (point.job.properties or {}).get("job_name")
    job = f"job {point.job.id}" + (f" ({name!r})" if name else "")
    if allow_changed:
        log.warning(
            "resuming %s of dataset %r with changed inputs: %s", job, point.job.dataset, why
        )
        return
    raise JobInputsChangedError(
        f"cannot resume {job} of dataset {point.job.dataset!r}: {why}; its finished "
        "partitions hold what its first run was given, so the commit would mix two inputs",
        hint=JobInputsChangedError.OVERRIDE,
    )


def resumable_job(
    cat: Catalog, dataset: str, *, job_name: str | None, resume: bool, root: str, mode: str
) -> ResumePoint | None:
    """The open write job of ``dataset`` to resume, or None to start a new one.

    With ``job_name``: the open job of that name. With ``resume`` alone: the
    newest open write job of the dataset into the same root and mode.

    Raises
    ------
    JobExistsError
        A job named ``job_name`` was already committed (rerunning it would
        write its records twice), or the open job of that name writes to
        another root or in another mode.
    """
    if job_name is None and not resume:
        return None
    jobs = [
        j
        for j in cat.jobs(dataset)
        if (j.description or "").startswith(_DESCRIPTION)
        and "partition_base" in (j.properties or {})
    ]
    if job_name is not None:
        named = [j for j in jobs if (j.properties or {}).get("job_name") == job_name]
        committed = [j for j in named if j.state == "committed"]
        if committed:
            raise JobExistsError(
                f"job {job_name!r} of dataset {dataset!r} was committed already (job "
                f"{committed[-1].id}, version {committed[-1].version}); nothing to resume: "
                "choose a new job name to write more"
            )
        candidates = [j for j in named if j.state == "open"]
    else:
        candidates = [
            j
            for j in jobs
            if j.state == "open"
            and (j.properties or {}).get("root") == root
            and (j.properties or {}).get("mode") == mode
        ]
    if not candidates:
        return None
    job = candidates[-1]  # newest
    props = job.properties or {}
    if props.get("root") != root or props.get("mode") != mode:
        raise JobExistsError(
            f"open job {job.id} ({job_name!r}) of dataset {dataset!r} writes to "
            f"{props.get('root')!r} in mode {props.get('mode')!r}, not {root!r} in mode "
            f"{mode!r}: rerun it with its own URL and mode, or choose a new job name"
        )
    log.info("resuming job %d of dataset %r", job.id, dataset)
    return ResumePoint(job, int(props["partition_base"]), int(props["base_version"]))


def attempts(staged: Iterable[ShardRow], partition_base: int) -> dict[int, list[list[ShardRow]]]:
    """Per partition, the complete attempts among ``staged`` (shards in order)."""
    groups: dict[tuple[int, str], list[ShardRow]] = defaultdict(list)
    for row in staged:
        token = row.metadata.get(ATTEMPT)
        if row.shard_number is None or not isinstance(token, str):
            continue
        partition = row.shard_number // SHARDS_PER_PARTITION - partition_base
        groups[partition, token].append(row)
    found: dict[int, list[list[ShardRow]]] = defaultdict(list)
    for (partition, _), rows in groups.items():
        rows.sort(key=lambda r: r.shard_number or 0)
        last = rows[-1].metadata.get(LAST_COUNT)
        first = (partition_base + partition) * SHARDS_PER_PARTITION
        numbers = [r.shard_number for r in rows]
        if isinstance(last, int) and numbers == list(range(first, first + last)):
            found[partition].append(rows)
    return found


def check_attempt(rows: list[ShardRow], storage_options: Mapping[str, Any]) -> bool:
    """Whether every shard of an attempt exists and fully verifies against its catalog row.

    Runs on a worker: reads every byte of the shards.
    """
    for row in rows:
        try:
            with ShardReader(row.url, storage_options=dict(storage_options)) as reader:
                info = reader.info
                if info.file_id != row.file_id or info.data_crc != row.data_crc:
                    log.warning("%s is not the shard its job staged; rewriting it", row.url)
                    return False
                reader.verify()
        except (ShardcatError, OSError) as e:
            log.warning(
                "staged shard %s cannot be trusted (%s); rewriting its partition", row.url, e
            )
            return False
    return True


def finished_partitions(
    cat: Catalog,
    point: ResumePoint,
    client: Client,
    storage_options: Mapping[str, Any],
    job: JobRef,
) -> dict[int, PartitionResult]:
    """The partitions of the job that an earlier run finished, verified (one task per attempt).

    Raises
    ------
    WorkersLostError
        The cluster has had no workers for too long (``job`` is what the error names).
    """
    staged = [s for s in cat.shards(point.job.dataset, state="staged") if s.job_id == point.job.id]
    found = attempts(staged, point.partition_base)
    # The newest complete attempt of each partition first; an older one if it fails.
    candidates = [(p, rows) for p, tries in found.items() for rows in reversed(tries)]
    futures = client.map(
        check_attempt,
        [rows for _, rows in candidates],
        storage_options=dict(storage_options),
        pure=False,
    )
    done: dict[int, PartitionResult] = {}
    for (partition, rows), ok in zip(candidates, gather(client, futures, job), strict=True):
        if ok and partition not in done:
            done[partition] = PartitionResult(
                partition=partition,
                shards=tuple(r.url for r in rows),
                records=sum(r.record_count for r in rows),
                bytes=sum(r.size_bytes for r in rows),
                payload_bytes=sum(r.payload_bytes for r in rows),
                seconds=0.0,
            )
    return done
