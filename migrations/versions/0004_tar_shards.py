"""Tar shards: ``shards.kind`` says whether a shard row is a native shard or a tar indexed in place.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

A WebDataset tar registered in place (``shardcat index-tar``) is a shard row
with ``kind = 'tar'``; every other row is ``'native'``. Nothing else changes:
a tar's samples are ``records`` rows like any other (their byte range covers
the sample's members, ``spans`` holds each payload's offset inside that
range, its size and the CRC32C computed while indexing), and their entries
are ``layouts`` rows with codec ``none``. Existing rows become ``'native'``
(the server default), so an upgraded catalog keeps its data as it was.

One ``ALTER TABLE ... ADD COLUMN`` with a named column ``CHECK`` does this on
both SQLite and PostgreSQL, without rebuilding the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE shards ADD COLUMN kind VARCHAR(16) DEFAULT 'native' NOT NULL "
        "CONSTRAINT ck_shards_kind CHECK (kind IN ('native', 'tar'))"
    )


def downgrade() -> None:
    # SQLite cannot drop a column named in a table CHECK (as create_all writes it): batch
    # mode rebuilds the table there; PostgreSQL drops the column and its check in place.
    with op.batch_alter_table("shards") as batch:
        batch.drop_constraint(op.f("ck_shards_kind"), type_="check")
        batch.drop_column("kind")
