"""Column groups in the catalog: a group's commit, its drop, and the list (docs/GROUPS.md).

A group's records are ordinary records whose ``group_id`` names it (0: the
base). What a version sees stays :mod:`.visibility`'s one rule: adding a
group commits shards, fixing part of it removes the records it replaces,
dropping it removes its records, each at a new version. The statements here
embed that rule's text, as :mod:`.duplicates` does.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal, get_args

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ..errors import (
    CommitConflictError,
    EntryExistsError,
    GroupNotFoundError,
    Hint,
    KeyConflictError,
    UnknownKeysError,
)
from . import visibility
from .changes import note_group
from .datasets import find_dataset
from .duplicates import LIVE_ELSEWHERE, OF_JOB, STALE_COPY, refuse_repeats
from .models import BASE_GROUP, Dataset, Group, Job
from .results import GroupInfo
from .session import NO_SYNC
from .versions import mark_fully_removed, remove_records

__all__ = [
    "FOLDED",
    "GROUP_MODES",
    "ON_MISSING",
    "GroupInfo",
    "GroupMode",
    "GroupWrite",
    "OnMissing",
    "apply_group",
    "assign_groups",
    "check_group_write",
    "drop_group",
    "fold_groups",
    "group_duplicate_hint",
    "list_groups",
    "live_group",
    "no_group_to_replace",
    "no_such_group",
    "shard_groups",
]

GroupMode = Literal["append", "replace"]
GROUP_MODES: tuple[str, ...] = get_args(GroupMode)
OnMissing = Literal["error", "skip"]
ON_MISSING: tuple[str, ...] = get_args(OnMissing)

SKIPPED_KEYS = "skipped_keys"
"""The job property a group's commit records: how many of its samples had no base record."""

SKIPPED_DUPLICATES = "skipped_duplicates"
"""The job property an ``on_duplicate="skip"`` commit records: its records left out, their keys
live in the dataset already."""

FOLDED = "folded"
"""The job property a fold's commit records: group name -> its records folded into the base."""

_SHOWN = 20
"""Keys or names an error message lists (the exception holds up to 1000)."""


@dataclass(frozen=True, slots=True)
class GroupWrite:
    """What a job's commit does with its records as a group's (``add_entries``)."""

    name: str
    mode: GroupMode = "append"
    """``append``: keys new to the group; ``replace``: the group's records of these keys are replaced."""
    on_missing: OnMissing = "error"
    """A key with no live base record: an error (UnknownKeysError) or left out, counted."""
    replace_entries: bool = False
    """An entry name the sample has in its base or an older group is replaced instead of refused."""


_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")
"""A group's name: part of its shards' file names (``<dataset>.<group>-...``)."""


def check_group_write(group: GroupWrite) -> None:
    """Refuse a group write's options that mean nothing (ValueError), before any job."""
    if not isinstance(group.name, str) or not _NAME.fullmatch(group.name):
        raise ValueError(
            f"a group's name is 1-100 letters, digits, '.', '_' or '-' (not first), "
            f"not {group.name!r}"
        )
    if group.mode not in GROUP_MODES:
        raise ValueError(f"mode must be one of {GROUP_MODES}, not {group.mode!r}")
    if group.on_missing not in ON_MISSING:
        raise ValueError(f"on_missing must be one of {ON_MISSING}, not {group.on_missing!r}")


# A job's records: staged, not hidden (as duplicates._NEW).
_NEW = (
    "ns.job_id = :job AND ns.state = 'staged' "
    f"AND {visibility.sql(visibility.not_removed, 'records AS n')}"
)
# The key of ``records`` (unaliased, so remove_records can correlate) has a live base record.
_HAS_BASE = (
    "EXISTS (SELECT 1 FROM records b JOIN shards bs ON bs.id = b.shard_id "
    "WHERE b.dataset_id = records.dataset_id AND b.key_hash = records.key_hash "
    f"AND b.key = records.key AND b.group_id = {BASE_GROUP} "
    f"AND {visibility.sql(visibility.live, 'records AS b', 'shards AS bs')})"
)
_UNKNOWN = text(
    f"SELECT records.key FROM records JOIN shards ns ON ns.id = records.shard_id "
    f"WHERE ns.job_id = :job AND ns.state = 'staged' "
    f"AND {visibility.sql(visibility.not_removed, 'records')} AND NOT {_HAS_BASE} "
    "ORDER BY records.key LIMIT 1000"
)
# Entry names of the job's records that a live record of the same key in another group
# (or the base) has too, with that group's id.
_SAME_NAMES = text(
    "SELECT DISTINCT n.key, ne.name, o.group_id FROM records n "
    "JOIN shards ns ON ns.id = n.shard_id "
    "JOIN layout_entries ne ON ne.layout_id = n.layout_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash "
    "AND o.key = n.key AND o.group_id <> n.group_id "
    "JOIN shards s ON s.id = o.shard_id "
    "JOIN layout_entries oe ON oe.layout_id = o.layout_id AND oe.name = ne.name "
    f"WHERE {_NEW} AND {visibility.sql(visibility.live, 'records AS o', 'shards AS s')} "
    "LIMIT 1000"
)


