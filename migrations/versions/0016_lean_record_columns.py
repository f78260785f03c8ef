"""Lean rows: ``records`` columns in an order PostgreSQL stores without alignment padding.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-30

PostgreSQL aligns each 8-byte column of a heap row to 8 bytes and each 4-byte
one to 4. In 0015's order (``shard_id`` int4, ``byte_offset`` int8,
``dataset_id`` int4, ``key_hash`` int8, ``key``, ``byte_length`` int8, ...)
a row pays 4 + 4 bytes of padding before the second and fourth columns, up to
7 before ``byte_length`` and up to 3 before ``group_id``: 8-16 bytes a row
(measured: 16 with key text and two entries, 8 hash-only; docs/SCALE.md §3).
The lean order puts the 8-byte columns first (``removed_version``, NULL
while live, takes no bytes then and needs no padding when set), the 4-byte
ones after them and the two variable-length ones (``key``, ``spans``, which
need no alignment at their sizes) last.

PostgreSQL cannot reorder columns, so ``records`` is rebuilt in one
transaction, under an exclusive lock: the new table with each column's type,
collation, NOT NULL and default read from the database, its storage options
(the TOAST table's too) and each column's storage, options (``n_distinct``)
and compression where they differ from the type's, every row copied by one
``INSERT ... SELECT`` (in the table's physical order), then its constraints
(the primary key ``pk_records``), its indexes (built once over all rows:
packed, like after ``REINDEX``), foreign keys pointing at it, per-column
statistics targets, its replica identity, the views that read it
(``live_records``, ``records_at``, and any of your own, directly or through
another view: each made again from its own ``pg_get_viewdef``, with its
options), the owner, grants (table and column ones) and comments (the
table's, its columns', indexes' and constraints', the views' and their
columns') of each, and its statistics (``ANALYZE``). It needs free disk for a
second copy of the table and its indexes while it runs. The downgrade
rebuilds 0015's order the same way.

What the rebuild would lose unseen is refused up front, nothing changed, the
message saying what to drop and make again after: columns the migrations did
not make; triggers, row security policies or extended statistics on
``records``; ``records`` in a publication (``FOR TABLE``, ``FOR ALL TABLES``, ``FOR
TABLES IN SCHEMA``: the latter would also publish the copy as inserts into
the new table); ``records``
UNLOGGED, or it or an index in a tablespace of its own; relations other than
views reading it (materialized views); triggers (``INSTEAD OF``), rules or
column defaults on a view that reads it. Not read, and lost: security labels.
(The rebuild is :mod:`shardcat.catalog.rebuild`, shared with revision 0017.)

SQLite stores a row's values as variable-length integers and bytes with no
alignment: the order costs nothing there (measured with ``dbstat``), so this
revision leaves a SQLite catalog as it is. A catalog created at 0016 has the
lean order on both (the models declare it); SQL should name columns, never
rely on their position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEAN = (
    "byte_offset",
    "key_hash",
    "byte_length",
    "removed_version",
    "shard_id",
    "dataset_id",
    "layout_id",
    "group_id",
    "key",
    "spans",
)
PREVIOUS = (
    "shard_id",
    "byte_offset",
    "dataset_id",
    "key_hash",
    "key",
    "byte_length",
    "layout_id",
    "spans",
    "removed_version",
    "group_id",
)


def _rebuild(order: Sequence[str]) -> None:
    """Rebuild PostgreSQL's ``records`` with its columns in ``order``; rows and all around them kept.

    The rebuild is :mod:`shardcat.catalog.rebuild`'s, which revision 0017 and
    ``shardcat catalog partition`` share; through the driver's cursor.
    """
    from shardcat.catalog.rebuild import rebuild_records

    cur: Any = op.get_bind().connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        rebuild_records(cur, order=order, by="revision 0016", again="run the migration")
    finally:
        cur.close()


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(LEAN)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(PREVIOUS)
