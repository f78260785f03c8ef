"""One live shard row per file: a unique index on (dataset_id, url) over staged and committed rows.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

Before this revision two rows of one dataset could name the same file (a
job's staged row beside another job's committed one, or a row registered
again after ``remove_shard``), and gc could delete a file that a committed
row still named. The index makes the catalog refuse a second live row.

Existing catalogs may already hold such pairs. The upgrade keeps, per
(dataset, url), the one row that can match the file as it is now — the
committed row registered last, else the staged row registered last — and
retires the others: state ``deleted``, their records removed. Their file is
untouched (the surviving row names it, so gc keeps it); ``shardcat verify``
then tells whether the survivor matches the file.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LIVE = "state IN ('staged', 'committed')"

# Live rows that lose to another live row of the same (dataset, url): committed
# beats staged, then the later registration (higher id) wins.
_LOSERS = sa.text(
    "SELECT s.id FROM shards s WHERE s.state IN ('staged', 'committed') AND EXISTS ("
    " SELECT 1 FROM shards o WHERE o.dataset_id = s.dataset_id AND o.url = s.url"
    " AND o.id <> s.id AND o.state IN ('staged', 'committed')"
    " AND (CASE WHEN o.state = 'committed' THEN 1 ELSE 0 END,"
    "      o.id) > (CASE WHEN s.state = 'committed' THEN 1 ELSE 0 END, s.id))"
)


def upgrade() -> None:
    conn = op.get_bind()
    losers = [row[0] for row in conn.execute(_LOSERS)]
    for i in range(0, len(losers), 500):
        chunk = losers[i : i + 500]
        conn.execute(
            sa.text("DELETE FROM records WHERE shard_id IN :ids").bindparams(
                sa.bindparam("ids", expanding=True)
            ),
            {"ids": chunk},
        )
        conn.execute(
            sa.text(
                "UPDATE shards SET state = 'deleted', deleted_at = CURRENT_TIMESTAMP "
                "WHERE id IN :ids"
            ).bindparams(sa.bindparam("ids", expanding=True)),
            {"ids": chunk},
        )
    with op.batch_alter_table("shards") as batch:
        batch.create_index(
            "uq_shards_live_url",
            ["dataset_id", "url"],
            unique=True,
            sqlite_where=sa.text(LIVE),
            postgresql_where=sa.text(LIVE),
        )


def downgrade() -> None:
    with op.batch_alter_table("shards") as batch:
        batch.drop_index("uq_shards_live_url")