def no_group_to_replace(dataset: str, group: str, outcome: str) -> GroupNotFoundError:
    """The error for ``mode="replace"`` of a group ``dataset`` does not have; ``outcome``:
    what became of the job (checked before it starts, and again in its commit)."""
    return GroupNotFoundError(
        f"dataset {dataset!r} has no group {group!r} to replace entries of; {outcome}",
        hint=Hint(
            python="add it first: add_entries(..., mode='append')",
            cli="add it first: shardcat add-entries ... (without --mode replace)",
        ),
    )


def group_duplicate_hint(group: str) -> Hint:
    """What to do about keys an ``append`` to ``group`` gives entries the group has already."""
    return Hint(
        python=f"group {group!r} has entries of these keys already: pass mode='replace' to "
        "replace them (a new version), or leave those samples out",
        cli=f"group {group!r} has entries of these keys already: pass --mode replace to "
        "replace them (a new version), or leave those files out",
    )


def apply_group(
    session: Session, dataset: Dataset, job: Job, group: GroupWrite, version: int
) -> tuple[int, int]:
    """Make the job's staged records the group's, checked; returns (group id, keys skipped).

    Runs in the commit's transaction, under the dataset's lock, before the
    duplicate check (which then compares keys within the group).

    Raises
    ------
    GroupNotFoundError
        ``mode="replace"`` of a group the dataset does not have.
    UnknownKeysError
        Keys without a live base record, and ``on_missing="error"``.
    EntryExistsError
        Entry names the samples have already (and not ``replace_entries``),
        or that a newer group holds.
    """
    row = live_group(session, dataset.id, group.name)
    if row is None:
        if group.mode == "replace":
            raise no_group_to_replace(dataset.name, group.name, f"job {job.id} was not committed")
        row = Group(dataset_id=dataset.id, name=group.name, added_version=version)
        session.add(row)
        session.flush()
        note_group(session, dataset.id, version, group.name)
    gid = int(row.id)
    params: dict[str, object] = {"job": job.id, "v": version, "d": dataset.id, "g": gid}
    session.execute(
        text(f"UPDATE records SET group_id = :g WHERE {OF_JOB}"), params, execution_options=NO_SYNC
    )
    skipped = 0
    unknown = list(session.execute(_UNKNOWN, params).scalars())
    if unknown and group.on_missing == "error":
        shown = ", ".join(repr(k) for k in unknown[:_SHOWN])
        more = f" and more (at least {len(unknown)})" if len(unknown) > _SHOWN else ""
        raise UnknownKeysError(
            f"job {job.id} adds entries to group {group.name!r} for keys dataset "
            f"{dataset.name!r} does not have: {shown}{more}; the job was not committed",
            keys=unknown,
            hint=Hint(
                python="check the keys, or pass on_missing='skip' to leave those samples out",
                cli="check the keys, or pass --on-missing skip to leave those samples out",
            ),
        )
    if unknown:
        # A key twice in the job is an error even where it would be skipped (and counted once).
        refuse_repeats(session, dataset, job)
        skipped, _ = remove_records(session, f"{OF_JOB} AND NOT {_HAS_BASE}", params)
    clashes = session.execute(_SAME_NAMES, params).all()
    newer = [c for c in clashes if int(c.group_id) > gid]
    if newer or (clashes and not group.replace_entries):
        bad = newer or clashes
        names = sorted({c.name for c in bad})
        keys = sorted({c.key for c in bad})
        if newer:
            why = (
                f"a group added after {group.name!r} holds them (the newest group's entry is the one "
                "read): write the fix into that group"
            )
            hint = None
        else:
            why = "the samples have them already"
            hint = Hint(
                python="pass replace_entries=True to replace them from the new version on, "
                "or name the entries differently",
                cli="pass --replace-entries to replace them from the new version on, "
                "or name the entries differently",
            )
        raise EntryExistsError(
            f"job {job.id} writes entries {names[:_SHOWN]} into group {group.name!r} of dataset "
            f"{dataset.name!r}, but {why} (e.g. keys {keys[:5]}); the job was not committed",
            names=names,
            keys=keys,
            hint=hint,
        )
    return gid, skipped


