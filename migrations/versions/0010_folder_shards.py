"""Folders indexed in place: ``shards.kind`` may be ``'files'``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30

A plain folder of files registered in place (``shardcat index-files``) is
stored as shard rows of kind ``'files'``, one per group of samples: its URL
names the folder and the group, each record's entries are whole files
(``folder/key.entry``) with the size and CRC32C computed while indexing.
Nothing else changes; only the kind's ``CHECK`` constraint is widened, so
an upgraded catalog keeps every row as it was. SQLite cannot alter a
constraint: batch mode rebuilds the ``shards`` table there (its indexes
with it); PostgreSQL swaps the constraint in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _kinds(kinds: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_shards_kind"), "shards", type_="check")
        op.create_check_constraint(op.f("ck_shards_kind"), "shards", f"kind IN ({kinds})")
        return
    # The rebuild drops the table: the views that read it go first and come back as they
    # were, and its indexes are made again from their own text (partial ones included).
    views = bind.execute(sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'view'")).all()
    indexes = bind.execute(
        sa.text(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'shards' "
            "AND sql IS NOT NULL"
        )
    ).all()
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    with op.batch_alter_table("shards", recreate="always") as batch:
        batch.drop_constraint(op.f("ck_shards_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_shards_kind"), f"kind IN ({kinds})")
    for name, sql in indexes:
        op.execute(f'DROP INDEX IF EXISTS "{name}"')
        op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def upgrade() -> None:
    _kinds("'native', 'tar', 'files'")


def downgrade() -> None:
    # Rows of the new kind cannot be described by the old schema: they go first.
    op.execute("DELETE FROM records WHERE shard_id IN (SELECT id FROM shards WHERE kind = 'files')")
    op.execute(
        "DELETE FROM record_fields WHERE shard_id IN (SELECT id FROM shards WHERE kind = 'files')"
    )
    op.execute("DELETE FROM shards WHERE kind = 'files'")
    _kinds("'native', 'tar'")
