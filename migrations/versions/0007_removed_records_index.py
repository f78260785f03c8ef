"""Removed records found by an index: a partial index on records (dataset_id, removed_version).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Reading a version (``shardcat.read``, the training datasets, ``stats``,
``diff``) asks which records of its shards it no longer serves: those with
``removed_version <= V``. Without an index that is a scan of every record of
the dataset (373 ms per million records on SQLite, at every epoch); the
index holds only removed records (``WHERE removed_version IS NOT NULL``), so
it costs nothing to the inserts of live ones and stays as small as what
``compact`` has yet to reclaim. Existing removed records are indexed as it is
built.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_REMOVED = sa.text("removed_version IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_records_dataset_id_removed_version",
        "records",
        ["dataset_id", "removed_version"],
        sqlite_where=_REMOVED,
        postgresql_where=_REMOVED,
    )


def downgrade() -> None:
    op.drop_index("ix_records_dataset_id_removed_version", table_name="records")
