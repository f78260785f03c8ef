"""The record views gain ``key_sorted``: a key range asked of them can read the key index.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01

Since 0018 the key-order index ``ix_records_dataset_id_key`` holds only rows
whose ``key_sorted`` is true, and a statement reads it only if its WHERE
clause says ``key_sorted`` too (docs/CATALOG.md, "Unsorted datasets").
``live_records`` and ``records_at`` did not have the column, so a key range
asked of them scanned the dataset's rows. They get it as their last column
(a query that names columns by position keeps working).

On PostgreSQL the views are replaced in place (``CREATE OR REPLACE VIEW``
may add columns at the end): what users built on them (views, triggers,
grants, comments) stays. SQLite drops and creates them, and makes their
triggers again; a view built on them is resolved again when it is next read.
The downgrade puts back 0013's views; on PostgreSQL every view reading
``records`` is made again around them (views users built on them, with their
grants and comments, as 0016's rebuild does), and one with triggers or rules
is refused with what to do.

The text below is a frozen copy of what ``shardcat.catalog.views`` generates
(``tests/catalog/test_views.py`` checks it). Rows are untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

VIEWS = {
    "live_records": (
        "SELECT r.dataset_id, d.name AS dataset, r.key, r.key_hash, r.shard_id, s.url AS "
        "shard_url, s.shard_number, s.job_id, r.byte_offset, r.byte_length, r.layout_id, "
        "r.group_id, g.name AS group_name, r.key_sorted FROM records AS r JOIN shards AS s ON "
        "s.id = r.shard_id JOIN datasets AS d ON d.id = r.dataset_id LEFT OUTER JOIN groups AS "
        "g ON g.id = r.group_id WHERE s.state = 'committed' AND r.removed_version IS NULL"
    ),
    "records_at": (
        "SELECT v.number AS version, r.dataset_id, d.name AS dataset, r.key, r.key_hash, "
        "r.shard_id, s.url AS shard_url, s.shard_number, s.job_id, r.byte_offset, "
        "r.byte_length, r.layout_id, r.group_id, g.name AS group_name, r.key_sorted FROM "
        "records AS r JOIN shards AS s ON s.id = r.shard_id JOIN datasets AS d ON d.id = "
        "r.dataset_id LEFT OUTER JOIN groups AS g ON g.id = r.group_id JOIN dataset_versions "
        "AS v ON v.dataset_id = r.dataset_id WHERE s.state = 'committed' AND s.added_version "
        "<= v.number AND (r.removed_version IS NULL OR r.removed_version > v.number)"
    ),
}


# 0013's record views, which the downgrade puts back (frozen too: a revision's SQL stays
# what it was; tests/catalog/test_views.py checks this is 0013's text).
PREVIOUS = {
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


def _sqlite_replace(views: dict[str, str]) -> None:
    """Drop and create ``views``; their triggers, which DROP VIEW takes along, made again."""
    triggers = [
        sql
        for (sql,) in op.get_bind().execute(
            sa.text(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' "
                "AND tbl_name IN ('live_records', 'records_at')"
            )
        )
    ]
    for name in reversed(views):
        op.execute(f"DROP VIEW IF EXISTS {name}")
    for name, select in views.items():
        op.execute(f"CREATE VIEW {name} AS {select}")
    for sql in triggers:
        op.execute(sql)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, select in VIEWS.items():
            op.execute(f"CREATE OR REPLACE VIEW {name} AS {select}")
    else:
        _sqlite_replace(VIEWS)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _sqlite_replace(PREVIOUS)
        return
    # A column cannot leave a view in place: every view reading records is made again
    # (the views users built on these too, with their grants and comments), 0013's two
    # from their text. A view that reads key_sorted, or one with triggers or rules, stops it.
    from shardcat.catalog.rebuild import replace_record_views

    cur: Any = op.get_bind().connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        replace_record_views(cur, PREVIOUS, by="revision 0019's downgrade", again="downgrade")
    finally:
        cur.close()
