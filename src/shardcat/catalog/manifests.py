"""A dataset's history as manifests (format/manifest.py): derived from the catalog, and rebuilt into it.

What a version added and removed is in the catalog's rows: shards carry the
version that added them, records the version that removed them. A
transaction that makes a version or changes tags or expiry notes it on its
session (:func:`.changes.note`); once it commits, the read layer writes the matching
files beside the shards (:mod:`.changes`, ``shardcat.reading.history``). Going back,
:func:`rebuild` turns manifests and the shards' footers into the same rows.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, insert, or_, select, text, update
from sqlalchemy.orm import Session

from ..errors import CatalogError, DatasetExistsError
from ..format.manifest import (
    AddedShard,
    FieldValues,
    ManifestError,
    Refs,
    RemovedRecords,
    VersionManifest,
    absolute_url,
    relative_path,
)
from . import visibility
from .changes import HistoryChange, noted_dataset, noted_groups, noted_row
from .datasets import find_dataset
from .deferred_indexes import key_indexes_deferred
from .fields import CARRIES_VALUES, VALUE_ROWS, declare_kinds, declared_fields
from .models import (
    Dataset,
    DatasetTag,
    DatasetVersion,
    Group,
    Job,
    Record,
    RecordField,
    Shard,
)
from .register import PreparedShard
from .session import NO_SYNC
from .shards import insert_shard

__all__ = [
    "DatasetHistory",
    "Replay",
    "build_changes",
    "build_manifest",
    "build_refs",
    "committed_paths",
    "kept_versions",
    "rebuild",
    "replay",
]


def kept_versions(session: Session, dataset_id: int) -> list[int]:
    return [
        int(n)
        for n in session.execute(
            select(DatasetVersion.number)
            .where(DatasetVersion.dataset_id == dataset_id)
            .order_by(DatasetVersion.number)
        ).scalars()
    ]


@dataclass(frozen=True, slots=True)
class DatasetHistory:
    """What a commit changed in one dataset's history, as files to write after it."""

    name: str
    root: str
    dataset_id: int
    manifests: tuple[VersionManifest, ...]
    refs: Refs | None
    """The tags and expired versions, when the commit changed them."""


def build_changes(
    session: Session, changes: Sequence[HistoryChange], keeps: Callable[[str], bool]
) -> list[DatasetHistory]:
    """The manifests of what this transaction changed, built inside it (before it commits).

    In the transaction, the rows are exactly what the commit made: no later
    commit or expiry can change them first. ``keeps(root)``: whether that
    root keeps a history at all.
    """
    by_dataset: dict[int, list[int]] = {}
    for c in changes:
        by_dataset.setdefault(c.dataset_id, []).append(c.version)
    out = []
    for dataset_id, versions in by_dataset.items():
        known = noted_dataset(session, dataset_id)
        if known is None:
            found = session.execute(
                select(Dataset.name, Dataset.root_url).where(Dataset.id == dataset_id)
            ).first()
            if found is None:
                continue
            known = (str(found[0]), str(found[1]))
        name, root = known
        if not keeps(root):
            continue
        built = (_made_here(session, dataset_id, v, root) for v in versions if v)
        out.append(
            DatasetHistory(
                name,
                root,
                dataset_id,
                tuple(m for m in built if m is not None),
                build_refs(session, dataset_id) if 0 in versions else None,
            )
        )
    return out


def _made_here(
    session: Session, dataset_id: int, version: int, root: str
) -> VersionManifest | None:
    """The manifest of a version this transaction made: its row and groups were noted as made."""
    row = noted_row(session, dataset_id, version)
    if row is None:
        return build_manifest(session, dataset_id, version, root=root)
    groups = noted_groups(session, dataset_id, version)
    return build_manifest(session, dataset_id, version, root=root, row=row, groups=groups)


def committed_paths(session: Session, dataset_id: int) -> dict[str, int]:
    """The dataset's committed shards as manifests name them (relative to its root), and the
    version each one's rows were added at."""
    root = session.get_one(Dataset, dataset_id).root_url
    return {
        relative_path(url, root): int(added or 0)
        for url, added in session.execute(
            select(Shard.url, Shard.added_version).where(
                Shard.dataset_id == dataset_id, visibility.committed(Shard)
            )
        )
    }


