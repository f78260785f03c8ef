"""Versioned field values: ``record_fields.added_version`` and ``removed_version``.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-30

``shardcat.update_fields`` changes declared fields' values at a new dataset
version without writing shards; older versions keep reading the values
they read. A value is now a row per (record, field, version that set it):

- ``added_version`` (NOT NULL, default 0): the version that set the value;
  0 for every existing row (stored with its record: seen wherever the
  record is);
- ``removed_version`` (NULL): the version that superseded it;
- the primary key becomes (shard_id, byte_offset, name, added_version).

PostgreSQL adds the columns and swaps the primary key in place. SQLite
cannot change a primary key, so ``record_fields`` (``WITHOUT ROWID``) is
rebuilt: the new table, the rows copied in key order, its indexes made again.

The downgrade keeps what 0014 can express, the latest values: superseded
rows are deleted, and so are the rows of unset values (NULL: no row in 0014).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PK = "pk_record_fields"
_INDEXES = (
    ("ix_record_fields_dataset_id_name_num", ["dataset_id", "name", "num"]),
    ("ix_record_fields_dataset_id_name_text", ["dataset_id", "name", "text"]),
)
# What 0014 can hold of a versioned value: the latest, if it is set.
_LATEST_VALUE = "removed_version IS NULL AND (num IS NOT NULL OR text IS NOT NULL)"
_COLUMNS = ("shard_id", "byte_offset", "name", "dataset_id", "num", "text")


def _rebuild_sqlite(versioned: bool) -> None:
    """Rebuild SQLite's ``record_fields`` with (or without) the version columns and key."""
    columns: list[sa.schema.SchemaItem] = [
        sa.Column("shard_id", sa.Integer(), nullable=False),
        sa.Column("byte_offset", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("num", sa.Double(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
    ]
    key = ["shard_id", "byte_offset", "name"]
    if versioned:
        columns += [
            sa.Column(
                "added_version", sa.BigInteger(), server_default=sa.text("0"), nullable=False
            ),
            sa.Column("removed_version", sa.BigInteger(), nullable=True),
        ]
        key.append("added_version")
    for name, _ in _INDEXES:
        op.drop_index(name, table_name="record_fields")
    op.create_table(
        "_record_fields_0015",
        *columns,
        sa.PrimaryKeyConstraint(*key, name=_PK),
        sqlite_with_rowid=False,
    )
    copied = ", ".join(_COLUMNS)
    where = "" if versioned else f" WHERE {_LATEST_VALUE}"
    op.execute(
        f"INSERT INTO _record_fields_0015 ({copied}) SELECT {copied} FROM record_fields{where} "
        "ORDER BY shard_id, byte_offset, name"
    )
    op.drop_table("record_fields")
    op.rename_table("_record_fields_0015", "record_fields")
    for name, on in _INDEXES:
        op.create_index(name, "record_fields", on)


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(versioned=True)
        return
    op.add_column(
        "record_fields",
        sa.Column("added_version", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column("record_fields", sa.Column("removed_version", sa.BigInteger(), nullable=True))
    op.drop_constraint(_PK, "record_fields", type_="primary")
    op.create_primary_key(
        _PK, "record_fields", ["shard_id", "byte_offset", "name", "added_version"]
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild_sqlite(versioned=False)
        return
    op.execute(f"DELETE FROM record_fields WHERE NOT ({_LATEST_VALUE})")
    op.drop_constraint(_PK, "record_fields", type_="primary")
    op.create_primary_key(_PK, "record_fields", ["shard_id", "byte_offset", "name"])
    op.drop_column("record_fields", "removed_version")
    op.drop_column("record_fields", "added_version")
