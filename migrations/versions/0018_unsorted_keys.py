"""Unsorted datasets: ``records.key_sorted``, and the key index holds only sorted rows.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01

A dataset created with ``keys="unsorted"`` keeps its keys' text in the catalog
but not in the key-order index ``ix_records_dataset_id_key`` (28-39 bytes a key
on SQLite, 52-65 on PostgreSQL; docs/SCALE.md §3): it reads keys by hash like
every dataset, and cannot list them in key order (``keys``, ``keys --prefix``).
Two changes:

- ``records.key_sorted`` BOOLEAN NOT NULL DEFAULT true, the last column: no
  table rewrite on either database (PostgreSQL keeps the default in the
  catalog for existing rows, SQLite reads it for rows stored without it);
- the key index's predicate becomes ``key IS NOT NULL AND key_sorted`` (a
  bare boolean on both databases, so that one WHERE clause reads it on both):
  the index is built again, a pass over the table (about a second a million
  rows).

A statement reads the index only if its WHERE clause also says ``key_sorted``
(docs/CATALOG.md, "Unsorted datasets"); the views of 0008 and 0013 do not have the
column, so a key range asked of them scans (docs/CATALOG.md §12.1). The downgrade
turns unsorted datasets into text ones, their rows entering the rebuilt index, and
drops the column.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY_INDEX = "ix_records_dataset_id_key"
# Written out, not imported: a revision's DDL stays what it was when later code changes.
_SORTED = sa.text("key IS NOT NULL AND key_sorted")
_HAS_KEY = sa.text("key IS NOT NULL")


def _key_index(where: sa.TextClause) -> None:
    op.drop_index(_KEY_INDEX, table_name="records")
    op.create_index(
        _KEY_INDEX,
        "records",
        ["dataset_id", "key"],
        postgresql_ops={"key": 'COLLATE "C"'},
        sqlite_where=where,
        postgresql_where=where,
    )


def upgrade() -> None:
    op.add_column(
        "records", sa.Column("key_sorted", sa.Boolean(), nullable=False, server_default=sa.true())
    )
    _key_index(_SORTED)


def downgrade() -> None:
    op.execute("UPDATE datasets SET key_mode = 'text' WHERE key_mode = 'unsorted'")
    _key_index(_HAS_KEY)
    op.drop_column("records", "key_sorted")
