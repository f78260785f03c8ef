"""Dataset versions: kept versions, tags, and when each record and shard was visible.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

Adds ``dataset_versions`` (one row per kept version), ``dataset_tags`` (name
-> version), ``records.removed_version``, ``shards.added_version`` /
``shards.removed_version`` and ``jobs.base_version`` (docs/LIFECYCLE.md).

Existing catalogs keep their data: each dataset's current state becomes one
version, numbered by the dataset's current ``version`` counter (so a writer
that read that number before the upgrade still commits against it). Its
committed shards get that number as ``added_version``; its records stay live
(``removed_version`` NULL). A dataset that never committed anything
(``version`` 0) gets no version row.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dataset_versions",
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _TS, server_default=sa.func.now(), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("operation", sa.String(32), nullable=False),
        sa.Column("records_added", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("records_removed", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("bytes_added", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("bytes_removed", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("total_records", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name="fk_dataset_versions_dataset_id_datasets",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name="fk_dataset_versions_job_id_jobs", ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("dataset_id", "number", name="pk_dataset_versions"),
    )
    op.create_table(
        "dataset_tags",
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("created_at", _TS, server_default=sa.func.now(), nullable=False),
        sa.ForeignKeyConstraint(
            ["dataset_id"],
            ["datasets.id"],
            name="fk_dataset_tags_dataset_id_datasets",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("dataset_id", "name", name="pk_dataset_tags"),
    )
    op.add_column("records", sa.Column("removed_version", sa.BigInteger(), nullable=True))
    op.add_column("shards", sa.Column("added_version", sa.BigInteger(), nullable=True))
    op.add_column("shards", sa.Column("removed_version", sa.BigInteger(), nullable=True))
    op.add_column("jobs", sa.Column("base_version", sa.BigInteger(), nullable=True))

    # Each dataset's current state becomes one version.
    op.execute(
        "UPDATE shards SET added_version = "
        "(SELECT d.version FROM datasets d WHERE d.id = shards.dataset_id) "
        "WHERE state = 'committed'"
    )
    op.execute(
        "INSERT INTO dataset_versions "
        "(dataset_id, number, operation, records_added, bytes_added, total_records, "
        "total_bytes, message) "
        "SELECT dataset_id, number, 'upgrade', n, b, n, b, "
        "'the dataset as it was when the catalog was upgraded to versions' FROM ("
        "SELECT d.id AS dataset_id, d.version AS number, "
        "(SELECT count(*) FROM records r JOIN shards s ON s.id = r.shard_id "
        " WHERE r.dataset_id = d.id AND s.state = 'committed') AS n, "
        "(SELECT coalesce(sum(r.byte_length), 0) FROM records r JOIN shards s "
        " ON s.id = r.shard_id WHERE r.dataset_id = d.id AND s.state = 'committed') AS b "
        "FROM datasets d WHERE d.version > 0) AS current"
    )


def downgrade() -> None:
    # Older shardcat sees only the latest version: drop what it would otherwise show.
    op.execute("DELETE FROM records WHERE removed_version IS NOT NULL")
    op.execute(
        "UPDATE shards SET state = 'deleted' WHERE state = 'committed' "
        "AND removed_version IS NOT NULL"
    )
    # Plain DROP COLUMN (SQLite >= 3.35, PostgreSQL): a batch copy would lose WITHOUT ROWID.
    for table, column in (
        ("jobs", "base_version"),
        ("shards", "removed_version"),
        ("shards", "added_version"),
        ("records", "removed_version"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.drop_table("dataset_tags")
    op.drop_table("dataset_versions")
