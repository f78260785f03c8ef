"""The commit: a job's staged shards become a new dataset version, all at once or not at all.

Every change to what lookups see goes through :func:`commit`, inside one
transaction (the session of the caller's):

1. ``UPDATE datasets SET version = version + 1 [WHERE version = :expected]
   RETURNING version`` (:func:`bump_version`): takes the dataset's row lock
   (PostgreSQL) so concurrent commits to one dataset queue here; with
   ``expected`` it is the optimistic check of a writer that read the dataset
   at that version.
2. With a manifest (the shard URLs the job's successful tasks reported),
   staged shards it does not name are retired: a killed attempt's leftovers
   are never committed, whatever names they have.
3. Duplicate check (:mod:`.duplicates`): a key of the job's shards that
   appears again in the job or in a committed shard fails the commit with
   DuplicateKeyError, unless ``on_duplicate`` says otherwise.
4. The job's staged shards flip to ``committed`` and the job records the
   new version.

:func:`commit_delete` is the same step for a version that only removes keys,
:func:`commit_field_updates` for one that only sets declared fields' values.
The job rows (open, stageable, ended) are :mod:`.jobs`'.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Literal

from sqlalchemy import func, or_, select, text, update
from sqlalchemy.orm import Session

from .._types import ON_DUPLICATE, OnDuplicate
from ..errors import (
    CommitConflictError,
    DatasetExistsError,
    DuplicateKeyError,
    KeyConflictError,
)
from . import visibility
from .datasets import find_dataset
from .duplicates import (
    KEY_IN_JOB,
    LIVE_ELSEWHERE,
    OF_JOB,
    committed_exists,
    has_committed,
    resolve_duplicates,
    resolve_rewrite,
)
from .fields import (
    FIELD_UPDATE,
    CarriedValues,
    FieldValues,
    carry_values,
    declare_fields,
    declared_fields,
    field_updates,
    update_field_values,
    updated_since,
)
from .groups import (
    FOLDED,
    SKIPPED_DUPLICATES,
    SKIPPED_KEYS,
    GroupWrite,
    apply_group,
    assign_groups,
    fold_groups,
    group_duplicate_hint,
)
from .hashkeys import GROUPS_OPERATION, needs_key_text
from .models import BASE_GROUP, Dataset, Job, Record, Shard
from .register import DUPLICATE_HINT
from .results import FieldsUpdate
from .retire import retire
from .session import NO_SYNC
from .versions import delete_keys, mark_fully_removed, record_version, remove_records

__all__ = [
    "SUPERSEDED",
    "VersionMoved",
    "bump_version",
    "commit",
    "commit_delete",
    "commit_field_updates",
    "shardless_version",
]

SUPERSEDED = "superseded"
"""The job property a rewrite's commit records: how many of its records it left out."""


