"""Dataset versions: record them at commit, name them with tags, list, compare and expire them.

Each function takes the session of the caller's transaction; the
:class:`~shardcat.catalog.SqlCatalog` opens it and documents the public methods.
docs/LIFECYCLE.md describes the model; :mod:`.visibility` defines what each
version sees, and every statement here takes its conditions from there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.orm import Session, aliased

from ..errors import KeyNotFoundError, VersionNotFoundError
from ..format.checksums import signed_key_hash
from . import visibility
from .changes import note
from .datasets import find_dataset
from .fields import drop_unseen_values
from .hashkeys import needs_key_text
from .models import BASE_GROUP, Dataset, DatasetTag, DatasetVersion, Record, Shard
from .results import VersionDiff, VersionInfo
from .retire import retire
from .session import NO_SYNC

__all__ = [
    "ExpireResult",
    "delete_keys",
    "diff_versions",
    "expire_versions",
    "list_versions",
    "lock_versions",
    "mark_fully_removed",
    "record_version",
    "remove_records",
    "resolve_version",
    "set_tag",
    "unreferenced_shards",
    "untag",
    "visible_shards",
]

_CHUNK = 500


@dataclass(frozen=True, slots=True)
class ExpireResult:
    """What :func:`expire_versions` did: versions dropped, shards no kept version references."""

    dataset: str
    expired: list[int]
    kept: list[int]
    retired_shards: list[str]


def resolve_version(session: Session, ds: Dataset, version: int | str | None) -> int:
    """The number of a kept version given as a number, a tag, or None (the latest).

    Raises
    ------
    VersionNotFoundError
        If the dataset has no such kept version or tag.
    """
    if version is None:
        return int(ds.version)
    if isinstance(version, str) and not version.isdigit():
        number = session.execute(
            select(DatasetTag.version).where(
                DatasetTag.dataset_id == ds.id, DatasetTag.name == version
            )
        ).scalar_one_or_none()
        if number is None:
            raise VersionNotFoundError(
                f"dataset {ds.name!r} has no tag {version!r}; list tags with `shardcat log {ds.name}`"
            )
        return int(number)
    number = int(version)
    kept = session.execute(
        select(DatasetVersion.number).where(
            DatasetVersion.dataset_id == ds.id, DatasetVersion.number == number
        )
    ).scalar_one_or_none()
    if kept is None:
        raise VersionNotFoundError(
            f"dataset {ds.name!r} has no version {number} (never made, or expired); "
            f"list the kept versions with `shardcat log {ds.name}`"
        )
    return number


def record_version(
    session: Session,
    dataset_id: int,
    number: int,
    *,
    job_id: int | None,
    operation: str,
    message: str | None,
    added: tuple[int, int],
    removed: tuple[int, int],
) -> None:
    """Insert the version row of a commit: ``added``/``removed`` are (records, bytes).

    The totals are the previous version's plus the change, read by the INSERT
    itself (one round trip), which returns the row: the version's manifest is
    made from it in this transaction without asking again (:mod:`.changes`).
    """
    prev = DatasetVersion.__table__.alias("prev")

    def previous(column: str) -> Any:
        last = (
            select(prev.c[column])
            .where(prev.c.dataset_id == dataset_id, prev.c.number < number)
            .order_by(prev.c.number.desc())
            .limit(1)
            .scalar_subquery()
        )
        return func.coalesce(last, 0)

    row = session.execute(
        insert(DatasetVersion)
        .values(
            dataset_id=dataset_id,
            number=number,
            job_id=job_id,
            operation=operation,
            records_added=added[0],
            bytes_added=added[1],
            records_removed=removed[0],
            bytes_removed=removed[1],
            message=message,
            total_records=previous("total_records") + (added[0] - removed[0]),
            total_bytes=previous("total_bytes") + (added[1] - removed[1]),
        )
        .returning(*DatasetVersion.__table__.c)
    ).one()
    note(session, dataset_id, number, row)


def remove_records(session: Session, where: str, params: dict[str, object]) -> tuple[int, int]:
    """Set ``removed_version = :v`` on live records matching ``where``; returns (records, bytes).

    ``where`` is SQL over ``records`` (unaliased, so it may correlate); it is
    combined with :func:`.visibility.not_removed`.
    """
    cond = f"{visibility.sql(visibility.not_removed, 'records')} AND {where}"
    count, size = session.execute(
        text(f"SELECT count(*), coalesce(sum(byte_length), 0) FROM records WHERE {cond}"), params
    ).one()
    if count:
        session.execute(
            text(f"UPDATE records SET removed_version = :v WHERE {cond}"),
            params,
            execution_options=NO_SYNC,
        )
    return int(count), int(size)


def mark_fully_removed(session: Session, dataset_id: int, version: int) -> None:
    """Committed shards left with no live record get ``removed_version`` (for expire and gc)."""
    session.execute(
        text(
            "UPDATE shards SET removed_version = :v WHERE dataset_id = :d "
            f"AND {visibility.sql(visibility.shard_live, 'shards')} AND NOT EXISTS "
            "(SELECT 1 FROM records r WHERE r.shard_id = shards.id "
            f"AND {visibility.sql(visibility.not_removed, 'records AS r')})"
        ),
        {"v": version, "d": dataset_id},
        execution_options=NO_SYNC,
    )


def delete_keys(
    session: Session, ds: Dataset, keys: Sequence[str], version: int, *, missing_ok: bool
) -> tuple[int, int]:
    """Remove the live records of these keys as of ``version``; returns (records, bytes).

    Raises
    ------
    KeyNotFoundError
        If a key has no live record and ``missing_ok`` is false (nothing changes).
    KeyTextUnavailableError
        The dataset keeps only key hashes (``keys="hash"``).
    """
    needs_key_text(ds.name, ds.key_mode, "delete_keys")
    unique = list(dict.fromkeys(keys))
    total = (0, 0)
    # The keys' records in committed shards; remove_records keeps the live ones.
    live = (
        "records.dataset_id = :d AND records.key_hash IN ({h}) AND records.key IN ({k}) "
        "AND records.shard_id IN (SELECT id FROM shards WHERE dataset_id = :d "
        f"AND {visibility.sql(visibility.committed, 'shards')})"
    )
    found: set[str] = set()
    for i in range(0, len(unique), _CHUNK):
        chunk = unique[i : i + _CHUNK]
        params: dict[str, object] = {"d": ds.id, "v": version}
        for j, key in enumerate(chunk):
            params[f"h{j}"] = signed_key_hash(key.encode("utf-8"))
            params[f"k{j}"] = key
        where = live.format(
            h=", ".join(f":h{j}" for j in range(len(chunk))),
            k=", ".join(f":k{j}" for j in range(len(chunk))),
        )
        found.update(
            session.execute(
                text(
                    "SELECT key FROM records WHERE "
                    f"{visibility.sql(visibility.not_removed, 'records')} AND {where}"
                ),
                params,
            ).scalars()
        )
        n, b = remove_records(session, where, params)
        total = (total[0] + n, total[1] + b)
    missing = [k for k in unique if k not in found]
    if missing and not missing_ok:
        shown = ", ".join(repr(k) for k in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise KeyNotFoundError(
            f"dataset {ds.name!r} has no live record for {len(missing)} key(s): {shown}{more}; "
            "nothing was deleted (pass missing_ok=True / --missing-ok to ignore them)"
        )
    mark_fully_removed(session, ds.id, version)
    return total


def list_versions(session: Session, dataset: str) -> list[VersionInfo]:
    """See :meth:`Catalog.log`: newest first, with their tags."""
    ds = find_dataset(session, dataset)
    tags: dict[int, list[str]] = {}
    for name, number in session.execute(
        select(DatasetTag.name, DatasetTag.version)
        .where(DatasetTag.dataset_id == ds.id)
        .order_by(DatasetTag.name)
    ):
        tags.setdefault(int(number), []).append(name)
    rows = session.execute(
        select(DatasetVersion)
        .where(DatasetVersion.dataset_id == ds.id)
        .order_by(DatasetVersion.number.desc())
    ).scalars()
    return [
        VersionInfo(
            number=int(r.number),
            created_at=r.created_at,
            operation=r.operation,
            job_id=r.job_id,
            records_added=int(r.records_added),
            records_removed=int(r.records_removed),
            bytes_added=int(r.bytes_added),
            bytes_removed=int(r.bytes_removed),
            message=r.message,
            total_records=int(r.total_records),
            total_bytes=int(r.total_bytes),
            tags=tuple(tags.get(int(r.number), ())),
        )
        for r in rows
    ]


def lock_versions(session: Session, ds: Dataset) -> None:
    """Queue behind commits, tags and expiries of the dataset (PostgreSQL: its row's lock).

    A tag and an expiry each read what the other changes (the kept versions, the
    tags): without a common lock, at READ COMMITTED, a tag could name a version an
    expiry running at the same moment dropped. ``FOR NO KEY UPDATE``, as a commit's
    version bump takes, so staging (``FOR KEY SHARE``) is never blocked. SQLite's
    write transactions are serial already.
    """
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            select(Dataset.id).where(Dataset.id == ds.id).with_for_update(key_share=True)
        )


def set_tag(session: Session, dataset: str, version: int | str, name: str, *, move: bool) -> int:
    """See :meth:`Catalog.tag`; returns the tagged version's number."""
    ds = find_dataset(session, dataset)
    lock_versions(session, ds)
    if not name or name.isdigit():
        raise ValueError(f"tag name {name!r} must be non-empty and not a number")
    number = resolve_version(session, ds, version)
    existing = session.get(DatasetTag, (ds.id, name))
    if existing is not None:
        if int(existing.version) == number:
            return number
        if not move:
            raise ValueError(
                f"tag {name!r} of dataset {ds.name!r} already names version {existing.version}; "
                "untag it first or pass move=True (--move)"
            )
        existing.version = number
    else:
        session.add(DatasetTag(dataset_id=ds.id, name=name, version=number))
    session.flush()
    note(session, ds.id)
    return number


def untag(session: Session, dataset: str, name: str) -> int:
    """See :meth:`Catalog.untag`; returns the version the tag named."""
    ds = find_dataset(session, dataset)
    # Under the lock tag() takes: a tag moved and removed at once would otherwise fail the
    # move's UPDATE with StaleDataError (found by the concurrent histories on PostgreSQL).
    lock_versions(session, ds)
    row = session.get(DatasetTag, (ds.id, name))
    if row is None:
        raise VersionNotFoundError(f"dataset {ds.name!r} has no tag {name!r}")
    number = int(row.version)
    session.delete(row)
    session.flush()
    note(session, ds.id)
    return number


def diff_versions(
    session: Session, dataset: str, old: int | str, new: int | str, *, keys: bool
) -> VersionDiff:
    """See :meth:`Catalog.diff`."""
    ds = find_dataset(session, dataset)
    needs_key_text(ds.name, ds.key_mode, "diff (keys added, removed, replaced)")
    v1 = resolve_version(session, ds, old)
    v2 = resolve_version(session, ds, new)
    lo, hi = min(v1, v2), max(v1, v2)
    # Samples (base records): a column group's change shows in `log`, not as keys added here.
    base = (
        "SELECT r.key, r.shard_id, r.byte_offset FROM records r JOIN shards s ON s.id = r.shard_id"
        f" WHERE r.dataset_id = :d AND r.group_id = {BASE_GROUP} AND "
    )
    # Only records that changed between the two versions: visible at hi and added after lo,
    # or visible at lo and removed by hi.
    after = {
        k: (sh, off)
        for k, sh, off in session.execute(
            text(
                f"{base}{visibility.sql(visibility.visible_at, 'records AS r', 'shards AS s', ':hi')}"
                f" AND {visibility.sql(visibility.added_after, 'shards AS s', ':lo')}"
            ),
            {"d": ds.id, "lo": lo, "hi": hi},
        )
    }
    before = {
        k: (sh, off)
        for k, sh, off in session.execute(
            text(
                f"{base}{visibility.sql(visibility.visible_at, 'records AS r', 'shards AS s', ':lo')}"
                f" AND {visibility.sql(visibility.gone_by, 'records AS r', ':hi')}"
            ),
            {"d": ds.id, "lo": lo, "hi": hi},
        )
    }
    added = sorted(k for k in after if k not in before)
    removed = sorted(k for k in before if k not in after)
    replaced = sorted(k for k in after if k in before and after[k] != before[k])
    if v1 > v2:  # asked backwards: what undoing the change would do
        added, removed = removed, added
    return VersionDiff(
        dataset=ds.name,
        old=v1,
        new=v2,
        added=len(added),
        removed=len(removed),
        replaced=len(replaced),
        added_keys=added if keys else None,
        removed_keys=removed if keys else None,
        replaced_keys=replaced if keys else None,
    )


def unreferenced_shards(session: Session, dataset_id: int) -> list[tuple[int, str]]:
    """Committed shards no kept version sees (id, url): none of their records is visible at any.

    A shard is referenced by version ``K`` iff ``added_version <= K`` and
    ``removed_version`` is NULL or greater than ``K`` (its last live record was
    removed at ``removed_version``).
    """
    s = aliased(Shard, name="s")
    v = aliased(DatasetVersion, name="v")
    referenced = (
        select(v.number)
        .where(v.dataset_id == s.dataset_id, visibility.shard_visible_at(s, v.number))
        .exists()
    )
    rows = session.execute(
        select(s.id, s.url).where(
            s.dataset_id == dataset_id,
            visibility.committed(s),
            ~visibility.shard_live(s),
            ~referenced,
        )
    )
    return [(int(i), str(u)) for i, u in rows]


def expire_versions(
    session: Session,
    dataset: str,
    *,
    keep_last: int,
    older_than: dt.timedelta | None,
    dry_run: bool,
) -> ExpireResult:
    """See :meth:`Catalog.expire`."""

    if keep_last < 1:
        raise ValueError(
            f"keep_last must be at least 1 (the latest is always kept), not {keep_last}"
        )
    ds = find_dataset(session, dataset)
    if not dry_run:
        lock_versions(session, ds)
    tagged = set(
        session.execute(select(DatasetTag.version).where(DatasetTag.dataset_id == ds.id)).scalars()
    )
    rows = session.execute(
        select(DatasetVersion.number, DatasetVersion.created_at)
        .where(DatasetVersion.dataset_id == ds.id)
        .order_by(DatasetVersion.number.desc())
    ).all()
    now = session.execute(select(func.now())).scalar_one()
    expired: list[int] = []
    for i, (number, created) in enumerate(rows):
        if i < keep_last or number in tagged or number == ds.version:
            continue
        if older_than is not None and _aware(created) > _aware(now) - older_than:
            continue
        expired.append(int(number))
    kept = [int(n) for n, _ in rows if n not in expired]
    if dry_run:
        # What retiring would find once the versions are gone, computed without changing anything.
        with session.begin_nested() as sp:
            _drop_versions(session, ds.id, expired)
            retired = unreferenced_shards(session, ds.id)
            sp.rollback()
        return ExpireResult(ds.name, expired, kept, sorted(u for _, u in retired))
    _drop_versions(session, ds.id, expired)
    retired = unreferenced_shards(session, ds.id)
    retire(session, [i for i, _ in retired])
    if expired:
        drop_unseen_values(session, ds.id)
        note(session, ds.id)
    # Rows of records no kept version sees stay while their shard is live: every lookup
    # already skips them (removed_version), and verify checks a live shard's footer against
    # all of its rows. They go with their shard when it is retired.
    return ExpireResult(ds.name, expired, kept, sorted(u for _, u in retired))


def _drop_versions(session: Session, dataset_id: int, numbers: list[int]) -> None:
    for i in range(0, len(numbers), _CHUNK):
        session.execute(
            delete(DatasetVersion).where(
                DatasetVersion.dataset_id == dataset_id,
                DatasetVersion.number.in_(numbers[i : i + _CHUNK]),
            ),
            execution_options=NO_SYNC,
        )


def _aware(t: dt.datetime) -> dt.datetime:
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def visible_shards(
    session: Session, dataset: str, version: int | str | None, *, with_groups: bool = False
) -> tuple[int, list[tuple[Shard, frozenset[int]]]]:
    """See :meth:`Catalog.visible_shards`: the version's number, its shards and hidden offsets.

    ``with_groups``: the column groups' shards too (a copy takes every file the
    version reads); else the base's only: a group's shards hold entries of
    samples, not samples (docs/GROUPS.md).
    """
    ds = find_dataset(session, dataset)
    number = resolve_version(session, ds, version) if version is not None else int(ds.version)
    conditions = [Shard.dataset_id == ds.id, visibility.shard_visible_at(Shard, number)]
    if not with_groups:
        # The base's shards: a column group's shards hold entries of samples, not samples
        # (readers join a group's records to them: catalog/group_rows.py, docs/GROUPS.md §5).
        # A group's shard holds its records only: its first record's group says (one seek).
        group_of = (
            select(Record.group_id).where(Record.shard_id == Shard.id).limit(1).scalar_subquery()
        )
        conditions.append(func.coalesce(group_of, BASE_GROUP) == BASE_GROUP)
    shards = list(
        session.execute(
            select(Shard).where(*conditions).order_by(Shard.shard_number, Shard.url, Shard.id)
        ).scalars()
    )
    hidden: dict[int, set[int]] = {}
    for shard_id, offset in session.execute(
        select(Record.shard_id, Record.byte_offset)
        .join(Shard, Shard.id == Record.shard_id)
        .where(Record.dataset_id == ds.id, visibility.hidden_at(Record, Shard, number))
    ):
        hidden.setdefault(int(shard_id), set()).add(int(offset))
    return number, [(s, frozenset(hidden.get(s.id, ()))) for s in shards]
