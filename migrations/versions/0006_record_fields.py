"""Declared per-sample fields: dataset_fields (name, kind) and record_fields (one value per record).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

A dataset may declare scalar fields of its samples (a label, a split, a
score) whose values the catalog stores beside each record, so that
``where="label = 3"`` chooses samples without reading shards. Both tables
are new and start empty: existing catalogs keep every row and gain no
fields until they are indexed (``shardcat.readers.index_fields``).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "dataset_fields",
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.CheckConstraint("kind IN ('number', 'text')", name=op.f("ck_dataset_fields_kind")),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_dataset_fields_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", "name", name=op.f("pk_dataset_fields")),
    )
    op.create_table(
        "record_fields",
        sa.Column("shard_id", sa.Integer(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("num", sa.Double(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("shard_id", "byte_offset", "name", name=op.f("pk_record_fields")),
        sqlite_with_rowid=False,
    )
    op.create_index(
        op.f("ix_record_fields_dataset_id_name_num"),
        "record_fields",
        ["dataset_id", "name", "num"],
    )
    op.create_index(
        op.f("ix_record_fields_dataset_id_name_text"),
        "record_fields",
        ["dataset_id", "name", "text"],
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_record_fields_dataset_id_name_text"), table_name="record_fields")
    op.drop_index(op.f("ix_record_fields_dataset_id_name_num"), table_name="record_fields")
    op.drop_table("record_fields")
    op.drop_table("dataset_fields")
