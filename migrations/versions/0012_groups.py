"""Column groups: a ``groups`` table and ``records.group_id`` (0: the base).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30

A group is a named set of entries added to a dataset's samples in shards of
its own (docs/GROUPS.md). Each of its records is an ordinary ``records`` row
with ``group_id`` naming the group; the base keeps ``group_id = 0``, the
column's default, so every existing row and every query that does not name
groups keep their meaning. Adding a column with a constant default rewrites
no table (PostgreSQL 11+; SQLite's ADD COLUMN); the views are left as they
are (they read the records of every group, as the table does).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "records", sa.Column("group_id", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    op.create_table(
        "groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("added_version", sa.BigInteger(), nullable=False),
        sa.Column("dropped_version", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_groups_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_groups")),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "uq_groups_live_name",
        "groups",
        ["dataset_id", "name"],
        unique=True,
        sqlite_where=sa.text("dropped_version IS NULL"),
        postgresql_where=sa.text("dropped_version IS NULL"),
    )


def downgrade() -> None:
    # Group records cannot be described by the old schema: they go first, with their shards
    # (a group's shards hold its records only).
    groups = "SELECT DISTINCT shard_id FROM records WHERE group_id <> 0"
    op.execute(f"DELETE FROM record_fields WHERE shard_id IN ({groups})")
    op.execute(f"DELETE FROM shards WHERE id IN ({groups})")
    op.execute("DELETE FROM records WHERE group_id <> 0")
    op.drop_index("uq_groups_live_name", table_name="groups")
    op.drop_table("groups")
    # SQLite 3.35+ drops a column in place (no rebuild of the WITHOUT ROWID table, its
    # indexes and the views that read it), as PostgreSQL does.
    op.execute("ALTER TABLE records DROP COLUMN group_id")