def build_refs(session: Session, dataset_id: int) -> Refs:
    """The dataset's tags, and the versions up to its latest that are no longer kept."""
    ds = session.get_one(Dataset, dataset_id)
    tags = {
        str(name): int(version)
        for name, version in session.execute(
            select(DatasetTag.name, DatasetTag.version).where(DatasetTag.dataset_id == dataset_id)
        )
    }
    kept = set(kept_versions(session, dataset_id))
    expired = tuple(n for n in range(1, int(ds.version) + 1) if n not in kept)
    return Refs(tags, expired)


def build_manifest(
    session: Session,
    dataset_id: int,
    number: int,
    *,
    checkpoint: bool = False,
    root: str | None = None,
    row: Any = None,
    groups: tuple[tuple[str, ...], tuple[str, ...]] | None = None,
) -> VersionManifest | None:
    """The manifest of a kept version, from the catalog's rows (None if it is not kept).

    ``checkpoint``: what the version read, whole (every shard it reads, and
    their records hidden by then), for a version some expired versions before
    it left no manifest. ``root``, ``row``, ``groups``: the dataset's root, the version's
    row and the groups it created and dropped, when the caller has them.
    """
    if row is None:
        row = session.get(DatasetVersion, (dataset_id, number))
    if row is None:
        return None
    if root is None:
        root = session.get_one(Dataset, dataset_id).root_url
    added_at = Shard.added_version == number
    if checkpoint:
        added_at = visibility.shard_visible_at(Shard, number)
    # A group's shard holds its records only: its first record's group names it (one seek).
    first_group = (
        select(Record.group_id)
        .where(Record.shard_id == Shard.id)
        .order_by(Record.byte_offset)
        .limit(1)
        .correlate(Shard)
        .scalar_subquery()
    )
    group_of = select(Group.name).where(Group.id == first_group).correlate(Shard).scalar_subquery()
    shards = session.execute(
        select(
            Shard.id,
            Shard.url,
            Shard.file_id,
            Shard.kind,
            Shard.record_count,
            Shard.size_bytes,
            Shard.shard_number,
            group_of.label("group_name"),
        )
        .where(Shard.dataset_id == dataset_id, visibility.committed(Shard), added_at)
        .order_by(Shard.shard_number, Shard.url)
    ).all()
    added = tuple(
        AddedShard(
            relative_path(s.url, root),
            s.file_id,
            s.kind,
            int(s.record_count),
            int(s.size_bytes),
            s.shard_number,
            s.group_name,
        )
        for s in shards
    )
    if groups is None or checkpoint:
        groups = _group_events(session, dataset_id, number, checkpoint)
    values: _Values = ((), ())
    if checkpoint or row.operation in CARRIES_VALUES:
        values = _field_values(session, dataset_id, number, checkpoint, root)
    if (
        not checkpoint
        and not row.records_removed
        and sum(a.record_count for a in added) == row.records_added
    ):
        # Every record it added is live and it removed none: nothing to ask (most writes).
        return _manifest(row, root, added, (), checkpoint, groups, values)
    # Removed at exactly this version; in a checkpoint, by this version (of the shards it reads).
    at = "r.removed_version = :v"
    if checkpoint:
        at = " AND ".join(
            (
                visibility.sql(visibility.gone_by, "records AS r", ":v"),
                visibility.sql(visibility.shard_visible_at, "shards AS s", ":v"),
            )
        )
    committed = visibility.sql(visibility.committed, "shards AS s")
    params = {"d": dataset_id, "v": number}
    # Per shard: whether any record outlives this version. One that has none is written
    # "all" and its offsets are never fetched (an overwrite of millions of records).
    touched = session.execute(
        text(
            "SELECT s.id, s.url, s.file_id, sum(CASE WHEN "
            f"{visibility.sql(visibility.gone_by, 'records AS r', ':v')} THEN 0 ELSE 1 END) "
            "FROM records r JOIN shards s ON s.id = r.shard_id "
            f"WHERE r.dataset_id = :d AND {committed} AND s.id IN "
            f"(SELECT r.shard_id FROM records r WHERE r.dataset_id = :d AND {at}) "
            "GROUP BY s.id, s.url, s.file_id"
        ),
        params,
    ).all()
    partly = [int(shard_id) for shard_id, _, _, outliving in touched if outliving]
    offsets: dict[int, list[int]] = {}
    for i in range(0, len(partly), 500):
        chunk = partly[i : i + 500]
        names = ", ".join(f":s{j}" for j in range(len(chunk)))
        for shard_id, offset in session.execute(
            text(
                "SELECT r.shard_id, r.byte_offset FROM records r JOIN shards s ON "
                f"s.id = r.shard_id WHERE r.shard_id IN ({names}) AND {at} "
                "ORDER BY r.shard_id, r.byte_offset"
            ),
            {**params, **{f"s{j}": sid for j, sid in enumerate(chunk)}},
        ):
            offsets.setdefault(int(shard_id), []).append(int(offset))
    removed = tuple(
        sorted(
            (
                RemovedRecords(
                    relative_path(url, root),
                    file_id,
                    tuple(offsets.get(int(shard_id), ())) if outliving else None,
                )
                for shard_id, url, file_id, outliving in touched
            ),
            key=lambda r: r.path,
        )
    )
    return _manifest(row, root, added, removed, checkpoint, groups, values)


