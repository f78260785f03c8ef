"""What the migrations that add a shard kind share: the ``shards.kind`` check, widened or narrowed.

Revisions 0010 (``files``) and 0011 (``mds``, ``litdata``) change nothing
but the kinds the ``CHECK`` constraint allows, so an upgraded catalog keeps
every row as it was. SQLite cannot alter a constraint: batch mode rebuilds
the ``shards`` table there (its indexes and the views that read it with it);
PostgreSQL swaps the constraint in place. Called from inside a migration
(Alembic's ``op`` is bound to its connection).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["drop_kind_rows", "set_shard_kinds"]


def set_shard_kinds(kinds: Sequence[str]) -> None:
    """Make ``kinds`` the values ``shards.kind`` allows."""
    import sqlalchemy as sa
    from alembic import op

    allowed = ", ".join(f"'{k}'" for k in kinds)
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        op.drop_constraint(op.f("ck_shards_kind"), "shards", type_="check")
        op.create_check_constraint(op.f("ck_shards_kind"), "shards", f"kind IN ({allowed})")
        return
    # The rebuild drops the table: the views that read it go first and come back as they
    # were, and its indexes are made again from their own text (partial ones included).
    master = "SELECT name, sql FROM sqlite_master WHERE "
    views = bind.execute(sa.text(master + "type = 'view'")).all()
    shards_indexes = "type = 'index' AND tbl_name = 'shards' AND sql IS NOT NULL"
    indexes = bind.execute(sa.text(master + shards_indexes)).all()
    for name, _ in views:
        op.execute(f'DROP VIEW "{name}"')
    with op.batch_alter_table("shards", recreate="always") as batch:
        batch.drop_constraint(op.f("ck_shards_kind"), type_="check")
        batch.create_check_constraint(op.f("ck_shards_kind"), f"kind IN ({allowed})")
    for name, sql in indexes:
        op.execute(f'DROP INDEX IF EXISTS "{name}"')
        op.execute(sql)
    for _, sql in views:
        op.execute(sql)


def drop_kind_rows(kinds: Sequence[str]) -> None:
    """Delete the shards of ``kinds`` and their rows: what a downgrade does before narrowing."""
    from alembic import op

    named = ", ".join(f"'{k}'" for k in kinds)
    shards = f"SELECT id FROM shards WHERE kind IN ({named})"
    op.execute(f"DELETE FROM records WHERE shard_id IN ({shards})")
    op.execute(f"DELETE FROM record_fields WHERE shard_id IN ({shards})")
    op.execute(f"DELETE FROM shards WHERE kind IN ({named})")
