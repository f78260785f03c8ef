"""Views of what versions see: live_records, live_shards, records_at and shards_at.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29

The tables hold every version at once (a replaced record beside its
replacement, deleted keys, shards an overwrite retired), so SQL written
against them answers for no version in particular. These views apply the
rule of ``shardcat.catalog.visibility``: ``live_records``/``live_shards``
are what each dataset's latest version reads, ``records_at``/``shards_at``
what each kept version reads (a ``version`` column to filter on).

The text below is a frozen copy of what ``shardcat.catalog.views``
generates from that rule (a migration must create the same views whatever
the code says later); ``tests/catalog/test_views.py`` checks they are the
same. Nothing else changes: existing rows are untouched, and the views
read them at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = {
    "live_records": (
        "SELECT r.dataset_id, d.name AS dataset, r.key, r.key_hash, r.shard_id, s.url AS "
        "shard_url, s.shard_number, s.job_id, r.byte_offset, r.byte_length, r.layout_id FROM "
        "records AS r JOIN shards AS s ON s.id = r.shard_id JOIN datasets AS d ON d.id = "
        "r.dataset_id WHERE s.state = 'committed' AND r.removed_version IS NULL"
    ),
    "live_shards": (
        "SELECT s.dataset_id, d.name AS dataset, s.id AS shard_id, s.url, s.shard_number, "
        "s.kind, s.job_id, s.record_count, s.size_bytes, s.payload_bytes, s.format_major, "
        "s.format_minor, s.added_version, s.committed_at FROM shards AS s JOIN datasets AS d "
        "ON d.id = s.dataset_id WHERE s.state = 'committed' AND s.removed_version IS NULL"
    ),
    "records_at": (
        "SELECT v.number AS version, r.dataset_id, d.name AS dataset, r.key, r.key_hash, "
        "r.shard_id, s.url AS shard_url, s.shard_number, s.job_id, r.byte_offset, "
        "r.byte_length, r.layout_id FROM records AS r JOIN shards AS s ON s.id = r.shard_id "
        "JOIN datasets AS d ON d.id = r.dataset_id JOIN dataset_versions AS v ON v.dataset_id"
        " = r.dataset_id WHERE s.state = 'committed' AND s.added_version <= v.number AND "
        "(r.removed_version IS NULL OR r.removed_version > v.number)"
    ),
    "shards_at": (
        "SELECT v.number AS version, s.dataset_id, d.name AS dataset, s.id AS shard_id, "
        "s.url, s.shard_number, s.kind, s.job_id, s.record_count, s.size_bytes, "
        "s.payload_bytes, s.format_major, s.format_minor, s.added_version, s.committed_at "
        "FROM shards AS s JOIN datasets AS d ON d.id = s.dataset_id JOIN dataset_versions AS "
        "v ON v.dataset_id = s.dataset_id WHERE s.state = 'committed' AND s.added_version <= "
        "v.number AND (s.removed_version IS NULL OR s.removed_version > v.number)"
    ),
}


def upgrade() -> None:
    for name, select in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {select}")


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