class VersionMoved(CommitConflictError):
    """Another commit took the dataset's version first: the commit may be retried as a whole."""


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
    group: GroupWrite | None = None,
    groups: Mapping[str, Collection[str]] | None = None,
    fold: Collection[int] | None = None,
    carried: CarriedValues | None = None,
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
        Overwrite: every base record live before is removed in the new
        version (older versions still see them), so the latest version's base
        is exactly this job's shards; column groups keep their entries of the
        keys the new base has, and lose the others (docs/GROUPS.md).
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
        ``on_duplicate``. A record it rewrites whose field values an
        ``update_fields`` set after the base version fails the commit
        (KeyConflictError): the copy took the values when it was staged.
    group:
        The job's records are a column group's (``add_entries``,
        docs/GROUPS.md): :func:`.groups.apply_group` makes them the group's
        and checks their keys and entry names; then ``group.mode`` takes the
        place of ``on_duplicate`` (``append``: error, ``replace``: replace),
        within the group.
    groups:
        Group name -> URLs of staged shards of the job that hold that
        group's records (a copy of a dataset with groups, a reindex of group
        shards), in the order the groups were created: the records become
        the groups' (:func:`.groups.assign_groups`), a group the dataset
        lacks is created at the new version, and the duplicate check then
        compares keys within each group.
    carried:
        A copy's (``copy_dataset``): the source's declared fields and the values its
        latest version reads, by the job's shard URL; declared here and stored as set
        at the new version (:func:`.fields.carry_values`), so its manifest lists them.
    fold:
        With ``rewrite``: ids of column groups whose entries the job's
        copies carry merged into the base's (``compact(fold_groups=)``,
        :func:`.groups.fold_groups`): checked unchanged since the job's base
        version, then their records are removed and the groups dropped in
        the new version; the job's ``properties["folded"]`` counts them.
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
        the job's keys after the job began; or, with ``rewrite``, field values
        of records it rewrites were updated after its base version.
    DatasetExistsError
        ``require_empty`` and the dataset has committed shards.
    DuplicateKeyError
        If a key would appear twice in the dataset (with ``rewrite``: twice
        in the job); nothing changes.
    """
    if rewrite and job.base_version is None:
        raise ValueError(f"job {job.id} has no base version: it cannot commit a rewrite")
    if fold and not rewrite:
        raise ValueError("a fold of column groups is a rewrite: pass rewrite=True with fold")
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
    if groups or group is not None:  # a group's records are matched to the base's by key text
        needs_key_text(dataset.name, dataset.key_mode, GROUPS_OPERATION)
    if groups:
        assign_groups(session, dataset, job, groups, version)
    if carried is not None:  # a copy's: its records take the source's field values
        carry_values(session, dataset, job, carried, version)
    removed = (0, 0)
    if replace:
        # Groups belong to keys (docs/GROUPS.md): the job's records are the new base; the
        # groups keep their entries of the keys it has, and lose those of the keys it lost.
        removed = remove_records(
            session,
            f"records.dataset_id = :d AND {LIVE_ELSEWHERE} "
            f"AND (records.group_id = {BASE_GROUP} OR NOT {KEY_IN_JOB})",
            params,
        )
    hidden_copies = skipped = 0
    folded: dict[str, tuple[int, int]] = {}
    if fold:
        # Before the rewrite rule hides stale copies: a fold refuses those that carry entries.
        needs_key_text(dataset.name, dataset.key_mode, GROUPS_OPERATION)
        folded = fold_groups(session, dataset, job, fold, version)
        removed = (
            removed[0] + sum(n for n, _ in folded.values()),
            removed[1] + sum(b for _, b in folded.values()),
        )
    if group is not None:
        if rewrite or replace:
            raise ValueError("a group's commit cannot also rewrite or overwrite")
        _, skipped = apply_group(session, dataset, job, group, version)
        on_duplicate = "replace" if group.mode == "replace" else "error"
        check = True
    if rewrite:
        hidden_copies, removed = resolve_rewrite(session, dataset, job, params, removed)
        check = False
        base = job.base_version  # not None: checked on entry
        if base is not None and updated_since(session, dataset.id, version, base):
            raise KeyConflictError(
                f"job {job.id} of dataset {dataset.name!r} rewrites records whose field values "
                f"were updated (update_fields) after its base version {job.base_version}: its "
                "copies may hold the values from before; the job was not committed: rerun it"
            )
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
            session.execute(select(or_(staged > 1, committed_exists(dataset.id)))).scalar()
        )
    if check:
        try:
            removed, dropped = resolve_duplicates(
                session, dataset, job, on_duplicate, params, removed
            )
        except DuplicateKeyError as exc:
            if group is not None and exc.hint is DUPLICATE_HINT:
                # Keys the group has: add_entries has no on_duplicate; its mode decides.
                exc.hint = group_duplicate_hint(group.name)
            raise
        skipped += dropped
    if added is None:
        counted = session.execute(
            text(
                f"SELECT count(*), coalesce(sum(byte_length), 0) FROM records WHERE {OF_JOB} "
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
        if fold:
            ended["properties"][FOLDED] = {name: n for name, (n, _) in folded.items()}
    elif group is not None:
        ended["properties"] = {**(job.properties or {}), "group": group.name, SKIPPED_KEYS: skipped}
    elif skipped:  # on_duplicate="skip": what the write's summary reports as left out
        ended["properties"] = {**(job.properties or {}), SKIPPED_DUPLICATES: skipped}
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
    return shardless_version(
        session,
        ds,
        "delete_keys",
        "delete",
        message,
        lambda version: delete_keys(session, ds, keys, version, missing_ok=missing_ok),
    )


def commit_field_updates(
    session: Session,
    dataset: str,
    values: FieldValues,
    *,
    on_missing: Literal["error", "skip"],
    message: str | None,
    declare: Mapping[str, type] | None = None,
) -> FieldsUpdate:
    """See :meth:`Catalog.update_fields`: a job with no shards whose version sets the values."""
    ds = find_dataset(session, dataset)
    if declare:
        declare_fields(session, dataset, declare)
    updates = field_updates(declared_fields(session, ds.id), ds.name, values)
    done: list[FieldsUpdate] = []

    def change(version: int) -> tuple[int, int]:
        done.append(update_field_values(session, ds, updates, version, on_missing=on_missing))
        return (0, 0)

    shardless_version(session, ds, "update_fields", FIELD_UPDATE, message, change)
    result = done[-1]
    # What the version changed stays on its job's row (`shardcat jobs`), as a rewrite's does.
    session.execute(
        update(Job)
        .where(Job.dataset_id == ds.id, Job.version == result.version)
        .values(
            properties={
                "fields": list(result.fields),
                "keys": result.keys,
                "values": result.values,
                "unset": result.unset,
                "skipped": result.skipped,
            }
        ),
        execution_options=NO_SYNC,
    )
    return result


def shardless_version(
    session: Session,
    ds: Dataset,
    description: str,
    operation: str,
    message: str | None,
    change: Callable[[int], tuple[int, int]],
    properties: dict[str, Any] | None = None,
) -> int:
    """A version that only removes records: a committed job without shards, ``change`` its work.

    ``change(version)`` removes what the version removes and returns (records, bytes).
    """
    version = bump_version(session, ds, None)
    job = Job(
        dataset_id=ds.id,
        state="committed",
        description=description,
        base_version=version - 1,
        version=version,
        finished_at=func.now(),
        properties=properties,
    )
    session.add(job)
    session.flush()
    removed = change(version)
    record_version(
        session,
        ds.id,
        version,
        job_id=job.id,
        operation=operation,
        message=message,
        added=(0, 0),
        removed=removed,
    )
    return version