def live_group(session: Session, dataset_id: int, name: str) -> Group | None:
    """The dataset's live group of that name, if it has one."""
    return session.execute(
        select(Group).where(
            Group.dataset_id == dataset_id, Group.name == name, Group.dropped_version.is_(None)
        )
    ).scalar_one_or_none()


def assign_groups(
    session: Session,
    dataset: Dataset,
    job: Job,
    groups: Mapping[str, Collection[str]],
    version: int,
) -> None:
    """Make the records of the job's staged shards named here their groups' (a copy's, a reindex's).

    ``groups``: group name -> URLs of the job's staged shards that hold its
    records, in the order the groups were created (a later group's entry wins
    a name both hold: the order is kept). A name without a live group gets a
    new one, added at ``version``. Unlike :func:`apply_group`, nothing is
    checked here but what the duplicate check then checks: the records are
    copies (or re-registrations) of records that were a group's already.
    """
    for name, urls in groups.items():
        row = live_group(session, dataset.id, name)
        if row is None:
            row = Group(dataset_id=dataset.id, name=name, added_version=version)
            session.add(row)
            session.flush()
            note_group(session, dataset.id, version, name)
        listed = sorted(urls)
        for i in range(0, len(listed), 500):
            chunk = listed[i : i + 500]
            names = ", ".join(f":u{j}" for j in range(len(chunk)))
            session.execute(
                text(
                    "UPDATE records SET group_id = :g WHERE shard_id IN (SELECT id FROM shards "
                    f"WHERE job_id = :job AND state = 'staged' AND url IN ({names}))"
                ),
                {"g": row.id, "job": job.id, **{f"u{j}": u for j, u in enumerate(chunk)}},
                execution_options=NO_SYNC,
            )


def shard_groups(session: Session, dataset_id: int) -> dict[str, str]:
    """The dataset's committed shards that hold a group's records: shard URL -> the group's name.

    A shard holds one group's records (or the base's): its first record says
    which, found through the primary key ``(shard_id, byte_offset)``.
    """
    first = (
        "(SELECT r.group_id FROM records r WHERE r.shard_id = s.id ORDER BY r.byte_offset LIMIT 1)"
    )
    return {
        str(url): str(name)
        for url, name in session.execute(
            text(
                f"SELECT s.url, g.name FROM shards s JOIN groups g ON g.id = {first} "
                f"WHERE s.dataset_id = :d AND {visibility.sql(visibility.committed, 'shards AS s')}"
            ),
            {"d": dataset_id},
        )
    }


def drop_group(session: Session, dataset: str, name: str, message: str | None) -> int:
    """See :meth:`Catalog.drop_group`: a version that removes the group's records."""
    from .commit import shardless_version  # commit imports this module

    ds = find_dataset(session, dataset)
    row = live_group(session, ds.id, name)
    if row is None:
        raise no_such_group(session, ds, name)
    group = row

    def drop(version: int) -> tuple[int, int]:
        # Read again under the dataset's lock (its version row, taken before this runs): on
        # PostgreSQL (READ COMMITTED) another drop may have committed since the read above.
        session.refresh(group)
        if group.dropped_version is not None:
            raise no_such_group(session, ds, name)
        params: dict[str, object] = {"d": ds.id, "v": version, "g": group.id}
        removed = remove_records(
            session,
            f"records.dataset_id = :d AND records.group_id = :g AND {LIVE_ELSEWHERE}",
            params,
        )
        group.dropped_version = version
        note_group(session, ds.id, version, name, dropped=True)
        session.flush()  # before the version's manifest is built from the rows
        mark_fully_removed(session, ds.id, version)
        return removed

    return shardless_version(
        session, ds, "drop_group", "drop-group", message, drop, properties={"group": name}
    )


def no_such_group(session: Session, ds: Dataset, name: str) -> GroupNotFoundError:
    """The error for a group ``ds`` has no live one of: the version that dropped it, the live ones."""
    groups = list_groups(session, ds.id)
    live = ", ".join(repr(g.name) for g in groups if g.dropped_version is None) or "none"
    dropped = [g.dropped_version for g in groups if g.name == name and g.dropped_version]
    was = f" (it was dropped at version {max(dropped)})" if dropped else ""
    return GroupNotFoundError(
        f"dataset {ds.name!r} has no group {name!r}{was}; its live groups: {live}",
        hint=Hint(
            python="check the name: Catalog.groups(dataset) lists every group",
            cli=f"check the name: shardcat groups {ds.name} lists every group",
        ),
    )


