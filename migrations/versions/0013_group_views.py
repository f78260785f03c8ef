"""The record views name each record's column group: ``group_id`` and ``group_name``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30

Since 0012 a key may have one record per column group (docs/GROUPS.md), and
``live_records`` / ``records_at`` list every one of them with nothing to tell
the base's from a group's. They are replaced by the same views with two more
columns, last (a query that names columns by position keeps working):
``group_id`` (0: the base) and ``group_name`` (the group's name; NULL for the
base, which has no ``groups`` row). ``live_shards`` and ``shards_at`` stay.

The text below is a frozen copy of what ``shardcat.catalog.views`` generates
(``tests/catalog/test_views.py`` checks it), and of 0008's record views, which
a downgrade puts back. Rows are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = {
    "live_records": (
        "SELECT r.dataset_id, d.name AS dataset, r.key, r.key_hash, r.shard_id, s.url AS "
        "shard_url, s.shard_number, s.job_id, r.byte_offset, r.byte_length, r.layout_id, "
        "r.group_id, g.name AS group_name FROM records AS r JOIN shards AS s ON s.id = "
        "r.shard_id JOIN datasets AS d ON d.id = r.dataset_id LEFT OUTER JOIN groups AS g ON "
        "g.id = r.group_id WHERE s.state = 'committed' AND r.removed_version IS NULL"
    ),
    "records_at": (
        "SELECT v.number AS version, r.dataset_id, d.name AS dataset, r.key, r.key_hash, "
        "r.shard_id, s.url AS shard_url, s.shard_number, s.job_id, r.byte_offset, "
        "r.byte_length, r.layout_id, r.group_id, g.name AS group_name FROM records AS r JOIN "
        "shards AS s ON s.id = r.shard_id JOIN datasets AS d ON d.id = r.dataset_id LEFT "
        "OUTER JOIN groups AS g ON g.id = r.group_id JOIN dataset_versions AS v ON "
        "v.dataset_id = r.dataset_id WHERE s.state = 'committed' AND s.added_version <= "
        "v.number AND (r.removed_version IS NULL OR r.removed_version > v.number)"
    ),
}

PREVIOUS = {
    "live_records": (
        "SELECT r.dataset_id, d.name AS dataset, r.key, r.key_hash, r.shard_id, s.url AS "
        "shard_url, s.shard_number, s.job_id, r.byte_offset, r.byte_length, r.layout_id FROM "
        "records AS r JOIN shards AS s ON s.id = r.shard_id JOIN datasets AS d ON d.id = "
        "r.dataset_id WHERE s.state = 'committed' AND r.removed_version IS NULL"
    ),
    "records_at": (
        "SELECT v.number AS version, r.dataset_id, d.name AS dataset, r.key, r.key_hash, "
        "r.shard_id, s.url AS shard_url, s.shard_number, s.job_id, r.byte_offset, "
        "r.byte_length, r.layout_id FROM records AS r JOIN shards AS s ON s.id = r.shard_id "
        "JOIN datasets AS d ON d.id = r.dataset_id JOIN dataset_versions AS v ON v.dataset_id"
        " = r.dataset_id WHERE s.state = 'committed' AND s.added_version <= v.number AND "
        "(r.removed_version IS NULL OR r.removed_version > v.number)"
    ),
}


def _replace(views: dict[str, str]) -> None:
    for name in reversed(views):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, select in views.items():
        op.execute(f"CREATE VIEW {name} AS {select}")


def upgrade() -> None:
    _replace(VIEWS)


def downgrade() -> None:
    _replace(PREVIOUS)
