"""``shardcat.write``: a Dask job writes a dataset as numbered shards, committed at once.

One task per partition writes that partition's shards and stages them in
the catalog under the job; when every task has succeeded, the client
commits the job in one transaction, and only then do lookups see its
records. A failed or interrupted job leaves nothing visible; ``shardcat gc``
removes its staged rows and objects.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._units import format_bytes, parse_size
from ..storage import brace_patterns, redact
from .plan import WritePlan
from .samples import batched, rows_to_samples
from .tasks import PartitionResult, write_partition

__all__ = ["WriteSummary", "write"]

log = logging.getLogger(__name__)

Mode = Literal["create", "append", "overwrite"]


@dataclass(frozen=True)
class WriteSummary:
    """What a committed write job produced."""

    dataset: str
    job_id: int
    records: int
    shards: list[str]
    bytes: int
    payload_bytes: int
    seconds: float
    partitions: int
    shard_patterns: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / max(self.seconds, 1e-9)

    def __str__(self) -> str:
        return (
            f"{self.dataset}: job {self.job_id} committed {self.records:,} records in "
            f"{len(self.shards)} shards ({format_bytes(self.bytes)}) from {self.partitions} partitions "
            f"in {self.seconds:.2f} s ({self.mb_per_s:.0f} MB/s)"
        )


def write(
    data: Any,
    url: str,
    *,
    catalog: Any,
    dataset: str,
    shard_size: int | str = "256MB",
    max_records_per_shard: int | None = None,
    compression: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    mode: Mode = "create",
    storage_options: Mapping[str, Any] | None = None,
    key_column: str = "__key__",
    prefix: str | None = None,
    client: Any = None,
    batch_size: int = 2048,
    progress: bool = True,
) -> WriteSummary:
    """Write ``data`` as numbered shards under ``url`` and register every record.

    Parameters
    ----------
    data:
        A Dask bag of sample dicts (``{"__key__": str, name: value, ...}``), a
        Dask dataframe (``key_column`` is the key, other columns are entries),
        or any iterable of sample dicts (sent in batches to a local cluster).
    url:
        The dataset's folder: a path, ``s3://bucket/datasets/train``, ...
    catalog:
        A :class:`shardcat.catalog.Catalog` or its SQLAlchemy URL.
    dataset:
        The dataset's name in the catalog.
    shard_size:
        A shard is closed once it reaches this size (``"256MB"``, bytes).
    mode:
        ``"create"`` (the dataset must not have records yet), ``"append"``
        (add records; keys must be new) or ``"overwrite"`` (replace the
        dataset's records when the job commits).
    storage_options:
        fsspec options (credentials, endpoint) handed to the workers; never
        stored in the catalog.
    client:
        A ``distributed.Client``; by default the current one, or a local
        cluster started for this call.

    Returns
    -------
    WriteSummary

    Raises
    ------
    DatasetExistsError
        ``mode="create"`` and the dataset already has records.
    DuplicateKeyError
        A key occurs twice in the job, or (``append``) is already in the dataset.
    """
    from ..catalog import Catalog

    cat = catalog if isinstance(catalog, Catalog) else Catalog(str(catalog))
    size = parse_size(shard_size)
    opts = dict(storage_options or {})
    t0 = time.perf_counter()
    job = cat.begin_job(dataset, root_url=redact(url), mode=mode)
    plan = WritePlan(
        dataset=dataset,
        root=url.rstrip("/"),
        prefix=prefix or dataset.replace("/", "_"),
        job_id=job.id,
        catalog_url=cat.url,
        shard_size=size,
        max_records=max_records_per_shard,
        compression=compression,
        metadata=dict(metadata or {}),
        storage_options=opts,
        partition_base=job.partition_base,
    )
    try:
        with _cluster(client, url) as dask_client:
            results = _run(data, plan, dask_client, key_column, batch_size, progress)
        cat.commit_job(job.id)
    except BaseException:
        with contextlib.suppress(Exception):
            cat.abort_job(job.id)
        raise
    results.sort(key=lambda r: r.partition)
    shards = [s for r in results for s in r.shards]
    summary = WriteSummary(
        dataset=dataset,
        job_id=job.id,
        records=sum(r.records for r in results),
        shards=shards,
        bytes=sum(r.bytes for r in results),
        payload_bytes=sum(r.payload_bytes for r in results),
        seconds=time.perf_counter() - t0,
        partitions=len(results),
        shard_patterns=brace_patterns(shards),
    )
    log.info("%s", summary)
    return summary


@contextlib.contextmanager
def _cluster(client: Any, url: str) -> Iterator[Any]:
    """The distributed client to run on: the given one, the current one, or a local cluster."""
    from distributed import Client, LocalCluster, default_client

    if client is not None:
        yield client
        return
    with contextlib.suppress(ValueError):
        yield default_client()
        return
    # memory:// lives in one process, so its cluster must be threads in this process.
    in_process = url.startswith("memory://")
    with (
        LocalCluster(
            processes=not in_process,
            n_workers=1 if in_process else None,
            threads_per_worker=2 if in_process else 1,
            dashboard_address=None,
            scheduler_port=0,
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def _run(
    data: Any, plan: WritePlan, client: Any, key_column: str, batch_size: int, progress: bool
) -> list[PartitionResult]:
    import dask
    import dask.bag as db

    if _is_dask_dataframe(data):
        parts = data.to_delayed()
        tasks = [
            dask.delayed(_write_frame_partition)(part, plan, i, key_column)
            for i, part in enumerate(parts)
        ]
        futures = client.compute(tasks)
        return _gather(client, futures, progress, len(tasks))
    if isinstance(data, db.Bag):
        parts = data.to_delayed()
        tasks = [dask.delayed(write_partition)(part, plan, i) for i, part in enumerate(parts)]
        futures = client.compute(tasks)
        return _gather(client, futures, progress, len(tasks))
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        return _run_iterable(data, plan, client, batch_size, progress)
    raise TypeError(
        f"cannot write a {type(data).__name__}: pass a Dask bag or dataframe, or an iterable of samples"
    )


def _run_iterable(
    data: Iterable[Any], plan: WritePlan, client: Any, batch_size: int, progress: bool
) -> list[PartitionResult]:
    """Stream batches to the cluster, keeping only a few in flight (bounded client memory)."""
    from distributed import wait

    workers = max(1, len(client.scheduler_info().get("workers", {})))
    in_flight_limit = 2 * workers
    pending: list[Any] = []
    done: list[PartitionResult] = []
    with _Progress(progress, None) as bar:
        for i, batch in enumerate(batched(data, batch_size)):
            pending.append(
                client.submit(
                    write_partition,
                    batch,
                    plan,
                    i,
                    pure=False,
                    key=f"shardcat-write-{plan.job_id}-{i}",
                )
            )
            if len(pending) >= in_flight_limit:
                finished, rest = wait(pending, return_when="FIRST_COMPLETED")
                for f in finished:
                    done.append(f.result())
                    bar.advance(done[-1])
                pending = list(rest)
        for f in pending:
            done.append(f.result())
            bar.advance(done[-1])
    return done


def _gather(client: Any, futures: list[Any], progress: bool, total: int) -> list[PartitionResult]:
    from distributed import as_completed

    results: list[PartitionResult] = []
    with _Progress(progress, total) as bar:
        for future in as_completed(futures):
            results.append(future.result())
            bar.advance(results[-1])
    return results


def _write_frame_partition(
    frame: Any, plan: WritePlan, partition: int, key_column: str
) -> PartitionResult:
    return write_partition(rows_to_samples(frame, key_column), plan, partition)


def _is_dask_dataframe(data: Any) -> bool:
    try:
        import dask.dataframe as dd
    except ImportError:
        return False
    return isinstance(data, dd.DataFrame)


class _Progress:
    """A rich progress bar on the client: partitions done, records and bytes written."""

    def __init__(self, enabled: bool, total: int | None) -> None:
        self.enabled = enabled
        self.total = total
        self.records = 0
        self.bytes = 0
        self._progress: Any = None
        self._task: Any = None
        self._t0 = time.perf_counter()

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]writing"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("partitions"),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                transient=False,
            )
            self._progress.__enter__()
            self._task = self._progress.add_task("write", total=self.total, stats="")
        return self

    def advance(self, result: PartitionResult) -> None:
        self.records += result.records
        self.bytes += result.bytes
        if self._progress is not None:
            rate = self.bytes / 1e6 / max(time.perf_counter() - self._t0, 1e-9)
            stats = f"{self.records:,} records, {format_bytes(self.bytes)}, {rate:.0f} MB/s"
            self._progress.update(self._task, advance=1, stats=stats)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
