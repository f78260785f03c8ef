"""Views of what versions see: ``live_records``, ``live_shards``, ``records_at``, ``shards_at``.

People query the catalog with their own SQL (``shardcat sql``, docs/CATALOG.md
§12). The raw tables hold every version at once: a replaced record and its
replacement, a deleted key, the shards an overwrite retired. These views
apply the one rule of :mod:`.visibility` so that a query need not know it:

- ``live_records``, ``live_shards``: what each dataset's latest version reads;
- ``records_at``, ``shards_at``: what each *kept* version reads, one row per
  (version, record) or (version, shard); filter on ``version``.

Their SQL is generated here, from the expressions of :mod:`.visibility`
rendered as plain SQL that SQLite and PostgreSQL read alike. A new catalog
gets them with its tables (``models.Base.metadata`` creates them after the
tables, drops them before); migration 0008 created them in catalogs made
before, from a frozen copy of the same text, 0013 replaced the record
views with ones that name each record's column group (``group_id``, 0: the
base; ``group_name``, NULL for the base: docs/GROUPS.md), and 0019 added
``key_sorted`` to them (a key range over a view can then read the key index)
(``tests/catalog/test_views.py`` checks the copies are this text, and that
the views agree with the rule on random histories). A change of the rule therefore needs a migration that
replaces the views (drop, then :func:`create_statements`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from sqlalchemy import Connection, Select, select
from sqlalchemy.engine.default import DefaultDialect

from . import visibility
from .models import Dataset, DatasetVersion, Group, Record, Shard

__all__ = ["VIEW_NAMES", "create_statements", "create_views", "drop_statements", "drop_views"]

VIEW_NAMES = ("live_records", "live_shards", "records_at", "shards_at")
"""The views, in the order they are created (none reads another)."""


def _tables() -> tuple[Any, Any, Any, Any, Any]:
    r = Record.__table__.alias("r")
    s = Shard.__table__.alias("s")
    d = Dataset.__table__.alias("d")
    v = DatasetVersion.__table__.alias("v")
    g = Group.__table__.alias("g")
    return r, s, d, v, g


def _record_columns(r: Any, s: Any, d: Any, g: Any) -> list[Any]:
    # Columns are only ever added, last (group_id and group_name: revision 0013; key_sorted:
    # 0019): a query that names columns by position keeps working, and PostgreSQL's
    # CREATE OR REPLACE VIEW takes the new view over the views users built on it.
    return [
        r.c.dataset_id,
        d.c.name.label("dataset"),
        r.c.key,
        r.c.key_hash,
        r.c.shard_id,
        s.c.url.label("shard_url"),
        s.c.shard_number,
        s.c.job_id,
        r.c.byte_offset,
        r.c.byte_length,
        r.c.layout_id,
        r.c.group_id,
        g.c.name.label("group_name"),
        # A key range reads the key-order index only when the query also says key_sorted.
        r.c.key_sorted,
    ]


def _shard_columns(s: Any, d: Any) -> list[Any]:
    return [
        s.c.dataset_id,
        d.c.name.label("dataset"),
        s.c.id.label("shard_id"),
        s.c.url,
        s.c.shard_number,
        s.c.kind,
        s.c.job_id,
        s.c.record_count,
        s.c.size_bytes,
        s.c.payload_bytes,
        s.c.format_major,
        s.c.format_minor,
        s.c.added_version,
        s.c.committed_at,
    ]


def _selects() -> dict[str, Select[Any]]:
    r, s, d, v, g = _tables()
    # The base (group_id 0) has no groups row: its group_name is NULL.
    records = (
        r.join(s, s.c.id == r.c.shard_id)
        .join(d, d.c.id == r.c.dataset_id)
        .outerjoin(g, g.c.id == r.c.group_id)
    )
    shards = s.join(d, d.c.id == s.c.dataset_id)
    return {
        "live_records": select(*_record_columns(r, s, d, g))
        .select_from(records)
        .where(visibility.live(r.c, s.c)),
        "live_shards": select(*_shard_columns(s, d))
        .select_from(shards)
        .where(visibility.shard_live(s.c)),
        # One row per kept version (a dataset_versions row) and record visible there.
        "records_at": select(v.c.number.label("version"), *_record_columns(r, s, d, g))
        .select_from(records.join(v, v.c.dataset_id == r.c.dataset_id))
        .where(visibility.visible_at(r.c, s.c, v.c.number)),
        "shards_at": select(v.c.number.label("version"), *_shard_columns(s, d))
        .select_from(shards.join(v, v.c.dataset_id == s.c.dataset_id))
        .where(visibility.shard_visible_at(s.c, v.c.number)),
    }


@functools.cache
def definitions() -> dict[str, str]:
    """Each view's ``SELECT``, as SQL text both databases read (constants as literals)."""
    dialect = DefaultDialect()
    out = {}
    for name, statement in _selects().items():
        text = str(statement.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
        out[name] = re.sub(r" ?\n", " ", text)
    return out


def create_statements() -> list[str]:
    """``CREATE VIEW`` statements of every view, in :data:`VIEW_NAMES` order."""
    return [f"CREATE VIEW {name} AS {definitions()[name]}" for name in VIEW_NAMES]


def drop_statements() -> list[str]:
    """``DROP VIEW IF EXISTS`` statements of every view (reverse order)."""
    return [f"DROP VIEW IF EXISTS {name}" for name in reversed(VIEW_NAMES)]


def create_views(conn: Connection) -> None:
    """Create the views (in the connection's transaction; the tables must exist)."""
    for statement in create_statements():
        conn.exec_driver_sql(statement)


def drop_views(conn: Connection) -> None:
    """Drop the views, if present (before their tables are dropped or rebuilt)."""
    for statement in drop_statements():
        conn.exec_driver_sql(statement)
