"""Jobs: open them, look them up, and commit or abort them, all at once or not at all.

Each function takes the session of the caller's transaction; the
:class:`~shardcat.catalog.SqlCatalog` opens it and documents the public methods.
A job is ``open`` until it ends ``committed`` or ``aborted``; one guard,
:func:`unsettled_job`, decides what a commit or an abort of a job that
already ended does (nothing, if it ended that way: a retried barrier task
is harmless).

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

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import Exists, delete, exists, func, or_, select, text, update
from sqlalchemy.orm import Session

from .._types import ON_DUPLICATE, OnDuplicate
from ..errors import (
    CommitConflictError,
    DatasetExistsError,
    JobNotFoundError,
    KeyConflictError,
)
from . import visibility
from .datasets import find_dataset
from .models import Dataset, Job, Record, RecordField, Shard
from .register import duplicate_error
from .results import JobInfo
from .rows import job_info
from .session import NO_SYNC
from .versions import delete_keys, mark_fully_removed, record_version, remove_records

__all__ = [
    "SUPERSEDED",
    "VersionMoved",
    "abort_job",
    "begin_job",
    "bump_version",
    "commit",
    "commit_delete",
    "commit_job",
    "delete_records",
    "drop_shards",
    "duplicate_keys",
    "find_job",
    "has_committed",
    "job_summary",
    "list_jobs",
    "retire",
    "stageable_job",
    "unsettled_job",
]

Ending = Literal["committed", "aborted"]

SUPERSEDED = "superseded"
"""The job property a rewrite's commit records: how many of its records it left out."""


class VersionMoved(CommitConflictError):
    """Another commit took the dataset's version first: the commit may be retried as a whole."""


# Why a job that ended one way cannot end the other: (asked, ended) -> what to do instead.
_ENDED_OTHERWISE: dict[tuple[Ending, str], str] = {
    ("committed", "aborted"): "was aborted; it cannot be committed: start a new job",
    ("aborted", "committed"): (
        "is committed; remove its shards with remove_shard() instead of aborting it"
    ),
}

