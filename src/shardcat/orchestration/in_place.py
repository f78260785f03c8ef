"""The job that registers data where it lies: one Dask task per file or group, one commit.

What indexing tars (:mod:`.index_tar`) and folders of files (:mod:`.index_files`)
share: the catalog and the stores are checked before a cluster starts, the
dataset is created if missing (rooted where the data is; removed again if
that first job fails), a job is begun, the caller's tasks run (each stages
what it registered under the job), and the client commits the job with the
manifest of what the successful tasks staged, in one transaction. Any
failure cancels the queued tasks and aborts the job: nothing is visible.
No file is ever written or deleted here.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import DatasetExistsError
from ..storage import redact
from .cluster import ClientChoice, client_for
from .gc import forget_failed_dataset
from .reach import refuse_unreachable, refuse_unreachable_stores
from .watch import JobRef, TaskProgressCallback, gather, interrupted

if TYPE_CHECKING:
    from distributed import Client, Future

    from ..reading import Catalog, CatalogHandle

__all__ = ["InPlaceTasks", "run_in_place"]

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class InPlaceTasks:
    """What a task submitter is given: the job, the catalog's handle, a unique key prefix."""

    job_id: int
    handle: CatalogHandle
    key: str
    """``shardcat-<what>-<job>-<run>``: a task's key is this and its number (job ids restart
    at 1 in every catalog, so the run's random part keeps two catalogs' tasks apart)."""

    def submit_each(
        self, client: Client, fn: Callable[..., Any], work: list[tuple[Any, ...]], retries: int
    ) -> list[Future[Any]]:
        """``fn(*args)`` for each ``args`` of ``work``, one task each, keyed by its number."""
        return [
            client.submit(fn, *args, key=f"{self.key}-{i}", retries=retries, pure=False)
            for i, args in enumerate(work)
        ]


def run_in_place(
    cat: Catalog,
    *,
    what: str,
    dataset: str,
    root: str,
    folders: Mapping[str, Mapping[str, Any]],
    client: ClientChoice,
    near: str,
    properties: Mapping[str, Any],
    submit: Callable[[Client, InPlaceTasks], list[Future[Any]]],
    manifest: Callable[[list[R]], Collection[str]],
    fields: Mapping[str, type] | None = None,
    progress: TaskProgressCallback | None = None,
    replace: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[int, list[R], float]:
    """Run one in-place indexing job; returns ``(job id, the tasks' results, seconds)``.

    Parameters
    ----------
    what:
        The job's name in its description, task keys and messages (``index-tar``).
    root:
        The dataset's root if this job creates it (without credentials).
    folders:
        Folder URL -> storage options: each must be reachable from the workers.
    near:
        A URL of the data: where a cluster started for the job runs.
    submit:
        Submits the tasks on the client; each stages what it indexed under the job.
    manifest:
        The URLs the commit makes visible, from the tasks' results.
    replace:
        The commit removes every record live before: the new version is exactly this job's.

    Raises
    ------
    Whatever a task or the commit raised (the job is aborted first).
    """
    refuse_unreachable_stores(dict(folders))  # before a cluster starts
    t0 = time.perf_counter()
    with client_for(client, near) as dask_client:
        refuse_unreachable(cat, dask_client)
        refuse_unreachable_stores(dict(folders), dask_client)
        try:
            cat.create_dataset(dataset, redact(root))
            created = True
        except DatasetExistsError:
            created = False
        job = cat.begin_job(dataset, description=f"shardcat.{what}", properties=dict(properties))
        ref = JobRef(what, dataset, job.id)
        tasks = InPlaceTasks(
            job.id, cat.handle(), f"shardcat-{what}-{job.id}-{uuid.uuid4().hex[:12]}"
        )
        futures: list[Future[Any]] = []
        try:
            if fields:  # a bad name or type aborts the job before any task
                cat.declare_fields(dataset, fields)
            try:
                futures = submit(dask_client, tasks)
                results: list[R] = gather(dask_client, futures, ref, progress)
            except BaseException:
                with contextlib.suppress(Exception):
                    dask_client.cancel(futures)
                raise
            cat.commit_job(
                job.id,
                shards=manifest(results),
                replace=replace,
                storage_options=storage_options,
            )
        except KeyboardInterrupt as e:
            with contextlib.suppress(Exception):
                cat.abort_job(job.id)
            raise interrupted(ref) from e
        except BaseException:
            with contextlib.suppress(Exception):
                cat.abort_job(job.id)
            if created:  # a failed first job leaves no empty dataset behind
                forget_failed_dataset(cat, dataset, job.id, dict(storage_options or {}))
            raise
    return job.id, results, time.perf_counter() - t0
