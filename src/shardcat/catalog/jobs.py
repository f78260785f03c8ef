"""Commits: how staged shards become visible, all at once or not at all.

Every change to what lookups see goes through :func:`commit`, inside one
transaction:

1. ``UPDATE datasets SET version = version + 1 [WHERE version = :expected]
   RETURNING version``: takes the dataset's row lock (PostgreSQL) so
   concurrent commits to one dataset queue here; with ``expected`` it is
   the optimistic check of a writer that read the dataset at that version.
2. With a manifest (the shard URLs the job's successful tasks reported),
   staged shards it does not name are retired: a killed attempt's leftovers
   are never committed, whatever names they have.
3. Duplicate check: a key of the job's shards that appears again in the job
   or in a committed shard fails the commit with DuplicateKeyError.
4. The job's staged shards flip to ``committed`` and the job records the
   new version.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import delete, exists, func, select, text, update
from sqlalchemy.orm import Session

from ..errors import CommitConflictError, DatasetExistsError
from .models import Dataset, Job, Record, Shard
from .register import duplicate_error

__all__ = [
    "commit",
    "delete_records",
    "drop_shards",
    "duplicate_keys",
    "has_committed",
    "retire",
]

_NO_SYNC = {"synchronize_session": False}

_NEW = "ns.job_id = :job AND ns.state = 'staged'"
_OTHER = (
    "o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash AND o.key = n.key "
    "AND (o.shard_id <> n.shard_id OR o.byte_offset <> n.byte_offset) "
    "AND (s.state = 'committed' OR (s.job_id = :job AND s.state = 'staged'))"
)
# SQLite plans this join as index probes by itself.
_DUPLICATES = text(
    "SELECT DISTINCT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash "
    f"JOIN shards s ON s.id = o.shard_id WHERE {_NEW} AND {_OTHER} LIMIT 1001"
)
# PostgreSQL, right after a bulk load (no statistics yet), may hash-join the
# whole records table instead; LATERAL ... LIMIT 1 pins one index probe per key.
_DUPLICATES_PG = text(
    "SELECT DISTINCT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "CROSS JOIN LATERAL (SELECT 1 FROM records o JOIN shards s ON s.id = o.shard_id "
    f"WHERE {_OTHER} LIMIT 1) AS hit WHERE {_NEW} LIMIT 1001"
)


def duplicate_keys(session: Session, job_id: int) -> list[str]:
    """Keys of the job's staged records that repeat in the job or among committed records."""
    pg = session.get_bind().dialect.name == "postgresql"
    query = _DUPLICATES_PG if pg else _DUPLICATES
    return sorted(session.execute(query, {"job": job_id}).scalars().all())


def commit(
    session: Session,
    dataset: Dataset,
    job: Job,
    *,
    expected_version: int | None = None,
    check: bool | None = None,
    replace: bool = False,
    shards: Collection[str] | None = None,
    require_empty: bool = False,
) -> int:
    """Make the job's staged shards visible; returns the dataset's new version.

    Parameters
    ----------
    session:
        The unit of work (its transaction is the commit's).
    dataset, job:
        The rows; ``job`` must be open.
    expected_version:
        Fail unless the dataset is still at this version.
    check:
        Run the duplicate-key check. ``None`` (the default) skips it only when
        it cannot find anything: one staged shard (its keys were checked in
        memory at registration) and nothing committed in the dataset, decided
        under the lock so a concurrent first commit is not missed.
    replace:
        First retire every committed shard of the dataset (``deleted``, records
        removed): the job's shards become the whole dataset.
    shards:
        The job's manifest: the URLs of exactly the shards to commit (what
        the tasks that succeeded reported). Staged shards of the job that it
        does not name — left by an attempt that was killed or lost — are
        retired, not committed. ``None`` commits every staged shard.
    require_empty:
        Fail with DatasetExistsError if the dataset has committed shards
        (``mode="create"``), decided under the lock.

    Raises
    ------
    CommitConflictError
        If the dataset moved past ``expected_version``, the job is no longer
        open, or a shard of the manifest is not staged in the job.
    DatasetExistsError
        ``require_empty`` and the dataset has committed shards.
    DuplicateKeyError
        If a key would appear twice in the dataset; nothing changes.
    """
    stmt = update(Dataset).where(Dataset.id == dataset.id)
    if expected_version is not None:
        stmt = stmt.where(Dataset.version == expected_version)
    version = session.execute(
        stmt.values(version=Dataset.version + 1).returning(Dataset.version),
        execution_options=_NO_SYNC,
    ).scalar_one_or_none()
    if version is None:
        raise _moved(session, dataset, job, expected_version, replace)
    if require_empty and has_committed(session, dataset.id):
        raise DatasetExistsError(
            f"dataset {dataset.name!r} got records from another job while job {job.id} ran; "
            f"job {job.id} was not committed: write with mode='append' to add to them "
            "or mode='overwrite' to replace them"
        )
    if shards is not None:
        _keep_only(session, dataset, job, set(shards))
    if replace:
        retired = list(
            session.execute(
                select(Shard.id).where(Shard.dataset_id == dataset.id, Shard.state == "committed")
            ).scalars()
        )
        retire(session, retired)
    if check is None:
        staged = session.execute(
            select(func.count(Shard.id)).where(Shard.job_id == job.id, Shard.state == "staged")
        ).scalar_one()
        check = staged > 1 or has_committed(session, dataset.id)
    if check:
        dups = duplicate_keys(session, job.id)
        if dups:
            raise duplicate_error(
                dups,
                f"in job {job.id} of dataset {dataset.name!r} (within the job or against committed shards)",
            )
    session.execute(
        update(Shard)
        .where(Shard.job_id == job.id, Shard.state == "staged")
        .values(state="committed", committed_at=func.now()),
        execution_options=_NO_SYNC,
    )
    done = session.execute(
        update(Job)
        .where(Job.id == job.id, Job.state == "open")
        .values(state="committed", version=version, finished_at=func.now()),
        execution_options=_NO_SYNC,
    )
    if done.rowcount != 1:  # type: ignore[attr-defined]
        raise CommitConflictError(
            f"job {job.id} of dataset {dataset.name!r} was committed or aborted by another process"
        )
    return int(version)