_Values = tuple[tuple[tuple[str, str], ...], tuple[FieldValues, ...]]


def _field_values(
    session: Session, dataset_id: int, number: int, checkpoint: bool, root: str
) -> _Values:
    """The values ``update_fields`` set at version ``number`` (a checkpoint: that it reads).

    Values stored with their records (``added_version`` 0) are the shards' own
    (indexing reads them again); only what an update set is history: set at
    this version on records it did not add, or carried by records it added
    (a compaction's copies).
    """
    f = RecordField
    if checkpoint:
        at = and_(
            f.added_version != 0,
            visibility.value_visible_at(f, number),
            visibility.shard_visible_at(Shard, number),
        )
    else:
        at = or_(
            and_(f.added_version == number, ~visibility.added_after(Shard, number)),
            and_(
                f.added_version != 0,
                Shard.added_version == number,
                visibility.value_visible_at(f, number),
            ),
        )
    rows = session.execute(
        select(Shard.url, Shard.file_id, f.byte_offset, f.name, f.num, f.text)
        .join(Shard, Shard.id == f.shard_id)
        .where(f.dataset_id == dataset_id, visibility.committed(Shard), at)
        .order_by(Shard.url, f.byte_offset, f.name)
    ).all()
    if not rows:
        return (), ()
    kinds = declared_fields(session, dataset_id)
    by_shard: dict[tuple[str, str], list[tuple[int, str, float | str | None]]] = {}
    for url, file_id, offset, name, num, txt in rows:
        value = num if kinds.get(name) == "number" else txt
        by_shard.setdefault((relative_path(url, root), file_id), []).append(
            (int(offset), str(name), None if value is None else value)
        )
    named = sorted({name for *_, name, _num, _txt in rows})
    return (
        tuple((n, kinds[n]) for n in named if n in kinds),
        tuple(
            FieldValues(path, file_id, tuple(values))
            for (path, file_id), values in sorted(by_shard.items())
        ),
    )


def _group_events(
    session: Session, dataset_id: int, number: int, checkpoint: bool
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The column groups a version created and dropped; a checkpoint's: every group live at it."""
    if checkpoint:
        every = session.execute(
            select(Group.name, Group.added_version, Group.dropped_version)
            .where(Group.dataset_id == dataset_id)
            .order_by(Group.id)
        ).all()
        return tuple(g.name for g in every if _GroupLife(*g).live_at(number)), ()
    rows = session.execute(
        select(Group.name, Group.added_version, Group.dropped_version)
        .where(
            Group.dataset_id == dataset_id,
            or_(Group.added_version == number, Group.dropped_version == number),
        )
        .order_by(Group.id)
    ).all()
    return (
        tuple(r.name for r in rows if r.added_version == number),
        tuple(r.name for r in rows if r.dropped_version == number),
    )


def _manifest(
    row: Any,
    root: str,
    added: tuple[AddedShard, ...],
    removed: tuple[RemovedRecords, ...],
    checkpoint: bool,
    groups: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
    values: _Values = ((), ()),
) -> VersionManifest:
    created = row.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.UTC)
    return VersionManifest(
        version=int(row.number),
        operation=row.operation,
        message=row.message,
        created_at=created.astimezone(dt.UTC).isoformat(),
        records_added=int(row.records_added),
        records_removed=int(row.records_removed),
        bytes_added=int(row.bytes_added),
        bytes_removed=int(row.bytes_removed),
        total_records=int(row.total_records),
        total_bytes=int(row.total_bytes),
        added=added,
        removed=removed,
        root=root,
        checkpoint=checkpoint,
        groups_added=groups[0],
        groups_dropped=groups[1],
        field_kinds=values[0],
        fields=values[1],
    )


