"""MDS and LitData indexed in place: ``shards.kind`` may be ``'mds'`` or ``'litdata'``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30

An MDS shard or a LitData chunk registered where it lies (``shardcat
index-mds``, ``index-litdata``) is a shard row of kind ``'mds'`` or
``'litdata'``: its URL is the file, each sample a record whose byte range
is the sample's in the file, each column an entry with the size and CRC32C
computed while indexing. Only the kind's ``CHECK`` constraint is widened
(:mod:`shardcat.catalog.kind_check`), as 0010 did: every row stays as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardcat.catalog.kind_check import drop_kind_rows, set_shard_kinds

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    set_shard_kinds(("native", "tar", "files", "mds", "litdata"))


def downgrade() -> None:
    # Rows of the new kinds cannot be described by the old schema: they go first.
    drop_kind_rows(("mds", "litdata"))
    set_shard_kinds(("native", "tar", "files"))
