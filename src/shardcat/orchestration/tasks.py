"""The partition task: write one partition's samples as shards and stage them.

Runs on Dask workers. Shard names depend only on the job's plan and the
partition number, so a retried task (a worker died, ``retries=``) rewrites
the same objects and replaces the same staged catalog rows: a record is
never registered twice.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..shards import RollingShardWriter
from .plan import SHARDS_PER_PARTITION, WritePlan
from .samples import validate_sample

__all__ = ["PartitionResult", "write_partition"]

log = logging.getLogger(__name__)

_catalogs: dict[str, Any] = {}
_lock = threading.Lock()


def catalog_for(url: str) -> Any:
    """One Catalog per worker process and URL (engines are pooled and not picklable)."""
    from ..catalog import Catalog

    with _lock:
        cat = _catalogs.get(url)
        if cat is None:
            cat = _catalogs[url] = Catalog(url)
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
    """Write ``samples`` to the partition's numbered shards and stage each in the catalog."""
    t0 = time.perf_counter()
    catalog = catalog_for(plan.catalog_url)

    first = plan.first_shard_number(partition)

    def stage(info: Any) -> None:
        # Checked per shard, not per sample: the sample loop is the hot path.
        if info.header.shard_number - first >= SHARDS_PER_PARTITION:
            raise ValueError(
                f"partition {partition} needs more than {SHARDS_PER_PARTITION} shards of "
                f"{plan.shard_size:,} bytes; repartition the data into smaller partitions"
            )
        # Staged under the job: invisible to lookups until the client commits.
        # A retried task registers the same URL again, which replaces these rows.
        catalog.register_shard(plan.dataset, info, job=plan.job_id)

    writer = RollingShardWriter(
        plan.root,
        plan.pattern(partition),
        max_bytes=plan.shard_size,
        max_records=plan.max_records,
        start=first,
        storage_options=plan.storage_options,
        on_shard_closed=stage,
        compression=plan.compression,
        metadata={
            **plan.metadata,
            "dataset": plan.dataset,
            "job": plan.job_id,
            "partition": partition,
        },
    )
    with writer:
        for sample in samples:
            writer.write(validate_sample(sample))
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