# What each version sees is visibility.py's; these statements embed its rules as text.
_S_COMMITTED = visibility.sql(visibility.committed, "shards AS s")
# A job's records are its staged ones but those the commit hides (``hidden=``: already removed).
_NEW = (
    "ns.job_id = :job AND ns.state = 'staged' "
    f"AND {visibility.sql(visibility.not_removed, 'records AS n')}"
)
_OTHER = (
    "o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash AND o.key = n.key "
    "AND (o.shard_id <> n.shard_id OR o.byte_offset <> n.byte_offset) "
    f"AND {visibility.sql(visibility.not_removed, 'records AS o')} "
    f"AND ({_S_COMMITTED} OR (s.job_id = :job AND s.state = 'staged'))"
)
# Keys of the job that repeat within the job (always an error, whatever on_duplicate says).
_WITHIN_JOB = text(
    "SELECT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id WHERE "
    f"{_NEW} GROUP BY n.key_hash, n.key HAVING count(*) > 1 LIMIT 1001"
)
# Keys of the job whose record another commit added or removed after the job began.
_CHANGED_SINCE = text(
    "SELECT DISTINCT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash AND o.key = n.key "
    f"JOIN shards s ON s.id = o.shard_id WHERE {_NEW} AND {_S_COMMITTED} "
    f"AND {visibility.sql(visibility.changed_since, 'records AS o', 'shards AS s', ':base')} "
    "LIMIT 1001"
)
# The job's staged records: `records` unaliased so remove_records can correlate on it.
_OF_JOB = "records.shard_id IN (SELECT id FROM shards WHERE job_id = :job AND state = 'staged')"
# The dataset's records in committed shards (remove_records keeps the live ones).
_LIVE_ELSEWHERE = (
    "records.shard_id IN (SELECT id FROM shards WHERE dataset_id = :d "
    f"AND {visibility.sql(visibility.committed, 'shards')})"
)
_SAME_KEY_IN_JOB = (
    f"EXISTS (SELECT 1 FROM records n JOIN shards ns ON ns.id = n.shard_id WHERE {_NEW} "
    "AND n.dataset_id = records.dataset_id AND n.key_hash = records.key_hash "
    "AND n.key = records.key)"
)
# The committed records (`o`, its shard `s`) of the key of `records`' row.
_OF_KEY = (
    "FROM records o JOIN shards s ON s.id = o.shard_id WHERE s.dataset_id = :d "
    "AND o.dataset_id = records.dataset_id AND o.key_hash = records.key_hash "
    "AND o.key = records.key"
)
# The key has a live record.
_SAME_KEY_LIVE = (
    f"EXISTS (SELECT 1 {_OF_KEY} AND "
    f"{visibility.sql(visibility.live, 'records AS o', 'shards AS s')})"
)
# A rewritten record (``rewrite=``) goes live only while the key's live record is one that was
# live at the job's base version: the record the job read and copied, unchanged since.
_UNCHANGED_SINCE_BASE = (
    f"EXISTS (SELECT 1 {_OF_KEY} AND "
    f"{visibility.sql(visibility.live_since, 'records AS o', 'shards AS s', ':base')})"
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


def duplicate_keys(session: Session, job_id: int) -> list[str]:
    """Keys of the job's staged records that repeat in the job or among committed records."""
    pg = session.get_bind().dialect.name == "postgresql"
    query = _DUPLICATES_PG if pg else _DUPLICATES
    return sorted(session.execute(query, {"job": job_id}).scalars().all())


def bump_version(session: Session, dataset: Dataset, expected: int | None) -> int:
    """The optimistic step: ``UPDATE datasets SET version = version + 1 [WHERE version = v]``.

    With ``expected`` the UPDATE is conditional on it; zero rows updated means
    another commit won: :class:`VersionMoved` (the caller retries the whole
    transaction, a bounded number of times, unless it asked for ``expected``).
    Without it the UPDATE is unconditional and takes the version its winner
    left, in one statement.
    """
    # Only the version goes stale here: id and name stay loaded (expiring the whole row
    # made the next access of dataset.id reload all of it, one more round trip).
    session.expire(dataset, ["version"])
    ds_id = dataset.id
    # The UPDATE takes the row's FOR NO KEY UPDATE lock (so staging's foreign-key locks do
    # not conflict): on PostgreSQL concurrent commits of one dataset queue here and, at READ
    # COMMITTED, each re-reads the row its winner left instead of losing the UPDATE and
    # retrying (8 writers appending together starved one past COMMIT_ATTEMPTS when the
    # version was compared). SQLite has no row locks: BEGIN IMMEDIATE queues writers already.
    stmt = update(Dataset).where(Dataset.id == ds_id)
    if expected is not None:
        stmt = stmt.where(Dataset.version == expected)
    version = session.execute(
        stmt.values(version=Dataset.version + 1).returning(Dataset.version),
        execution_options=NO_SYNC,
    ).scalar_one_or_none()
    if version is None:
        current = "its version" if expected is None else f"version {expected}"
        raise VersionMoved(f"dataset {dataset.name!r} moved past {current} during this commit")
    return int(version)


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
    on_duplicate: OnDuplicate = "error",
    operation: str | None = None,
    message: str | None = None,
    hidden: Mapping[str, Collection[int]] | None = None,
    added: tuple[int, int] | None = None,
    keys_unique: bool = False,
    rewrite: bool = False,
) -> int:
    """Make the job's staged shards visible as a new dataset version; returns its number.

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
        Overwrite: every record live before is removed in the new version
        (older versions still see them), so the latest version is exactly
        this job's shards.
    shards:
        The job's manifest: the URLs of exactly the shards to commit (what
        the tasks that succeeded reported). Staged shards of the job that it
        does not name — left by an attempt that was killed or lost — are
        retired, not committed. ``None`` commits every staged shard.
    require_empty:
        Fail with DatasetExistsError if the dataset has committed shards
        (``mode="create"``), decided under the lock.
    on_duplicate:
        A key of the job that is live in the dataset: ``"error"``
        (DuplicateKeyError), ``"replace"`` (the new version points at the
        job's record) or ``"skip"`` (the job's record stays invisible).
    hidden:
        Staged shard URL -> byte offsets of its records the new version does
        not serve: added and removed in it, as skipped records are (a copy
        of a dataset whose later versions deleted or replaced keys). They
        take no part in the duplicate check.
    operation, message:
        What the version row records (default ``write`` or ``overwrite``).
    rewrite:
        The job's records are copies of records live at its base version
        (compaction). Decided in this transaction: a copy goes live, in
        place of the record it copies, only if its key's live record is
        still one that was live at the base version; the others (their key
        was deleted, replaced or rewritten since) are added and removed in
        the new version, so nothing deleted or replaced comes back; the
        job's ``properties["superseded"]`` counts them. Takes the place of
        ``on_duplicate``.
    added:
        The (records, bytes) the job adds, when the caller knows them without
        asking: one shard it just staged, committed without ``hidden``,
        ``replace`` or a lenient ``on_duplicate`` (they can only fail the
        commit, never drop a record). ``None`` counts them in SQL.

    Raises
    ------
    CommitConflictError
        If the dataset moved past ``expected_version``, the job is no longer
        open, or a shard of the manifest is not staged in the job.
    VersionMoved
        If another commit took the version first (retry the transaction).
    KeyConflictError
        ``on_duplicate`` is replace or skip and another commit changed some of
        the job's keys after the job began.
    DatasetExistsError
        ``require_empty`` and the dataset has committed shards.
    DuplicateKeyError
        If a key would appear twice in the dataset (with ``rewrite``: twice
        in the job); nothing changes.
    """
    if rewrite and job.base_version is None:
        raise ValueError(f"job {job.id} has no base version: it cannot commit a rewrite")
    if on_duplicate not in ON_DUPLICATE:
        raise ValueError(f"on_duplicate must be one of {ON_DUPLICATE}, not {on_duplicate!r}")
    try:
        version = bump_version(session, dataset, expected_version)
    except VersionMoved:
        if expected_version is None:
            raise
        raise _moved(session, dataset, job, expected_version, replace) from None
    if require_empty and has_committed(session, dataset.id):
        raise DatasetExistsError(
            f"dataset {dataset.name!r} got records from another job while job {job.id} ran; "
            f"job {job.id} was not committed",
            hint=DatasetExistsError.APPEND_OR_OVERWRITE,
        )
    if shards is not None:
        _keep_only(session, dataset, job, set(shards))
    params: dict[str, object] = {"v": version, "d": dataset.id, "job": job.id}
    if hidden:
        _hide(session, dataset, job, hidden, version)
    removed = (0, 0)
    if replace:
        removed = remove_records(session, f"records.dataset_id = :d AND {_LIVE_ELSEWHERE}", params)
    hidden_copies = skipped = 0
    if rewrite:
        hidden_copies, removed = _rewrite(session, dataset, job, params, removed)
        check = False
    elif check is None and keys_unique:
        check = has_committed(session, dataset.id)
    elif check is None:
        # Both conditions in one round trip.
        staged = (
            select(func.count(Shard.id))
            .where(Shard.job_id == job.id, Shard.state == "staged")
            .scalar_subquery()
        )
        check = bool(
            session.execute(select(or_(staged > 1, _committed_exists(dataset.id)))).scalar()
        )
    if check:
        removed, skipped = _resolve_duplicates(session, dataset, job, on_duplicate, params, removed)
    if added is None:
        counted = session.execute(
            text(
                f"SELECT count(*), coalesce(sum(byte_length), 0) FROM records WHERE {_OF_JOB} "
                f"AND {visibility.sql(visibility.not_removed, 'records')}"
            ),
            params,
        ).one()
        added = (int(counted[0]), int(counted[1]))
    session.execute(
        update(Shard)
        .where(Shard.job_id == job.id, Shard.state == "staged")
        .values(state="committed", committed_at=func.now(), added_version=version),
        execution_options=NO_SYNC,
    )
    if removed[0] or hidden_copies or skipped or hidden:
        # A shard left without a live record (removed here, or all of its own records
        # hidden or skipped) gets its removed_version, so expire can retire it.
        mark_fully_removed(session, dataset.id, version)
        # A shard of this job added and removed in this same version is read by no
        # version at all: it is retired now (gc removes its file), not left committed.
        never_read = session.execute(
            select(Shard.id).where(
                Shard.dataset_id == dataset.id,
                Shard.job_id == job.id,
                Shard.added_version == version,
                Shard.removed_version == version,
            )
        ).scalars()
        retire(session, list(never_read))
    ended: dict[str, Any] = {"state": "committed", "version": version, "finished_at": func.now()}
    if rewrite:
        # What the commit decided stays on the job's row (a later expiry may drop the version's).
        ended["properties"] = {**(job.properties or {}), SUPERSEDED: hidden_copies}
    done = session.execute(
        update(Job).where(Job.id == job.id, Job.state == "open").values(**ended),
        execution_options=NO_SYNC,
    )
    if done.rowcount != 1:  # type: ignore[attr-defined]
        raise CommitConflictError(
            f"job {job.id} of dataset {dataset.name!r} was committed or aborted by another process"
        )
    record_version(
        session,
        dataset.id,
        version,
        job_id=job.id,
        operation=operation or ("overwrite" if replace else "write"),
        message=message,
        added=added,
        removed=removed,
    )
    return version


