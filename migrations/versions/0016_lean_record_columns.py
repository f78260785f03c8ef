"""Lean rows: ``records`` columns in an order PostgreSQL stores without alignment padding.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-30

PostgreSQL aligns each 8-byte column of a heap row to 8 bytes and each 4-byte
one to 4. In 0015's order (``shard_id`` int4, ``byte_offset`` int8,
``dataset_id`` int4, ``key_hash`` int8, ``key``, ``byte_length`` int8, ...)
a row pays 4 + 4 bytes of padding before the second and fourth columns, up to
7 before ``byte_length`` and up to 3 before ``group_id``: 8-16 bytes a row
(measured: 16 with key text and two entries, 8 hash-only; docs/SCALE.md §3).
The lean order puts the 8-byte columns first (``removed_version``, NULL
while live, takes no bytes then and needs no padding when set), the 4-byte
ones after them and the two variable-length ones (``key``, ``spans``, which
need no alignment at their sizes) last.

PostgreSQL cannot reorder columns, so ``records`` is rebuilt in one
transaction, under an exclusive lock: the new table with each column's type,
collation, NOT NULL and default read from the database, its storage options
(the TOAST table's too) and each column's storage, options (``n_distinct``)
and compression where they differ from the type's, every row copied by one
``INSERT ... SELECT`` (in the table's physical order), then its constraints
(the primary key ``pk_records``), its indexes (built once over all rows:
packed, like after ``REINDEX``), foreign keys pointing at it, per-column
statistics targets, its replica identity, the views that read it
(``live_records``, ``records_at``, and any of your own, directly or through
another view: each made again from its own ``pg_get_viewdef``, with its
options), the owner, grants (table and column ones) and comments (the
table's, its columns', indexes' and constraints', the views' and their
columns') of each, and its statistics (``ANALYZE``). It needs free disk for a
second copy of the table and its indexes while it runs. The downgrade
rebuilds 0015's order the same way.

What the rebuild would lose unseen is refused up front, nothing changed, the
message saying what to drop and make again after: columns the migrations did
not make; triggers, row security policies or extended statistics on
``records``; ``records`` in a publication (``FOR TABLE``, ``FOR ALL TABLES``, ``FOR
TABLES IN SCHEMA``: the latter would also publish the copy as inserts into
``_records_0016``); ``records``
UNLOGGED, or it or an index in a tablespace of its own; relations other than
views reading it (materialized views); triggers (``INSTEAD OF``), rules or
column defaults on a view that reads it. Not read, and lost: security labels.

SQLite stores a row's values as variable-length integers and bytes with no
alignment: the order costs nothing there (measured with ``dbstat``), so this
revision leaves a SQLite catalog as it is. A catalog created at 0016 has the
lean order on both (the models declare it); SQL should name columns, never
rely on their position.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LEAN = (
    "byte_offset",
    "key_hash",
    "byte_length",
    "removed_version",
    "shard_id",
    "dataset_id",
    "layout_id",
    "group_id",
    "key",
    "spans",
)
PREVIOUS = (
    "shard_id",
    "byte_offset",
    "dataset_id",
    "key_hash",
    "key",
    "byte_length",
    "layout_id",
    "spans",
    "removed_version",
    "group_id",
)

_NEW = "_records_0016"

_COLUMNS = """
SELECT a.attname,
       format_type(a.atttypid, a.atttypmod)
       || CASE WHEN a.attcollation <> t.typcollation
               THEN ' COLLATE ' || quote_ident(co.collname) ELSE '' END
       || CASE WHEN a.attnotnull
               THEN COALESCE(' CONSTRAINT ' || quote_ident(nn.conname), '') || ' NOT NULL'
               ELSE '' END
       || COALESCE(' DEFAULT ' || pg_get_expr(ad.adbin, ad.adrelid), '')
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_collation co ON co.oid = a.attcollation
LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
-- PostgreSQL 18 on: NOT NULL constraints have names (else the new table's would be made)
LEFT JOIN pg_constraint nn ON nn.conrelid = a.attrelid AND nn.contype = 'n'
    AND nn.conkey = ARRAY[a.attnum]
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
"""

# Views reading records, directly or through another view, parents before children.
_VIEWS = """
WITH RECURSIVE dep(oid, depth) AS (
    SELECT %s::oid, 0
    UNION ALL
    SELECT rw.ev_class, dep.depth + 1
    FROM dep
    JOIN pg_depend d ON d.refobjid = dep.oid AND d.classid = 'pg_rewrite'::regclass
    JOIN pg_rewrite rw ON rw.oid = d.objid
    WHERE rw.ev_class <> dep.oid
)
SELECT c.oid, c.oid::regclass::text, c.relkind
FROM dep JOIN pg_class c ON c.oid = dep.oid
WHERE dep.depth > 0
GROUP BY c.oid
ORDER BY max(dep.depth), c.oid
"""


_STORAGE = {"p": "PLAIN", "e": "EXTERNAL", "m": "MAIN", "x": "EXTENDED"}
_COMPRESSION = {"p": "pglz", "l": "lz4"}
_IDENTITY = {"n": "NOTHING", "f": "FULL"}


def _has_compression(cur: Any) -> bool:
    """Whether columns have a compression method of their own (PostgreSQL 14 on)."""
    cur.execute("SELECT current_setting('server_version_num')::int >= 140000")
    return bool(cur.fetchone()[0])


def _grants(cur: Any, oid: int, name: str) -> list[str]:
    """GRANT statements giving ``name`` what relation ``oid`` and its columns grant (its owner's own rights aside)."""
    cur.execute(
        "SELECT a.privilege_type, NULL, CASE WHEN a.grantee = 0 THEN 'PUBLIC' "
        "ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.is_grantable "
        "FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = %(o)s AND a.grantee <> c.relowner "
        "UNION ALL SELECT a.privilege_type, quote_ident(t.attname), CASE WHEN a.grantee = 0 "
        "THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.is_grantable "
        "FROM pg_class c JOIN pg_attribute t ON t.attrelid = c.oid, aclexplode(t.attacl) a "
        "WHERE c.oid = %(o)s AND t.attnum > 0 AND NOT t.attisdropped AND a.grantee <> c.relowner",
        {"o": oid},
    )
    return [
        f"GRANT {privilege}{f' ({column})' if column else ''} ON {name} TO {grantee}"
        f"{' WITH GRANT OPTION' if grantable else ''}"
        for privilege, column, grantee, grantable in cur.fetchall()
    ]


def _comments(cur: Any, oid: int, kind: str, name: str) -> list[str]:
    """COMMENT statements giving ``name`` (a ``kind``: TABLE, VIEW) relation ``oid``'s comments and its columns'."""
    cur.execute(
        "SELECT quote_ident(a.attname), quote_literal(d.description) FROM pg_description d "
        "LEFT JOIN pg_attribute a ON a.attrelid = d.objoid AND a.attnum = d.objsubid "
        "WHERE d.classoid = 'pg_class'::regclass AND d.objoid = %s ORDER BY d.objsubid",
        (oid,),
    )
    return [
        f"COMMENT ON {f'COLUMN {name}.{column}' if column else f'{kind} {name}'} IS {text}"
        for column, text in cur.fetchall()
    ]


def _relation(cur: Any, oid: int) -> tuple[str, str]:
    """A relation's owner (quoted) and its storage options, its TOAST table's too (``''``: none)."""
    cur.execute(
        "SELECT quote_ident(pg_get_userbyid(c.relowner)), array_to_string(coalesce(c.reloptions, "
        "'{}') || coalesce((SELECT array_agg('toast.' || o) FROM pg_class t, unnest(t.reloptions) o "
        "WHERE t.oid = c.reltoastrelid), '{}'), ', ') FROM pg_class c WHERE c.oid = %s",
        (oid,),
    )
    owner, options = cur.fetchone()
    return owner, options


def _rebuild(order: Sequence[str]) -> None:
    """Rebuild PostgreSQL's ``records`` with its columns in ``order``; rows and all around them kept.

    Through the driver's cursor: statements made of definitions the database
    gives back are run as they are (no bind-parameter parsing of their text).
    """
    cur: Any = op.get_bind().connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        _rebuild_with(cur, order)
    finally:
        cur.close()


def _rebuild_with(cur: Any, order: Sequence[str]) -> None:
    cur.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
    cur.execute(
        "SELECT c.oid, quote_ident(n.nspname) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'records'::regclass"
    )
    table, schema = cur.fetchone()
    cur.execute(_COLUMNS, (table,))
    columns = dict(cur.fetchall())
    if set(columns) != set(order):
        raise RuntimeError(
            f"records has the columns {sorted(columns)}, revision 0016 rebuilds exactly "
            f"{sorted(order)}: drop the columns added outside shardcat's migrations, then "
            "run the migration again"
        )
    # What DROP TABLE would take along unseen: refused rather than lost.
    cur.execute(
        "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = %(o)s AND NOT tgisinternal) "
        "+ (SELECT count(*) FROM pg_policy WHERE polrelid = %(o)s) "
        "+ (SELECT count(*) FROM pg_statistic_ext WHERE stxrelid = %(o)s)",
        {"o": table},
    )
    if cur.fetchone()[0]:
        raise RuntimeError(
            "records has triggers, row security policies or extended statistics, which "
            "revision 0016 does not rebuild with it: drop them, run the migration, and "
            "create them again"
        )
    # Any publication with records in it (FOR TABLE, FOR ALL TABLES, FOR TABLES IN SCHEMA):
    # the latter two would also send the copy as inserts into the new table's name.
    cur.execute(
        "SELECT quote_ident(p.pubname), p.puballtables OR NOT EXISTS (SELECT 1 FROM "
        "pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = %(o)s) FROM pg_publication p "
        "WHERE EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname "
        "AND t.schemaname = (SELECT nspname FROM pg_namespace n JOIN pg_class c "
        "ON c.relnamespace = n.oid WHERE c.oid = %(o)s) AND t.tablename = 'records') ORDER BY 1",
        {"o": table},
    )
    publications = cur.fetchall()
    if publications:
        raise RuntimeError(
            f"records is in the publications {', '.join(p for p, _ in publications)}, which "
            "revision 0016 does not carry over to the rebuilt table: "
            + "; ".join(
                f"DROP PUBLICATION {p}" if whole else f"ALTER PUBLICATION {p} DROP TABLE records"
                for p, whole in publications
            )
            + ", run the migration, and make them again as they were (subscribers then "
            "copy records anew)"
        )
    # Where and how it is stored: a new table gets the defaults.
    cur.execute(
        "SELECT c.relpersistence, (SELECT count(*) FROM pg_class x WHERE x.reltablespace <> 0 AND "
        "(x.oid = c.oid OR x.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = c.oid))) "
        "FROM pg_class c WHERE c.oid = %s",
        (table,),
    )
    persistence, elsewhere = cur.fetchone()
    if persistence != "p" or elsewhere:
        raise RuntimeError(
            "records or its indexes are UNLOGGED or in a tablespace of their own, which "
            "revision 0016 does not rebuild them as: ALTER TABLE records SET LOGGED, and SET "
            "TABLESPACE to the database's default (ALTER INDEX ... SET TABLESPACE for its "
            "indexes), run the migration, and set them again"
        )
    owner, options = _relation(cur, table)
    table_grants = _grants(cur, table, "records")
    cur.execute(
        "SELECT quote_ident(attname), attstattarget FROM pg_attribute WHERE attrelid = %s "
        "AND attnum > 0 AND NOT attisdropped AND attstattarget >= 0",
        (table,),
    )
    targets = cur.fetchall()
    # Per-column storage, options and compression where they differ from the type's.
    cur.execute(
        "SELECT quote_ident(a.attname), CASE WHEN a.attstorage <> t.typstorage THEN a.attstorage "
        "END, array_to_string(a.attoptions, ', '), "
        + ("a.attcompression " if _has_compression(cur) else "'' ")
        + "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = %s "
        "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (table,),
    )
    column_settings = [
        f"ALTER TABLE {schema}.{_NEW} ALTER COLUMN {column} {setting}"
        for column, storage, options, compression in cur.fetchall()
        for setting in (
            f"SET STORAGE {_STORAGE[storage]}" if storage else "",
            f"SET ({options})" if options else "",
            f"SET COMPRESSION {_COMPRESSION[compression]}" if compression else "",
        )
        if setting
    ]
    comments = _comments(cur, table, "TABLE", "records")
    # Its indexes' comments and its own and referencing constraints' (by name: made again alike).
    cur.execute(
        "SELECT 'COMMENT ON INDEX ' || i.indexrelid::regclass::text || ' IS ' "
        "|| quote_literal(d.description) FROM pg_index i JOIN pg_description d "
        "ON d.classoid = 'pg_class'::regclass AND d.objoid = i.indexrelid AND d.objsubid = 0 "
        "WHERE i.indrelid = %(o)s UNION ALL SELECT 'COMMENT ON CONSTRAINT ' "
        "|| quote_ident(c.conname) || ' ON ' || c.conrelid::regclass::text || ' IS ' "
        "|| quote_literal(d.description) FROM pg_constraint c JOIN pg_description d "
        "ON d.classoid = 'pg_constraint'::regclass AND d.objoid = c.oid "
        "WHERE c.conrelid = %(o)s OR c.confrelid = %(o)s",
        {"o": table},
    )
    comments += [row[0] for row in cur.fetchall()]
    cur.execute(
        "SELECT c.relreplident, (SELECT quote_ident(x.relname) FROM pg_index i "
        "JOIN pg_class x ON x.oid = i.indexrelid WHERE i.indrelid = c.oid AND i.indisreplident) "
        "FROM pg_class c WHERE c.oid = %s",
        (table,),
    )
    identity, identity_index = cur.fetchone()
    # Its own constraints (the primary key; CHECKs and foreign keys if any).
    cur.execute(
        "SELECT quote_ident(conname), pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s AND contype <> 'n' ORDER BY contype = 'f', conname",
        (table,),
    )
    constraints = cur.fetchall()
    # Indexes that back no constraint, as CREATE INDEX statements.
    cur.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %(o)s "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid "
        "AND c.conrelid = %(o)s) ORDER BY i.indexrelid",
        {"o": table},
    )
    indexes = [row[0] for row in cur.fetchall()]
    # Other tables' foreign keys pointing at it (shardcat declares none: docs/CATALOG.md).
    cur.execute(
        "SELECT conrelid::regclass::text, quote_ident(conname), pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE confrelid = %(o)s AND conrelid <> %(o)s AND contype = 'f'",
        {"o": table},
    )
    referencing = cur.fetchall()
    cur.execute(_VIEWS, (table,))
    views = []
    for oid, name, kind in cur.fetchall():
        if kind != "v":
            raise RuntimeError(
                f"{name} (relkind {kind!r}) depends on records, and revision 0016 rebuilds "
                "only the views around it: drop it, run the migration, and create it again"
            )
        # What DROP VIEW takes along that its definition does not say.
        cur.execute(
            "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = %(o)s AND NOT tgisinternal) "
            "+ (SELECT count(*) FROM pg_rewrite WHERE ev_class = %(o)s AND rulename <> '_RETURN') "
            "+ (SELECT count(*) FROM pg_attrdef WHERE adrelid = %(o)s)",
            {"o": oid},
        )
        if cur.fetchone()[0]:
            raise RuntimeError(
                f"the view {name}, which reads records, has triggers, rules or column "
                "defaults, which revision 0016 does not make again with it: drop them, run "
                "the migration, and create them again"
            )
        cur.execute("SELECT pg_get_viewdef(%s)", (oid,))
        definition = cur.fetchone()[0].rstrip().rstrip(";")
        extra = _grants(cur, oid, name) + _comments(cur, oid, "VIEW", name)
        views.append((name, definition, *_relation(cur, oid), extra))

    for other, name, _ in referencing:
        cur.execute(f"ALTER TABLE {other} DROP CONSTRAINT {name}")
    for name, *_ in reversed(views):
        cur.execute(f"DROP VIEW {name}")
    body = ", ".join(f"{column} {columns[column]}" for column in order)
    # Beside it (the schema records is in, whatever the search path), renamed after.
    cur.execute(f"CREATE TABLE {schema}.{_NEW} ({body}){f' WITH ({options})' if options else ''}")
    for setting in column_settings:  # before the rows: storage and compression apply as written
        cur.execute(setting)
    listed = ", ".join(order)
    # One statement, in the table's physical order (a shard's rows stay together).
    cur.execute(f"INSERT INTO {schema}.{_NEW} ({listed}) SELECT {listed} FROM records")
    cur.execute("DROP TABLE records")
    cur.execute(f"ALTER TABLE {schema}.{_NEW} RENAME TO records")
    for name, definition in constraints:
        cur.execute(f"ALTER TABLE records ADD CONSTRAINT {name} {definition}")
    for definition in indexes:
        cur.execute(definition)
    for other, name, definition in referencing:
        cur.execute(f"ALTER TABLE {other} ADD CONSTRAINT {name} {definition}")
    for column, target in targets:
        cur.execute(f"ALTER TABLE records ALTER COLUMN {column} SET STATISTICS {target}")
    if identity != "d":
        using = f"USING INDEX {identity_index}" if identity == "i" else _IDENTITY[identity]
        cur.execute(f"ALTER TABLE records REPLICA IDENTITY {using}")
    cur.execute(f"ALTER TABLE records OWNER TO {owner}")
    for statement in table_grants + comments:
        cur.execute(statement)
    for name, definition, view_owner, view_options, extra in views:
        with_options = f" WITH ({view_options})" if view_options else ""
        cur.execute(f"CREATE VIEW {name}{with_options} AS {definition}")
        cur.execute(f"ALTER VIEW {name} OWNER TO {view_owner}")
        for statement in extra:
            cur.execute(statement)
    # Lookups are planned from statistics (catalog/statistics.py): the new table has none.
    cur.execute("ANALYZE records")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(LEAN)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _rebuild(PREVIOUS)
