"""Where each base record's column-group records are, at one version: what readers join.

One statement pairs every base record a version sees with each group record
of the same key the version sees (:mod:`.visibility`'s rule on both sides),
by base shard, group and base offset: the input of the readers' join plan
(``orchestration/joins.py``, docs/GROUPS.md §5). A dataset that never had a
group costs one indexed look at ``groups``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from . import visibility
from .models import BASE_GROUP, Group, LayoutEntry, Record, Shard
from .results import ShardRow
from .rows import shard_row

__all__ = ["GroupRows", "group_rows"]


@dataclass(frozen=True, slots=True)
class GroupRows:
    """A version's group records, located next to the base records they belong to."""

    names: dict[int, str] = field(default_factory=dict)
    """Group id -> name, in group order (the order groups were created: their merge order)."""
    entries: dict[int, frozenset[str]] = field(default_factory=dict)
    """Group id -> the entry names its records hold (for ``entries=``)."""
    shards: dict[int, ShardRow] = field(default_factory=dict)
    """The group records' shards, by id."""
    rows: list[tuple[int, int, int, int, int]] = field(default_factory=list)
    """``(base shard id, base offset, group id, group shard id, group offset)``, ordered by
    base shard, group and base offset."""


def group_rows(session: Session, dataset_id: int, dataset: str, number: int) -> GroupRows:
    """The group records version ``number`` of the dataset sees, paired with their base records."""
    # Which groups' records the version sees is the records' visibility, below, not
    # decided here (visibility.py holds the one rule): a dataset without groups stops here.
    ids = session.execute(
        select(Group.id, Group.name).where(Group.dataset_id == dataset_id).order_by(Group.id)
    ).all()
    if not ids:
        return GroupRows()
    b, bs = aliased(Record), aliased(Shard)
    g, gs = aliased(Record), aliased(Shard)
    found = session.execute(
        select(b.shard_id, b.byte_offset, g.group_id, g.shard_id, g.byte_offset, g.layout_id)
        .join(bs, bs.id == b.shard_id)
        .join(
            g,
            (g.dataset_id == b.dataset_id)
            & (g.key_hash == b.key_hash)
            & (g.key == b.key)
            & (g.group_id != BASE_GROUP),
        )
        .join(gs, gs.id == g.shard_id)
        .where(
            b.dataset_id == dataset_id,
            b.group_id == BASE_GROUP,
            visibility.visible_at(b, bs, number),
            visibility.visible_at(g, gs, number),
        )
        .order_by(b.shard_id, g.group_id, b.byte_offset)
    ).all()
    layouts: dict[int, set[int]] = {}
    shard_ids: set[int] = set()
    rows = []
    for bsid, boff, gid, gsid, goff, layout in found:
        rows.append((int(bsid), int(boff), int(gid), int(gsid), int(goff)))
        layouts.setdefault(int(gid), set()).add(int(layout))
        shard_ids.add(int(gsid))
    entries: dict[int, frozenset[str]] = {}
    for gid, lids in layouts.items():
        named = session.execute(
            select(LayoutEntry.name).where(LayoutEntry.layout_id.in_(sorted(lids))).distinct()
        ).scalars()
        entries[gid] = frozenset(named)
    shards = {}
    if shard_ids:
        for s in session.execute(select(Shard).where(Shard.id.in_(sorted(shard_ids)))).scalars():
            shards[s.id] = shard_row(s, dataset)
    return GroupRows(
        names={int(i): str(n) for i, n in ids if int(i) in layouts},
        entries=entries,
        shards=shards,
        rows=rows,
    )
