"""Hash-only datasets: ``datasets.key_mode``, ``records.key`` nullable, a partial key index.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30

A dataset created with ``keys="hash"`` keeps only each record's key hash in
the catalog (``records.key`` is NULL); every lookup compares the key the shard
record carries (docs/CATALOG.md, "Hash-only datasets"). Three changes:

- ``datasets.key_mode`` (``'text'`` or ``'hash'``; existing datasets: ``'text'``);
- ``records.key`` loses NOT NULL. PostgreSQL alters the column in place
  (no rewrite); SQLite cannot drop a NOT NULL, so ``records`` is rebuilt: its
  own DDL with the constraint taken off, the rows copied in file order, its
  indexes and the views that read it made again from their stored text;
- ``ix_records_dataset_id_key`` becomes partial (``WHERE key IS NOT NULL``):
  a hash-only dataset's rows cost it no bytes.

The downgrade refuses while a hash-only dataset's rows exist (their keys are
not in the catalog to put back): delete such datasets first.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY_INDEX = "ix_records_dataset_id_key"
_HAS_KEY = sa.text("key IS NOT NULL")


def _key_index(partial: bool) -> None:
    op.drop_index(_KEY_INDEX, table_name="records")
    where = {"sqlite_where": _HAS_KEY, "postgresql_where": _HAS_KEY} if partial else {}
    op.create_index(
        _KEY_INDEX,
        "records",
        ["dataset_id", "key"],
        postgresql_ops={"key": 'COLLATE "C"'},
        **where,  # type: ignore[arg-type]
    )


def _rebuild_sqlite_records(nullable: bool) -> None:
    """Rebuild SQLite's ``records`` with ``key`` (not) NULL: DDL, rows, indexes, views kept."""
    conn = op.get_bind()
    ddl = conn.execute(
        sa.text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'records'")
    ).scalar_one()
    column = re.compile(r'("key"|\bkey\b)\s+TEXT(\s+NOT NULL)?', re.IGNORECASE)
    if not column.search(ddl):
        raise RuntimeError(f"records has no key TEXT column to alter: {ddl}")
    new_ddl = column.sub(r"\1 TEXT" if nullable else r"\1 TEXT NOT NULL", ddl, count=1)
    new_ddl = re.sub(r"^CREATE TABLE\s+\"?records\"?", "CREATE TABLE _records_0014", new_ddl)
    indexes = conn.execute(
        sa.text(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' "
            "AND sql IS NOT NULL"
        )
    ).scalars()
    index_sql = list(indexes)
    views = list(conn.execute(sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view'")))
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    op.execute(new_ddl)
    op.execute("INSERT INTO _records_0014 SELECT * FROM records ORDER BY shard_id, byte_offset")
    op.execute("DROP TABLE records")
    op.execute("ALTER TABLE _records_0014 RENAME TO records")
    for sql in index_sql:
        op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def upgrade() -> None:
    op.add_column(
        "datasets",
        sa.Column("key_mode", sa.String(8), server_default=sa.text("'text'"), nullable=False),
    )
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite_records(nullable=True)
    else:
        op.alter_column("records", "key", existing_type=sa.Text(), nullable=True)
    _key_index(partial=True)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.execute(sa.text("SELECT 1 FROM records WHERE key IS NULL LIMIT 1")).first():
        raise RuntimeError(
            "hash-only datasets have records without key text, which revision 0013 cannot "
            "hold: delete those datasets (key_mode = 'hash') before downgrading"
        )
    _key_index(partial=False)
    if conn.dialect.name == "sqlite":
        _rebuild_sqlite_records(nullable=False)
    else:
        op.alter_column("records", "key", existing_type=sa.Text(), nullable=False)
    # A plain ALTER TABLE ... DROP COLUMN (SQLite 3.35+): a batch rebuild of datasets
    # would drop the table every other one refers to ON DELETE CASCADE.
    op.drop_column("datasets", "key_mode")