def _moved(
    session: Session, dataset: Dataset, job: Job, expected: int | None, replace: bool
) -> CommitConflictError:
    """The error for a dataset that moved past ``expected``: who moved it, and what to do."""
    current = session.execute(select(Dataset.version).where(Dataset.id == dataset.id)).scalar_one()
    last = session.execute(
        select(Job.id)
        .where(Job.dataset_id == dataset.id, Job.state == "committed")
        .order_by(Job.version.desc())
        .limit(1)
    ).scalar_one_or_none()
    by = f", last by job {last}" if last is not None else ""
    what = (
        "an overwrite replaces only the data it saw when it started, so it was not committed"
        if replace
        else "it was not committed"
    )
    return CommitConflictError(
        f"dataset {dataset.name!r} changed while job {job.id} ran: another job committed "
        f"meanwhile (version {current}{by}; expected {expected}); {what}: rerun it to apply it "
        "to the current data"
    )


def _keep_only(session: Session, dataset: Dataset, job: Job, manifest: set[str]) -> None:
    """Retire the job's staged shards the manifest does not name; fail on any it names but lacks."""
    staged = session.execute(
        select(Shard.id, Shard.url).where(Shard.job_id == job.id, Shard.state == "staged")
    ).all()
    retire(session, [row.id for row in staged if row.url not in manifest])
    missing = manifest - {row.url for row in staged}
    if missing:
        shown = ", ".join(sorted(missing)[:5])
        raise CommitConflictError(
            f"job {job.id} of dataset {dataset.name!r}: {len(missing)} shard(s) its tasks reported "
            f"are not staged in the catalog ({shown}); the job was not committed: rerun it"
        )


def retire(session: Session, shard_ids: Sequence[int]) -> None:
    """Shards become ``deleted`` tombstones (their records go; gc removes their files)."""
    ids = list(shard_ids)
    delete_records(session, ids)
    for i in range(0, len(ids), 500):
        session.execute(
            update(Shard)
            .where(Shard.id.in_(ids[i : i + 500]))
            .values(state="deleted", deleted_at=func.now()),
            execution_options=_NO_SYNC,
        )


def has_committed(session: Session, dataset_id: int) -> bool:
    """Whether the dataset has any committed shard (else there is nothing to collide with)."""
    return bool(
        session.execute(
            select(exists().where(Shard.dataset_id == dataset_id, Shard.state == "committed"))
        ).scalar()
    )


def delete_records(session: Session, shard_ids: Sequence[int]) -> None:
    """Delete the records of these shards (records have no cascading foreign key)."""
    ids = list(shard_ids)
    for i in range(0, len(ids), 500):
        session.execute(
            delete(Record).where(Record.shard_id.in_(ids[i : i + 500])), execution_options=_NO_SYNC
        )


def drop_shards(s: Session, shard_ids: list[int]) -> None:
    """Delete shard rows and their records outright (a retried task's stale staging)."""
    if not shard_ids:
        return
    delete_records(s, shard_ids)
    s.execute(delete(Shard).where(Shard.id.in_(shard_ids)), execution_options=_NO_SYNC)