def _resolve_duplicates(
    session: Session,
    dataset: Dataset,
    job: Job,
    on_duplicate: OnDuplicate,
    params: dict[str, object],
    removed: tuple[int, int],
) -> tuple[tuple[int, int], int]:
    """Apply ``on_duplicate`` to the job's keys that are live already.

    Returns the records/bytes removed (``removed`` plus those it replaced) and
    how many of the job's own records it skipped.

    Raises
    ------
    DuplicateKeyError
        Keys repeat within the job, or (``"error"``) are live in the dataset.
    KeyConflictError
        (``"replace"``/``"skip"``) Another commit changed some of the keys after the job began.
    """
    dups = duplicate_keys(session, job.id)
    if not dups:
        return removed, 0
    where = f"in job {job.id} of dataset {dataset.name!r}"
    # Keys twice within the job first: no on_duplicate policy can resolve those.
    within = sorted(session.execute(_WITHIN_JOB, {"job": job.id}).scalars())
    if within:
        raise duplicate_error(within, f"{where} (within the job)")
    if on_duplicate == "error":
        raise duplicate_error(dups, f"{where} (against committed shards)", live=True)
    if job.base_version is not None:
        changed = sorted(
            session.execute(_CHANGED_SINCE, {"job": job.id, "base": job.base_version}).scalars()
        )
        if changed:
            shown = ", ".join(repr(k) for k in changed[:10])
            more = f" and {len(changed) - 10} more" if len(changed) > 10 else ""
            raise KeyConflictError(
                f"job {job.id} would {on_duplicate} {len(changed)} key(s) of dataset "
                f"{dataset.name!r} that another commit changed after the job began (at version "
                f"{job.base_version}): {shown}{more}; the job was not committed: rerun it "
                "against the current version",
                keys=changed[:1000],
            )
    if on_duplicate == "replace":
        gone = remove_records(
            session,
            f"records.dataset_id = :d AND {_LIVE_ELSEWHERE} AND {_SAME_KEY_IN_JOB}",
            params,
        )
        return (removed[0] + gone[0], removed[1] + gone[1]), 0
    # skip: the job's own records of those keys are added and removed in the same version.
    skipped, _ = remove_records(session, f"{_OF_JOB} AND {_SAME_KEY_LIVE}", params)
    return removed, skipped


