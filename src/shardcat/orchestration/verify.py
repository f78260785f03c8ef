"""``verify`` as a Dask job: one task per batch of shards, the client only adds up the reports.

:meth:`Catalog.verify <shardcat.Catalog.verify>` reads every shard in the
client's threads and compares each footer with its catalog rows there: its
time grows with the dataset in one process. Here each task opens the catalog
on its worker (:func:`~.tasks.catalog_for`), reads its shards again and
compares each with that shard's rows alone
(:func:`~shardcat.reading.catalog.verify_shards`, the comparison
``Catalog.verify`` makes), and sends back only the problems and counts. The
client holds the shard ids and the problems, never the records; the version
manifests (``_versions/``) are checked in the client, as ``Catalog.verify``
does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .cluster import ClientChoice, client_for
from .reach import refuse_in_memory, refuse_unreachable, refuse_unreachable_stores
from .tasks import catalog_for
from .watch import JobRef, TaskProgressCallback, gather, interrupted

if TYPE_CHECKING:
    from ..catalog.history import Version
    from ..catalog.results import CatalogReport, Problem
    from ..reading import Catalog, CatalogHandle

__all__ = ["SHARDS_PER_TASK", "verify", "verify_batch"]

SHARDS_PER_TASK = 16
"""Shards one task checks by default: few enough that many workers share a dataset,
enough that a task's catalog round trips and scheduling cost little next to reading."""


def verify(
    catalog: Catalog | str,
    dataset: str,
    *,
    version: Version = None,
    history: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    client: ClientChoice = None,
    shards_per_task: int = SHARDS_PER_TASK,
    retries: int = 2,
    progress: TaskProgressCallback | None = None,
) -> CatalogReport:
    """Check every committed shard against the catalog, and every CRC, on a Dask cluster.

    The same report as :meth:`Catalog.verify <shardcat.Catalog.verify>`
    (same problems, in the same order), for datasets too large for one
    process to check: each task checks ``shards_per_task`` shards on a
    worker, querying only their catalog rows.

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.Catalog` or its URL. Every worker opens it: a
        PostgreSQL catalog, or a SQLite file on the workers' machine.
    version, history:
        As :meth:`Catalog.verify <shardcat.Catalog.verify>`.
    storage_options:
        fsspec options for reading the shards (default: the catalog's).
    client:
        A ``distributed.Client``, or a :class:`~shardcat.orchestration.DaskCluster`;
        by default the current client, else a local cluster started for this
        call (:func:`~shardcat.orchestration.client_for`).
    shards_per_task:
        Shards one task checks at most; fewer when the dataset has too few
        shards to give each worker several tasks.
    retries:
        Dask retries per task (verify writes nothing: a task may run again).
    progress:
        Called as ``progress(done, total)`` with the tasks finished so far,
        in the calling thread.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    CatalogError
        The catalog is in memory, or a SQLite file the workers cannot open.
    WorkersLostError
        The cluster had no workers for ``dask_no_workers_timeout`` seconds.
    ValueError
        ``shards_per_task`` is below 1.
    """
    from ..catalog.results import CatalogReport
    from ..reading import Catalog
    from ..reading.catalog import shards_to_verify
    from ..reading.history import check_history

    if shards_per_task < 1:
        raise ValueError(f"shards_per_task must be at least 1, not {shards_per_task}")
    with Catalog.opened(catalog) as cat:
        refuse_in_memory(cat)
        opts = dict(storage_options if storage_options is not None else cat.storage_options)
        root = cat.info(dataset).root_url
        ids = shards_to_verify(cat, dataset, version)
        verdicts: list[list[tuple[list[Problem], int, int]]] = []
        if ids:
            ref = JobRef("verify", dataset, changes_nothing=True)
            handle = cat.handle()
            refuse_unreachable_stores({root: opts})  # before a cluster starts
            with client_for(client, root) as dask_client:
                refuse_unreachable(cat, dask_client)
                refuse_unreachable_stores({root: opts}, dask_client)
                batches = _batches(ids, shards_per_task, _workers(dask_client))
                futures = [
                    dask_client.submit(
                        verify_batch, handle, batch, opts, pure=False, retries=retries
                    )
                    for batch in batches
                ]
                try:
                    verdicts = gather(dask_client, futures, ref, progress)
                except KeyboardInterrupt as e:
                    with contextlib.suppress(Exception):
                        dask_client.cancel(futures)
                    raise interrupted(ref) from e
                except BaseException:
                    with contextlib.suppress(Exception):
                        dask_client.cancel(futures)
                    raise
        problems: list[Problem] = []
        shards = records = size = 0
        for batch in verdicts:
            for found, checked, nbytes in batch:
                problems.extend(found)
                shards += 1
                records += checked
                size += nbytes
        report = CatalogReport(dataset, shards, records, size, problems)
        if history:
            report.problems.extend(check_history(cat, dataset, root))
        return report


def verify_batch(
    handle: CatalogHandle, shard_ids: list[int], storage_options: Mapping[str, Any]
) -> list[tuple[list[Problem], int, int]]:
    """A task: verify these shards on this worker; per shard, its problems, records and bytes."""
    from ..reading.catalog import verify_shards

    return verify_shards(catalog_for(handle), shard_ids, storage_options)


def _batches(ids: list[int], most: int, workers: int) -> list[list[int]]:
    """``ids`` cut into runs of at most ``most``, and at least 4 runs per worker where there are enough."""
    size = max(1, min(most, len(ids) // (4 * max(1, workers))))
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def _workers(client: Any) -> int:
    with contextlib.suppress(Exception):
        return len(client.scheduler_info().get("workers", {}))
    return 1
