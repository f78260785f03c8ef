"""Keys in order: an index on records (dataset_id, key) for listings and prefix searches.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

``shardcat keys DATASET --prefix P`` and ``shardcat count`` (and
``Catalog.keys``/``Catalog.count``) read keys as a range of this index:
``key >= P AND key < P'`` where ``P'`` is the first string after every string
starting with ``P``. On PostgreSQL the index orders keys by their bytes
(``COLLATE "C"``, whatever the database's collation), the only order in which
a prefix is one range; SQLite's default collation (BINARY) is that order
already. Existing records are indexed as the index is built.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_records_dataset_id_key",
        "records",
        ["dataset_id", "key"],
        postgresql_ops={"key": 'COLLATE "C"'},
    )


def downgrade() -> None:
    op.drop_index("ix_records_dataset_id_key", table_name="records")