def _rewrite(
    session: Session,
    dataset: Dataset,
    job: Job,
    params: dict[str, object],
    removed: tuple[int, int],
) -> tuple[int, tuple[int, int]]:
    """Apply ``commit(rewrite=True)``; returns the copies hidden and the records/bytes removed.

    Raises
    ------
    DuplicateKeyError
        A key repeats within the job.
    """
    within = sorted(session.execute(_WITHIN_JOB, {"job": job.id}).scalars())
    if within:
        raise duplicate_error(
            within, f"in job {job.id} of dataset {dataset.name!r} (within the job)"
        )
    at_base = {**params, "base": job.base_version}
    # First the copies of records another commit removed since the base version: they stay out.
    stale, _ = remove_records(session, f"{_OF_JOB} AND NOT {_UNCHANGED_SINCE_BASE}", at_base)
    # Then what the remaining copies replace: exactly the records they copied.
    gone = remove_records(
        session, f"records.dataset_id = :d AND {_LIVE_ELSEWHERE} AND {_SAME_KEY_IN_JOB}", params
    )
    return stale, (removed[0] + gone[0], removed[1] + gone[1])


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


def _hide(
    session: Session,
    dataset: Dataset,
    job: Job,
    hidden: Mapping[str, Collection[int]],
    version: int,
) -> None:
    """Mark records of the job's staged shards removed at ``version`` (see ``commit(hidden=)``)."""
    ids = {
        url: shard_id
        for url, shard_id in session.execute(
            select(Shard.url, Shard.id).where(
                Shard.job_id == job.id, Shard.state == "staged", Shard.url.in_(list(hidden))
            )
        )
    }
    missing = sorted(set(hidden) - set(ids))
    if missing:
        raise CommitConflictError(
            f"job {job.id} of dataset {dataset.name!r}: {len(missing)} shard(s) given records to "
            f"hide are not staged in the job ({', '.join(missing[:5])}); the job was not committed"
        )
    for url, offsets in hidden.items():
        wanted = sorted(set(offsets))
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            done = session.execute(
                update(Record)
                .where(Record.shard_id == ids[url], Record.byte_offset.in_(chunk))
                .values(removed_version=version),
                execution_options=NO_SYNC,
            )
            if done.rowcount != len(chunk):  # type: ignore[attr-defined]
                raise CommitConflictError(
                    f"job {job.id} of dataset {dataset.name!r}: shard {url} has no record at "
                    f"some of the {len(chunk)} offsets given to hide; the job was not committed"
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
            execution_options=NO_SYNC,
        )


