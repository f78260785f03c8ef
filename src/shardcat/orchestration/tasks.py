"""The partition task: write one partition's samples as shards and stage them.

Runs on Dask workers. Shard names hold the job id, so no two jobs ever
write the same file; every shard is published exclusively (never over an
existing object). A retried task (a worker died, ``retries=``) takes the
next free name where an earlier attempt already published one, and the
client commits exactly the shards the successful attempts reported: a
record is never registered twice, and a killed attempt's leftovers are
retired at commit and removed by gc.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CommitConflictError, DatasetNotFoundError, JobNotFoundError
from ..format.entries import check_sample
from ..storage import first_free, redact, resolve, retried
from ..storage.shards import RollingShardWriter
from .plan import SHARDS_PER_PARTITION, WritePlan
from .samples import as_sample

if TYPE_CHECKING:
    from ..reading import Catalog, CatalogHandle

__all__ = ["ATTEMPT", "LAST_COUNT", "PartitionResult", "write_partition"]

log = logging.getLogger(__name__)

ATTEMPT = "attempt"
"""Footer metadata key: the task attempt (random) that wrote the shard."""
LAST_COUNT = "partition_shards"
"""Footer metadata key of an attempt's last shard: how many shards the attempt wrote."""
_NOTHING = object()

_catalogs: dict[CatalogHandle, Catalog] = {}
_lock = threading.Lock()


def catalog_for(handle: CatalogHandle) -> Catalog:
    """One Catalog per worker process and handle (engines are pooled and not picklable)."""
    with _lock:
        cat = _catalogs.get(handle)
        if cat is None:
            cat = _catalogs[handle] = handle.open()
        return cat


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What a partition task reports back to the client (small: no per-record data)."""

    partition: int
    shards: tuple[str, ...]
    records: int
    bytes: int
    payload_bytes: int
    seconds: float


def write_partition(samples: Iterable[Any], plan: WritePlan, partition: int) -> PartitionResult:
    """Write ``samples`` to the partition's numbered shards and stage each in the catalog.

    Raises
    ------
    CommitConflictError
        The job is no longer open (it failed and was aborted, or committed
        without this task): the task stops, and removes any shard it
        published that the catalog refused.
    """
    t0 = time.perf_counter()
    catalog = catalog_for(plan.catalog)
    _require_open(catalog, plan)

    first = plan.first_shard_number(partition)

    def name(number: int, index: int) -> str:
        if index >= SHARDS_PER_PARTITION:
            raise ValueError(
                f"partition {partition} needs more than {SHARDS_PER_PARTITION} shards of "
                f"{plan.shard_size:,} bytes; repartition the data into smaller partitions"
            )
        # A late task of an aborted job stops at its next shard instead of writing on.
        if index:
            _require_open(catalog, plan)
        # An earlier attempt of this task may have published the first choice.
        return first_free(plan.root, plan.names(partition, index), plan.storage_options)

    # Declared fields' values of the samples of the shard being written, in write order.
    pending: list[dict[str, Any]] = []

    def stage(info: Any) -> None:
        # Staged under the job: invisible to lookups until the client commits.
        # A retried task registers under fresh names; the commit's manifest
        # keeps only what the successful attempts reported.
        try:
            row = catalog.register_shard(plan.dataset, info, job=plan.job_id)
            if plan.fields:
                values = pending[: info.record_count]
                del pending[: info.record_count]
                offsets = info.offsets.tolist()
                catalog.store_fields(plan.dataset, row.id, zip(offsets, values))
        except (CommitConflictError, JobNotFoundError, DatasetNotFoundError):
            # The job ended without us (or went with the dataset its failed first
            # job created): the file is ours alone (published exclusively, under
            # this job's name), so nothing else can need it.
            _remove_quietly(info.path, plan)
            raise

    writer = RollingShardWriter(
        plan.root,
        name,
        max_bytes=plan.shard_size,
        max_records=plan.max_records,
        start=first,
        storage_options=plan.storage_options,
        on_shard_closed=stage,
        compression=plan.compression,
        exclusive=True,
        metadata={
            **plan.metadata,
            "dataset": plan.dataset,
            "job": plan.job_id,
            "partition": partition,
            # A resumed job trusts a partition only if one attempt staged all its shards.
            ATTEMPT: uuid.uuid4().hex,
        },
    )
    with writer:
        previous: Any = _NOTHING
        for sample in samples:
            sample = as_sample(sample)
            # A JSON or .npy entry that would not decode fails the job here, not a training run.
            check_sample(sample, plan.dataset)
            if plan.fields:
                pending.append(field_values(sample, plan.fields, plan.fields_entry))
            if previous is not _NOTHING:
                writer.write(previous)  # checks the __key__
            previous = sample
        if previous is not _NOTHING:
            # The shard that takes the last record says how many the attempt wrote.
            writer.mark_last({LAST_COUNT: writer.closed_shards + 1})
            writer.write(previous)
    infos = writer.shards
    result = PartitionResult(
        partition=partition,
        shards=tuple(i.path for i in infos),
        records=sum(i.record_count for i in infos),
        bytes=sum(i.size for i in infos),
        payload_bytes=sum(i.payload_bytes() for i in infos),
        seconds=time.perf_counter() - t0,
    )
    log.debug("partition %d: %d records in %d shards", partition, result.records, len(infos))
    return result


def field_values(sample: Mapping[str, Any], fields: tuple[str, ...], entry: str) -> dict[str, Any]:
    """The declared fields' values in ``sample[entry]`` (a dict, or JSON bytes/text), if any."""
    obj = sample.get(entry)
    if isinstance(obj, (bytes, str)):
        try:
            obj = json.loads(obj)
        except ValueError:
            return {}
    if not isinstance(obj, Mapping):
        return {}
    return {name: obj[name] for name in fields if name in obj}


def _require_open(catalog: Catalog, plan: WritePlan) -> None:
    state = catalog.job(plan.job_id).state
    if state != "open":
        raise CommitConflictError(
            f"job {plan.job_id} of dataset {plan.dataset!r} is {state}: this task of it stops "
            "(the job failed or was cancelled; its client reported why)"
        )


def _remove_quietly(url: str, plan: WritePlan) -> None:
    try:
        fs, path = resolve(url, plan.storage_options)
        # Retried (storage/retry.py); gone already (a try whose answer was lost) is removed.
        with contextlib.suppress(FileNotFoundError):
            retried(fs, "rm_file", redact(url), path)
    except Exception as e:  # gc removes it later; the task's own error is what matters
        log.warning("could not remove %s after its job ended: %s", redact(url), e)
