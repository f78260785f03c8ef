"""Folders indexed in place: ``shards.kind`` may be ``'files'``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30

A plain folder of files registered in place (``shardcat index-files``) is
stored as shard rows of kind ``'files'``, one per group of samples: its URL
names the folder and the group, each record's entries are whole files
(``folder/key.entry``) with the size and CRC32C computed while indexing.
Nothing else changes; only the kind's ``CHECK`` constraint is widened
(:mod:`shardcat.catalog.kind_check`), so an upgraded catalog keeps every
row as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardcat.catalog.kind_check import drop_kind_rows, set_shard_kinds

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    set_shard_kinds(("native", "tar", "files"))


def downgrade() -> None:
    # Rows of the new kind cannot be described by the old schema: they go first.
    drop_kind_rows(("files",))
    set_shard_kinds(("native", "tar"))