@dataclass
class _ShardLife:
    added: AddedShard
    version: int
    removed: dict[int, int]
    """Offset -> the version that removed it."""
    all_removed: list[int]
    """Versions that removed every record still live (in order)."""

    def remove(self, version: int, offsets: tuple[int, ...] | None) -> None:
        """Records removed at ``version``: these offsets, or (None) every one still live."""
        if offsets is None:
            self.all_removed.append(version)
        else:
            for o in offsets:
                self.removed.setdefault(o, version)


@dataclass
class _GroupLife:
    """One column group as the history tells it: its name, and the versions that added and dropped it."""

    name: str
    added: int
    dropped: int | None = None

    def live_at(self, version: int) -> bool:
        return self.added <= version and (self.dropped is None or version < self.dropped)


def _live_group(groups: list[_GroupLife], name: str) -> _GroupLife | None:
    return next((g for g in groups if g.name == name and g.dropped is None), None)


def _replay_groups(groups: list[_GroupLife], m: VersionManifest) -> None:
    """Apply one manifest's group events: a checkpoint lists every group live at it."""
    if m.checkpoint:
        for g in groups:
            if g.dropped is None and g.name not in m.groups_added:
                g.dropped = m.version
    for name in m.groups_dropped:
        live = _live_group(groups, name)
        if live is not None:
            live.dropped = m.version
    for name in m.groups_added:
        if _live_group(groups, name) is None:
            groups.append(_GroupLife(name, m.version))


@dataclass(frozen=True, slots=True)
class Replay:
    """What a history says, before any footer is read: the shards to register and how."""

    root: str
    latest: int
    kept: list[int]
    shards: dict[str, _ShardLife]
    """URL -> its life, for every shard some kept version reads."""
    gone: list[str]
    """Shards only expired versions read (their files may be gone already)."""
    groups: list[_GroupLife]
    """The column groups the history created, in creation order (docs/GROUPS.md)."""
    values: dict[str, dict[tuple[int, str], list[tuple[int, float | str | None]]]]
    """URL -> (offset, field) -> the values ``update_fields`` set, as (version, value) in order."""
    kinds: dict[str, str]
    """The kind of each field the values name."""


