"""The first catalog schema: datasets, jobs, shards, layouts, layout_entries, records.

Revision ID: 0001
Revises:
Create Date: 2026-11-22

Hand-written from ``shardcat/catalog/models.py`` (docs/CATALOG.md explains
every column). Constraint names follow ``models.NAMING_CONVENTION``.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSONType = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("root_url", sa.Text(), nullable=False),
        sa.Column("format_major", sa.SmallInteger(), nullable=False),
        sa.Column("format_minor", sa.SmallInteger(), nullable=False),
        sa.Column("version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("properties", JSONType, nullable=False),
        sa.Column("created_at", Timestamp, server_default=sa.func.now(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_datasets")),
        sa.UniqueConstraint("name", name=op.f("uq_datasets_name")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), server_default=sa.text("'open'"), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("properties", JSONType, nullable=True),
        sa.Column("version", sa.BigInteger(), nullable=True),
        sa.Column("created_at", Timestamp, server_default=sa.func.now(), nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.CheckConstraint("state IN ('open', 'committed', 'aborted')", name=op.f("ck_jobs_state")),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_jobs_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_jobs_dataset_id_state"), "jobs", ["dataset_id", "state"])
    op.create_table(
        "shards",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("shard_number", sa.BigInteger(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("file_id", sa.String(length=32), nullable=False),
        sa.Column("format_major", sa.SmallInteger(), nullable=False),
        sa.Column("format_minor", sa.SmallInteger(), nullable=False),
        sa.Column("flags", sa.BigInteger(), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("alignment", sa.Integer(), nullable=False),
        sa.Column("compression", sa.String(length=16), nullable=False),
        sa.Column("header_crc", sa.BigInteger(), nullable=False),
        sa.Column("record_count", sa.BigInteger(), nullable=False),
        sa.Column("entry_count", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("payload_bytes", sa.BigInteger(), nullable=False),
        sa.Column("data_crc", sa.BigInteger(), nullable=False),
        sa.Column("footer_crc", sa.BigInteger(), nullable=False),
        sa.Column("user_metadata", JSONType, nullable=False),
        sa.Column("registered_at", Timestamp, server_default=sa.func.now(), nullable=False),
        sa.Column("committed_at", Timestamp, nullable=True),
        sa.Column("deleted_at", Timestamp, nullable=True),
        sa.CheckConstraint(
            "state IN ('staged', 'committed', 'deleted')", name=op.f("ck_shards_state")
        ),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_shards_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_shards_job_id_jobs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shards")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_shards_dataset_id_state"), "shards", ["dataset_id", "state"])
    op.create_index(op.f("ix_shards_dataset_id_url"), "shards", ["dataset_id", "url"])
    op.create_index(op.f("ix_shards_job_id"), "shards", ["job_id"])
    op.create_table(
        "layouts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("signature", sa.Text(), nullable=False),
        sa.Column("entry_count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name=op.f("fk_layouts_dataset_id_datasets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_layouts")),
        sa.UniqueConstraint("dataset_id", "digest", name=op.f("uq_layouts_dataset_id_digest")),
    )
    op.create_table(
        "layout_entries",
        sa.Column("layout_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("content_type", sa.Text(), nullable=False),
        sa.Column("codec", sa.String(length=16), nullable=False),
        sa.ForeignKeyConstraint(
            ["layout_id"],
            ["layouts.id"],
            name=op.f("fk_layout_entries_layout_id_layouts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("layout_id", "position", name=op.f("pk_layout_entries")),
    )
    op.create_index(op.f("ix_layout_entries_name"), "layout_entries", ["name"])
    # No foreign keys on records: see the models' docstring (bulk COPY speed).
    op.create_table(
        "records",
        sa.Column("shard_id", sa.Integer(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("key_hash", sa.BigInteger(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("byte_length", sa.BigInteger(), nullable=False),
        sa.Column("layout_id", sa.Integer(), nullable=False),
        sa.Column("spans", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("shard_id", "byte_offset", name=op.f("pk_records")),
        sqlite_with_rowid=False,
    )
    op.create_index(op.f("ix_records_dataset_id_key_hash"), "records", ["dataset_id", "key_hash"])


def downgrade() -> None:
    op.drop_index(op.f("ix_records_dataset_id_key_hash"), table_name="records")
    op.drop_table("records")
    op.drop_index(op.f("ix_layout_entries_name"), table_name="layout_entries")
    op.drop_table("layout_entries")
    op.drop_table("layouts")
    op.drop_index(op.f("ix_shards_job_id"), table_name="shards")
    op.drop_index(op.f("ix_shards_dataset_id_url"), table_name="shards")
    op.drop_index(op.f("ix_shards_dataset_id_state"), table_name="shards")
    op.drop_table("shards")
    op.drop_index(op.f("ix_jobs_dataset_id_state"), table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("datasets")
