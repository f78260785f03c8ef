"""Opt-in hash partitions of ``records`` on PostgreSQL (the ``record_partitions`` setting).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30

With ``record_partitions`` (``SHARDCAT_RECORD_PARTITIONS``) P > 0 when it runs,
PostgreSQL's ``records`` is rebuilt ``PARTITION BY HASH (key_hash)`` into P
partitions ``records_p000``..., every row, index, grant, comment, setting and
view kept, the primary key ``(shard_id, byte_offset)`` a plain index
(:mod:`shardcat.catalog.partitions` is the layout, :mod:`shardcat.catalog.rebuild`
the rebuild, revision 0016's; it refuses what it would lose, nothing changed).
With 0, the default, nothing changes: ``shardcat catalog partition`` can
partition the catalog later. The downgrade turns a partitioned ``records``
back into one plain table with its primary key (a plain one stays as it is).
SQLite has no partitions: nothing changes there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _set_partitions(partitions: int) -> None:
    from shardcat.catalog.partitions import set_partitions

    cur: Any = op.get_bind().connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        set_partitions(cur, partitions, by="revision 0017", again="run the migration")
    finally:
        cur.close()


def upgrade() -> None:
    from shardcat.catalog.partitions import configured_partitions

    partitions = configured_partitions()  # a bad value fails on SQLite too: it is a mistake
    if op.get_bind().dialect.name == "postgresql" and partitions:
        _set_partitions(partitions)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _set_partitions(0)