def replay(manifests: Sequence[VersionManifest], refs: Refs, root: str) -> Replay:
    """Apply the manifests in version order: which shards some kept version reads, and what it hides.

    ``manifests`` holds at most one per version: a version's checkpoint when
    there is one (it stands in for the expired versions before it that left
    no manifest), else its manifest.

    Raises
    ------
    ManifestError
        The history has a gap it does not explain, or removes records of a shard it never added.
    """
    if not manifests:
        raise ManifestError(f"the history in {root} has no manifest")
    expired = set(refs.expired)
    by_number = {m.version: m for m in manifests}
    if len(by_number) != len(manifests):
        raise ManifestError(f"the history in {root} gives a version twice")
    latest = max(by_number)
    kept = [n for n in range(1, latest + 1) if n not in expired]
    fix = (
        "restore the files, or write them from a catalog that still has this history "
        "(`shardcat verify --write-history`)"
    )
    for n in range(1, latest + 1):
        if n in by_number:
            continue
        if n not in expired:
            raise ManifestError(
                f"the history in {root} lacks the manifest of version {n}, which it does not "
                f"list as expired; {fix}"
            )
        after = next(k for k in kept if k > n)  # the latest version is never expired
        if not by_number.get(after, _NONE).checkpoint:
            raise ManifestError(
                f"the history in {root} lacks the manifest of expired version {n}, and version "
                f"{after} after it has no checkpoint; {fix}"
            )
    lives: dict[str, _ShardLife] = {}
    groups: list[_GroupLife] = []
    values: dict[str, dict[tuple[int, str], list[tuple[int, float | str | None]]]] = {}
    kinds: dict[str, str] = {}
    for number in sorted(by_number):
        m = by_number[number]
        _replay_groups(groups, m)
        _replay_values(values, kinds, m, root)
        if m.checkpoint:
            _merge_checkpoint(lives, m, root)
            continue
        for a in m.added:
            # Added again (an old-style reindex re-registered it): its rows start afresh.
            lives[absolute_url(a.path, root)] = _ShardLife(a, m.version, {}, [])
        for r in m.removed:
            _life_of(lives, m, r, root).remove(m.version, r.offsets)
    read: dict[str, _ShardLife] = {}
    gone: list[str] = []
    for url, life in lives.items():
        end = _end_of(life)
        if any(life.version <= k and (end is None or k < end) for k in kept):
            read[url] = life
        else:
            gone.append(url)
    return Replay(root, latest, kept, read, sorted(gone), groups, values, kinds)


def _replay_values(
    values: dict[str, dict[tuple[int, str], list[tuple[int, float | str | None]]]],
    kinds: dict[str, str],
    m: VersionManifest,
    root: str,
) -> None:
    """Apply one manifest's field values; a checkpoint's are dated at it where they changed."""
    for name, kind in m.field_kinds:
        if kinds.setdefault(name, kind) != kind:
            raise ManifestError(
                f"version {m.version}'s manifest gives field {name!r} kind {kind}, an earlier "
                f"one {kinds[name]}; the history is inconsistent"
            )
    for f in m.fields:
        shard = values.setdefault(absolute_url(f.path, root), {})
        for offset, name, value in f.values:
            if name not in kinds:
                raise ManifestError(
                    f"version {m.version}'s manifest sets field {name!r} without its kind"
                )
            events = shard.setdefault((offset, name), [])
            if m.checkpoint and events and events[-1][1] == value:
                continue  # known already: the version that set it says when
            events.append((m.version, value))


_NONE = VersionManifest(0, "", None, "", 0, 0, 0, 0, 0, 0)


def _life_of(
    lives: dict[str, _ShardLife], m: VersionManifest, r: RemovedRecords, root: str
) -> _ShardLife:
    life = lives.get(absolute_url(r.path, root))
    if life is None or life.added.file_id != r.file_id:
        raise ManifestError(
            f"version {m.version}'s manifest removes records of {r.path}, which no earlier "
            "manifest added (with that file id); the history is incomplete"
        )
    return life


def _merge_checkpoint(lives: dict[str, _ShardLife], m: VersionManifest, root: str) -> None:
    """What version ``m.version`` read, whole, over what the manifests before it said.

    What the history knew stays (older kept versions still read it); what
    changed in the versions that left no manifest is dated at the checkpoint:
    shards it reads that were unknown are added there, known shards it no
    longer reads are removed there, and records it hides that were live are
    removed there.
    """
    reads = {absolute_url(a.path, root): a for a in m.added}
    for url, life in lives.items():
        if url not in reads and _end_of(life) is None:
            life.remove(m.version, None)
    for url, a in reads.items():
        known = lives.get(url)
        if known is None or known.added.file_id != a.file_id:
            lives[url] = _ShardLife(a, m.version, {}, [])
    for r in m.removed:
        if absolute_url(r.path, root) in reads:
            _life_of(lives, m, r, root).remove(m.version, r.offsets)


def _end_of(life: _ShardLife) -> int | None:
    """The version from which none of the shard's records is live, if known without its footer."""
    if life.all_removed:
        return min(life.all_removed)
    if len(life.removed) >= life.added.record_count:
        return max(life.removed.values())
    return None


