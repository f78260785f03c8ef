"""Aggregate SQL over the catalog's tables for ``ls`` and ``stats``.

Candidates for :class:`~shardcat.catalog.Catalog` methods; kept here until the
library grows them so the commands stay one query each.
"""

from __future__ import annotations

from typing import Any

from .common import timestamp

__all__ = ["dataset_summaries", "entry_kinds"]


def dataset_summaries(cat: Any) -> list[dict[str, Any]]:
    """Every dataset with its committed shard, record and byte counts (one query)."""
    from sqlalchemy import func, select

    from ..catalog.models import Dataset, Shard

    q = (
        select(
            Dataset.name,
            Dataset.root_url,
            Dataset.created_at,
            func.count(Shard.id),
            func.coalesce(func.sum(Shard.record_count), 0),
            func.coalesce(func.sum(Shard.size_bytes), 0),
        )
        .outerjoin(Shard, (Shard.dataset_id == Dataset.id) & (Shard.state == "committed"))
        .group_by(Dataset.id, Dataset.name, Dataset.root_url, Dataset.created_at)
        .order_by(Dataset.name)
    )
    with cat.engine.connect() as conn:
        rows = conn.execute(q).all()
    return [
        {
            "name": name,
            "root": root,
            "shards": int(shards),
            "records": int(records),
            "bytes": int(size),
            "created": timestamp(created),
        }
        for name, root, created, shards, records, size in rows
    ]


def entry_kinds(cat: Any, dataset_id: int) -> list[dict[str, Any]]:
    """Entry (name, content type, codec) → committed records holding it, from the layout tables."""
    from sqlalchemy import func, select

    from ..catalog.models import LayoutEntry, Shard
    from ..catalog.models import Record as RecordRow

    per_layout = (
        select(RecordRow.layout_id, func.count().label("n"))
        .join(Shard, Shard.id == RecordRow.shard_id)
        .where(RecordRow.dataset_id == dataset_id, Shard.state == "committed")
        .group_by(RecordRow.layout_id)
        .subquery()
    )
    q = (
        select(
            LayoutEntry.name,
            LayoutEntry.content_type,
            LayoutEntry.codec,
            func.sum(per_layout.c.n),
        )
        .join(per_layout, per_layout.c.layout_id == LayoutEntry.layout_id)
        .group_by(LayoutEntry.name, LayoutEntry.content_type, LayoutEntry.codec)
        .order_by(LayoutEntry.name, LayoutEntry.content_type, LayoutEntry.codec)
    )
    with cat.engine.connect() as conn:
        return [
            {"name": n, "content_type": t, "codec": c, "records": int(k)}
            for n, t, c, k in conn.execute(q)
        ]