def has_committed(session: Session, dataset_id: int) -> bool:
    """Whether the dataset has any committed shard (else there is nothing to collide with)."""
    return bool(session.execute(select(_committed_exists(dataset_id))).scalar())


def _committed_exists(dataset_id: int) -> Exists:
    return exists().where(Shard.dataset_id == dataset_id, visibility.committed(Shard))


def delete_records(session: Session, shard_ids: Sequence[int]) -> None:
    """Delete the records of these shards (records have no cascading foreign key)."""
    ids = list(shard_ids)
    for i in range(0, len(ids), 500):
        session.execute(
            delete(Record).where(Record.shard_id.in_(ids[i : i + 500])), execution_options=NO_SYNC
        )
        # Declared fields' values are keyed like records and go with them.
        session.execute(
            delete(RecordField).where(RecordField.shard_id.in_(ids[i : i + 500])),
            execution_options=NO_SYNC,
        )


def drop_shards(s: Session, shard_ids: list[int]) -> None:
    """Delete shard rows and their records outright (a retried task's stale staging)."""
    if not shard_ids:
        return
    delete_records(s, shard_ids)
    s.execute(delete(Shard).where(Shard.id.in_(shard_ids)), execution_options=NO_SYNC)


def commit_delete(
    session: Session,
    dataset: str,
    keys: Sequence[str],
    *,
    missing_ok: bool,
    message: str | None,
) -> int:
    """See :meth:`Catalog.delete_keys`: a job with no shards whose version removes the keys."""
    ds = find_dataset(session, dataset)
    version = bump_version(session, ds, None)
    job = Job(
        dataset_id=ds.id,
        state="committed",
        description="delete_keys",
        base_version=version - 1,
        version=version,
        finished_at=func.now(),
    )
    session.add(job)
    session.flush()
    removed = delete_keys(session, ds, keys, version, missing_ok=missing_ok)
    record_version(
        session,
        ds.id,
        version,
        job_id=job.id,
        operation="delete",
        message=message,
        added=(0, 0),
        removed=removed,
    )
    return version