def fold_groups(
    session: Session, dataset: Dataset, job: Job, ids: Collection[int], version: int
) -> dict[str, tuple[int, int]]:
    """A fold's commit (``compact(fold_groups=)``): the groups' records leave, the groups are dropped.

    The job's records are the base's rewritten with these groups' entries
    merged in (docs/GROUPS.md §6). Before the rewrite rule runs (stale
    copies hidden, the copied records replaced), this refuses what a fold
    cannot settle by itself: a folded group changed after the job's base
    version (its entries would be lost or come back), or a key whose group
    entries the job folded got a new base record meanwhile (its copy would
    be hidden and the group's entries dropped with the group). Then every
    live record of the groups is removed at ``version`` and each group's
    ``dropped_version`` set. Returns group name -> (records, bytes) removed.

    Raises
    ------
    CommitConflictError
        A group was dropped (or folded) after the job began.
    KeyConflictError
        Another commit changed a folded group's records, or the base record
        of a key with entries in one, after the job began.
    """
    listed = ", ".join(str(int(i)) for i in sorted(set(ids)))
    rows = session.execute(
        select(Group).where(Group.dataset_id == dataset.id, Group.id.in_(sorted(set(ids))))
    ).scalars()
    groups = sorted(rows, key=lambda g: g.id)
    gone = [g for g in groups if g.dropped_version is not None]
    if gone or len(groups) != len(set(ids)):
        named = ", ".join(f"{g.name!r} (version {g.dropped_version})" for g in gone) or "a group"
        raise CommitConflictError(
            f"job {job.id} folds groups of dataset {dataset.name!r}, but {named} was dropped "
            "after it began; the job was not committed: run compact again"
        )
    params: dict[str, object] = {"job": job.id, "d": dataset.id, "v": version}
    base = {**params, "base": job.base_version}
    changed = list(
        session.execute(
            text(
                "SELECT DISTINCT r.key FROM records r JOIN shards s ON s.id = r.shard_id "
                f"WHERE r.dataset_id = :d AND r.group_id IN ({listed}) "
                f"AND {visibility.sql(visibility.committed, 'shards AS s')} AND "
                f"{visibility.sql(visibility.changed_since, 'records AS r', 'shards AS s', ':base')} "
                "ORDER BY r.key LIMIT 1000"
            ),
            base,
        ).scalars()
    )
    what = "entries in the groups it folds"
    if not changed:
        # The groups are as they were: a copy carrying their entries must go live.
        changed = list(
            session.execute(
                text(
                    f"SELECT records.key FROM records WHERE {STALE_COPY} AND EXISTS "
                    "(SELECT 1 FROM records o JOIN shards s ON s.id = o.shard_id "
                    "WHERE o.dataset_id = records.dataset_id AND o.key_hash = records.key_hash "
                    f"AND o.key = records.key AND o.group_id IN ({listed}) AND "
                    f"{visibility.sql(visibility.live, 'records AS o', 'shards AS s')}) "
                    "ORDER BY records.key LIMIT 1000"
                ),
                base,
            ).scalars()
        )
        what = "base records of samples with entries in the groups it folds"
    if changed:
        shown = ", ".join(repr(k) for k in changed[:_SHOWN])
        raise KeyConflictError(
            f"job {job.id} folds groups {[g.name for g in groups]} of dataset {dataset.name!r}, "
            f"but another commit changed {what} after it began (at version {job.base_version}), "
            f"e.g. keys {shown}; the job was not committed: run compact again",
            keys=changed,
        )
    folded: dict[str, tuple[int, int]] = {}
    for g in groups:
        folded[g.name] = remove_records(
            session,
            f"records.dataset_id = :d AND records.group_id = {int(g.id)} AND {LIVE_ELSEWHERE}",
            params,
        )
        g.dropped_version = version
        note_group(session, dataset.id, version, g.name, dropped=True)
    session.flush()  # before the version's manifest is built from the rows
    return folded


def list_groups(session: Session, dataset_id: int) -> list[GroupInfo]:
    """Every group the dataset was given, oldest first, with its live records and bytes."""
    live = visibility.sql(visibility.live, "records AS r", "shards AS s")
    counts = {
        int(gid): (int(n), int(b))
        for gid, n, b in session.execute(
            text(
                "SELECT r.group_id, count(*), coalesce(sum(r.byte_length), 0) FROM records r "
                "JOIN shards s ON s.id = r.shard_id "
                f"WHERE r.dataset_id = :d AND r.group_id <> {BASE_GROUP} AND {live} "
                "GROUP BY r.group_id"
            ),
            {"d": dataset_id},
        )
    }
    rows = session.execute(
        select(Group).where(Group.dataset_id == dataset_id).order_by(Group.id)
    ).scalars()
    return [
        GroupInfo(g.name, g.id, g.added_version, g.dropped_version, *counts.get(g.id, (0, 0)))
        for g in rows
    ]