def rebuild(
    session: Session,
    dataset: str,
    manifests: Mapping[int, VersionManifest],
    refs: Refs,
    plan: Replay,
    preps: Mapping[str, PreparedShard],
) -> int:
    """Write a replayed history into an empty dataset; returns its latest version.

    Raises
    ------
    DatasetExistsError
        The dataset has committed shards already (rebuild into a new one).
    ManifestError
        A shard's file is not the one the history added, or lacks a record it removes.
    """
    ds = find_dataset(session, dataset)
    if session.execute(
        select(Shard.id).where(Shard.dataset_id == ds.id, Shard.state != "deleted").limit(1)
    ).first():
        raise DatasetExistsError(
            f"dataset {dataset!r} has shards already: a history is rebuilt into an empty "
            "dataset; delete it first (`shardcat delete`) or rebuild under another name"
        )
    jobs: dict[int, int] = {}
    shard_ids: dict[str, int] = {}
    shard_groups: dict[int, tuple[_GroupLife, list[int]]] = {}
    for number, m in manifests.items():
        if m.added:
            job = Job(
                dataset_id=ds.id,
                state="committed",
                description=f"{m.operation} (rebuilt from its manifest)",
                version=number,
                base_version=number - 1,
                finished_at=dt.datetime.now(dt.UTC),
            )
            session.add(job)
            session.flush()
            jobs[number] = job.id
    # One sort per key index instead of an entry at a time, if the history is large.
    with key_indexes_deferred(session, sum(preps[url].record_count for url in plan.shards)):
        for url, life in plan.shards.items():
            prep = preps[url]
            if prep.columns["file_id"] != life.added.file_id:
                raise ManifestError(
                    f"{url} is not the file version {life.version} added: its file id is "
                    f"{prep.columns['file_id']}, the manifest's {life.added.file_id}; the shard was "
                    "replaced after it was committed"
                )
            shard_id = insert_shard(session, ds.id, jobs[life.version], prep, key_mode=ds.key_mode)
            shard_ids[url] = shard_id
            group = _group_of(url, life, prep, plan.groups)
            if group is not None:
                shard_groups.setdefault(id(group), (group, []))[1].append(shard_id)
            hidden = dict(life.removed)
            for v in life.all_removed:
                for o in prep.offsets.tolist():
                    hidden.setdefault(int(o), v)
            unknown = set(hidden) - set(prep.offsets.tolist())
            if unknown:
                raise ManifestError(
                    f"{url} has no record at offset(s) {sorted(unknown)[:5]} that the history removes"
                )
            end = max(hidden.values()) if len(hidden) == len(prep.offsets) and hidden else None
            session.execute(
                update(Shard)
                .where(Shard.id == shard_id)
                .values(
                    state="committed",
                    committed_at=dt.datetime.now(dt.UTC),
                    added_version=life.version,
                    removed_version=end,
                    shard_number=life.added.shard_number,
                ),
                execution_options=NO_SYNC,
            )
            rows = [{"s": shard_id, "o": o, "v": v} for o, v in hidden.items()]
            if rows:
                session.execute(
                    text(
                        "UPDATE records SET removed_version = :v "
                        "WHERE shard_id = :s AND byte_offset = :o"
                    ),
                    rows,
                    execution_options=NO_SYNC,
                )
    _insert_groups(session, ds.id, plan.groups, shard_groups)
    _insert_values(session, ds, plan, shard_ids, preps)
    for number in plan.kept:
        m = manifests[number]
        session.execute(
            insert(DatasetVersion).values(
                dataset_id=ds.id,
                number=number,
                job_id=jobs.get(number),
                operation=m.operation,
                message=m.message,
                created_at=dt.datetime.fromisoformat(m.created_at),
                records_added=m.records_added,
                records_removed=m.records_removed,
                bytes_added=m.bytes_added,
                bytes_removed=m.bytes_removed,
                total_records=m.total_records,
                total_bytes=m.total_bytes,
            )
        )
    kept = set(plan.kept)
    for name, number in sorted(refs.tags.items()):
        if number in kept:
            session.add(DatasetTag(dataset_id=ds.id, name=name, version=number))
    ds.version = plan.latest
    session.flush()
    _check_totals(session, ds, manifests[plan.latest])
    return plan.latest


