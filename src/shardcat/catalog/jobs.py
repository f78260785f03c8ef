"""Jobs: open them, look them up, and end them committed or aborted.

Each function takes the session of the caller's transaction; the
:class:`~shardcat.catalog.SqlCatalog` opens it and documents the public methods.
A job is ``open`` until it ends ``committed`` or ``aborted``; one guard,
:func:`unsettled_job`, decides what a commit or an abort of a job that
already ended does (nothing, if it ended that way: a retried barrier task
is harmless). The commit itself is :mod:`.commit`'s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from .._types import OnDuplicate
from ..errors import CommitConflictError, JobNotFoundError
from .commit import commit
from .datasets import find_dataset
from .fields import CarriedValues
from .groups import GroupWrite
from .models import Dataset, Job, Shard
from .results import JobInfo
from .retire import retire
from .rows import job_info
from .session import NO_SYNC

__all__ = [
    "abort_job",
    "begin_job",
    "commit_job",
    "find_job",
    "job_summary",
    "list_jobs",
    "stageable_job",
    "unsettled_job",
]

Ending = Literal["committed", "aborted"]

# Why a job that ended one way cannot end the other: (asked, ended) -> what to do instead.
_ENDED_OTHERWISE: dict[tuple[Ending, str], str] = {
    ("committed", "aborted"): "was aborted; it cannot be committed: start a new job",
    ("aborted", "committed"): (
        "is committed; remove its shards with remove_shard() instead of aborting it"
    ),
}


def begin_job(
    session: Session,
    dataset: str,
    *,
    description: str | None,
    properties: dict[str, Any] | None,
) -> JobInfo:
    """See :meth:`Catalog.begin_job`."""
    ds = find_dataset(session, dataset)
    row = Job(
        dataset_id=ds.id,
        state="open",
        description=description,
        properties=properties,
        base_version=ds.version,
    )
    session.add(row)
    session.flush()
    session.refresh(row)
    return job_info(row, ds.name)


def find_job(
    session: Session, job_id: int, *, catalog: str, lock: Literal["share", "update"] | None = None
) -> Job:
    """The job's row; ``catalog`` (its display URL) names the catalog in the error.

    ``lock`` (PostgreSQL; SQLite's write transactions are serialised
    already): read the row ``FOR SHARE`` (staging a shard under the job) or
    ``FOR UPDATE`` (ending it), so a commit or abort waits for registrations
    in flight and they wait for it: see :func:`stageable_job`.

    Raises
    ------
    JobNotFoundError
        If there is no such job.
    """
    if lock is None:
        row = session.get(Job, job_id)
    else:
        row = session.get(
            Job,
            job_id,
            with_for_update={"read": lock == "share"},
            populate_existing=True,
        )
    if row is None:
        raise JobNotFoundError(f"no job {job_id} in catalog {catalog}")
    return row


def stageable_job(session: Session, job_id: int, dataset: Dataset, *, catalog: str) -> Job:
    """The job's row, if shards of ``dataset`` may still be staged under it (it is open).

    Raises
    ------
    JobNotFoundError
        If there is no such job.
    ValueError
        If the job belongs to another dataset.
    CommitConflictError
        If the job has ended.
    """
    # Shared lock until this registration commits: a commit of the job (which locks the row
    # for update) then sees its shard, and retires it unless the manifest names it. Without
    # it, on PostgreSQL a late attempt's shard staged between the commit's statements was
    # committed beside the manifest's, its keys twice.
    row = find_job(session, job_id, catalog=catalog, lock="share")
    if row.dataset_id != dataset.id:
        raise ValueError(f"job {job_id} belongs to another dataset than {dataset.name!r}")
    if row.state != "open":
        raise CommitConflictError(
            f"job {job_id} is {row.state}; shards can only be added to an open job"
        )
    return row


def unsettled_job(session: Session, job_id: int, ending: Ending, *, catalog: str) -> Job | None:
    """The job's row if it is open and may end as ``ending``; None if it already ended so.

    A commit of a committed job, or an abort of an aborted one, is a retry
    that changes nothing.

    Raises
    ------
    JobNotFoundError
        If there is no such job.
    CommitConflictError
        If the job already ended the other way.
    """
    # Locked for update: registrations in flight finish first, later ones wait and then
    # find the job ended (stageable_job).
    row = find_job(session, job_id, catalog=catalog, lock="update")
    if row.state == "open":
        return row
    if row.state == ending:
        return None
    raise CommitConflictError(f"job {job_id} {_ENDED_OTHERWISE[ending, row.state]}")


def job_summary(session: Session, job_id: int, *, catalog: str) -> JobInfo:
    """See :meth:`Catalog.job`."""
    row = find_job(session, job_id, catalog=catalog)
    name = session.execute(select(Dataset.name).where(Dataset.id == row.dataset_id)).scalar_one()
    shards, records = session.execute(
        select(func.count(Shard.id), func.coalesce(func.sum(Shard.record_count), 0)).where(
            Shard.job_id == job_id, Shard.state != "deleted"
        )
    ).one()
    return job_info(row, name, int(shards), int(records))


def list_jobs(session: Session, dataset: str, state: str | None) -> list[JobInfo]:
    """See :meth:`Catalog.jobs`."""
    ds = find_dataset(session, dataset)
    q = select(Job).where(Job.dataset_id == ds.id)
    if state is not None:
        q = q.where(Job.state == state)
    rows = list(session.execute(q.order_by(Job.id)).scalars())
    counts = {
        job_id: (int(n), int(records))
        for job_id, n, records in session.execute(
            select(
                Shard.job_id,
                func.count(Shard.id),
                func.coalesce(func.sum(Shard.record_count), 0),
            )
            .where(Shard.dataset_id == ds.id, Shard.state != "deleted")
            .group_by(Shard.job_id)
        )
    }
    return [job_info(r, ds.name, *counts.get(r.id, (0, 0))) for r in rows]


def commit_job(
    session: Session,
    job_id: int,
    *,
    catalog: str,
    expected_version: int | None,
    replace: bool,
    shards: Collection[str] | None,
    require_empty: bool,
    on_duplicate: OnDuplicate = "error",
    operation: str | None = None,
    message: str | None = None,
    hidden: Mapping[str, Collection[int]] | None = None,
    rewrite: bool = False,
    group: GroupWrite | None = None,
    groups: Mapping[str, Collection[str]] | None = None,
    fold: Collection[int] | None = None,
    carried: CarriedValues | None = None,
) -> bool:
    """See :meth:`Catalog.commit_job`: :func:`commit` unless the job is committed already.

    Returns whether this call committed it.
    """
    row = unsettled_job(session, job_id, "committed", catalog=catalog)
    if row is not None:
        commit(
            session,
            session.get_one(Dataset, row.dataset_id),
            row,
            expected_version=expected_version,
            replace=replace,
            shards=shards,
            require_empty=require_empty,
            on_duplicate=on_duplicate,
            operation=operation,
            message=message,
            hidden=hidden,
            rewrite=rewrite,
            group=group,
            groups=groups,
            fold=fold,
            carried=carried,
        )
    return row is not None


def abort_job(session: Session, job_id: int, *, catalog: str) -> None:
    """See :meth:`Catalog.abort_job`: retire the job's staged shards and mark it aborted."""
    if unsettled_job(session, job_id, "aborted", catalog=catalog) is None:
        return
    staged = list(
        session.execute(
            select(Shard.id).where(Shard.job_id == job_id, Shard.state == "staged")
        ).scalars()
    )
    retire(session, staged)
    session.execute(
        update(Job).where(Job.id == job_id).values(state="aborted", finished_at=func.now()),
        execution_options=NO_SYNC,
    )