def _group_of(
    url: str, life: _ShardLife, prep: PreparedShard, groups: list[_GroupLife]
) -> _GroupLife | None:
    """The group a rebuilt shard's records are: named by its manifest entry or its footer.

    A history written before manifests named groups says nothing of them: the
    footer's name is then taken as a group added with the shard's version.
    """
    name = life.added.group or prep.group
    if life.added.group and prep.group and life.added.group != prep.group:
        raise ManifestError(
            f"{url} holds column group {prep.group!r} by its footer, but version "
            f"{life.version}'s manifest says {life.added.group!r}; the history is not this shard's"
        )
    if name is None:
        return None
    found = next((g for g in groups if g.name == name and g.live_at(life.version)), None)
    if found is None:
        found = _live_group(groups, name)
        if found is None or found.added > life.version:
            found = _GroupLife(name, life.version)
            groups.append(found)
    return found


def _insert_groups(
    session: Session,
    dataset_id: int,
    groups: list[_GroupLife],
    shards: Mapping[int, tuple[_GroupLife, list[int]]],
) -> None:
    """The ``groups`` rows, in creation order (a later group's entry wins a name both hold),
    and their shards' records made theirs."""
    ids: dict[int, int] = {}
    for g in sorted(groups, key=lambda g: g.added):
        row = Group(
            dataset_id=dataset_id, name=g.name, added_version=g.added, dropped_version=g.dropped
        )
        session.add(row)
        session.flush()
        ids[id(g)] = row.id
    for key, (_, shard_ids) in shards.items():
        session.execute(
            update(Record).where(Record.shard_id.in_(shard_ids)).values(group_id=ids[key]),
            execution_options=NO_SYNC,
        )


def _insert_values(
    session: Session,
    ds: Dataset,
    plan: Replay,
    shard_ids: Mapping[str, int],
    preps: Mapping[str, PreparedShard],
) -> None:
    """The values ``update_fields`` set, each from its version to the next one's (the fields
    declared as the history says). Values of shards no kept version reads are left out."""
    known = declared_fields(session, ds.id)
    for name, kind in sorted(plan.kinds.items()):
        if known.get(name, kind) != kind:
            raise ManifestError(
                f"dataset {ds.name!r} declares field {name!r} as {known[name]}, its history "
                f"as {kind}; rebuild into a dataset without that declaration"
            )
    declare_kinds(session, ds, plan.kinds)
    rows: list[dict[str, Any]] = []
    for url, shard in plan.values.items():
        shard_id = shard_ids.get(url)
        if shard_id is None:
            continue
        offsets = set(preps[url].offsets.tolist())
        for (offset, name), events in shard.items():
            if offset not in offsets:
                raise ManifestError(
                    f"{url} has no record at offset {offset}, whose field {name!r} the history sets"
                )
            for i, (version, value) in enumerate(events):
                number = plan.kinds[name] == "number"
                rows.append(
                    {
                        "shard_id": shard_id,
                        "byte_offset": offset,
                        "name": name,
                        "dataset_id": ds.id,
                        "num": value if number else None,
                        "text": None if number else value,
                        "added_version": version,
                        "removed_version": events[i + 1][0] if i + 1 < len(events) else None,
                    }
                )
    for i in range(0, len(rows), 5000):
        session.execute(insert(VALUE_ROWS), rows[i : i + 5000], execution_options=NO_SYNC)


def _check_totals(session: Session, ds: Dataset, latest: VersionManifest) -> None:
    """The rebuilt latest version holds what its manifest says it held."""
    count, size = session.execute(
        text(
            "SELECT count(*), coalesce(sum(r.byte_length), 0) FROM records r "
            "JOIN shards s ON s.id = r.shard_id WHERE r.dataset_id = :d AND "
            + visibility.sql(visibility.live, "records AS r", "shards AS s")
        ),
        {"d": ds.id},
    ).one()
    if (int(count), int(size)) != (latest.total_records, latest.total_bytes):
        raise CatalogError(
            f"the rebuilt dataset {ds.name!r} holds {count} records ({size} bytes) at version "
            f"{latest.version}, its manifest {latest.total_records} ({latest.total_bytes} bytes); "
            "nothing was committed: check the shards against the history with `shardcat verify`"
        )
