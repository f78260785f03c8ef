"""Rebuild PostgreSQL's ``records`` in place: another column order, or plain <-> partitioned.

PostgreSQL can neither reorder columns (revision 0016) nor turn a table into
a partitioned one (revision 0017, ``shardcat catalog partition``:
:mod:`.partitions`), so ``records`` is made again, in one transaction, under
an exclusive lock: the new table with each column's type, collation, NOT NULL
and default read from the database, its storage options (the TOAST table's
too; a partitioned table's are its partitions') and each column's storage,
options (``n_distinct``) and compression where they differ from the type's,
every row copied by one ``INSERT ... SELECT`` (the parent routes each to its
partition), then its constraints, its indexes (built once over all rows:
packed, like after ``REINDEX``; on a partitioned table one per partition),
the primary key or the partitioned layout's plain index in its place
(:func:`.partitions.key_statement`), foreign keys pointing at it, per-column
statistics targets, its replica identity, the views that read it
(``live_records``, ``records_at``, and any of your own, directly or through
another view: each made again from its own ``pg_get_viewdef``, with its
options), the owner, grants (table and column ones) and comments (the
table's, its columns', indexes' and constraints', the views' and their
columns') of each, and its statistics (``ANALYZE``, which on a partitioned
table also samples the parent, which autovacuum never does). It needs free
disk for a second copy of the table and its indexes while it runs.

What the rebuild would lose unseen is refused up front, nothing changed, with
a :class:`~shardcat.errors.RecordsRebuildError` saying what to drop and make
again after: columns the migrations did not make; triggers, row security
policies or extended statistics on ``records`` or a partition; ``records`` in
a publication; ``records`` UNLOGGED, or it, a partition or an index in a
tablespace of its own; relations other than views reading it (materialized
views); triggers (``INSTEAD OF``), rules or column defaults on a view that
reads it; a partition's own comments or indexes; and, to partition,
what needs the primary key: a replica identity or a foreign key using it, a
comment on the constraint. Not read, and lost: security labels.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import RecordsRebuildError
from .partitions import (
    KEY_COLUMNS,
    PLAIN_INDEX,
    PRIMARY_KEY,
    create_statements,
    key_statement,
    partition_name,
)

__all__ = ["rebuild_records", "replace_record_views"]

_NEW = "_records_new"

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
ORDER BY a.attnum
"""

# Views reading records or one of its partitions, directly or through another view,
# parents before children.
_VIEWS = """
WITH RECURSIVE dep(oid, depth) AS (
    SELECT relid::oid, 0 FROM pg_partition_tree(%(o)s::oid::regclass)
    UNION SELECT %(o)s::oid, 0
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

# records and its partitions (pg_partition_tree has no rows for a plain table).
_TREE = (
    "SELECT %(o)s::oid UNION SELECT relid::oid FROM pg_partition_tree(%(o)s::oid::regclass) "
    "ORDER BY 1"
)

_STORAGE = {"p": "PLAIN", "e": "EXTERNAL", "m": "MAIN", "x": "EXTENDED"}
_COMPRESSION = {"p": "pglz", "l": "lz4"}
_IDENTITY = {"n": "NOTHING", "f": "FULL"}
# pg_get_indexdef of a partitioned table's index says ON ONLY (this table, not its
# partitions): made again on the new table, it must reach the partitions.
_ON_ONLY = re.compile(r'^(CREATE (?:UNIQUE )?INDEX (?:"(?:[^"]|"")*"|\S+) ON )ONLY ')


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


def rebuild_records(
    cur: Any,
    *,
    order: Sequence[str] | None = None,
    partitions: int | None = None,
    by: str,
    again: str,
) -> None:
    """Rebuild ``records`` with its columns in ``order`` and ``partitions`` hash partitions.

    ``order``: every column, in the new order (None: as they are); ``partitions``:
    0 one plain table with its primary key, P > 0 :mod:`.partitions`' layout
    (None: as it is). Through the driver's cursor (statements made of
    definitions the database gives back run as they are: no bind-parameter
    parsing of their text), in the caller's transaction. ``by`` and ``again``
    name the caller in a refusal (``"revision 0016"``, ``"run the migration"``).

    Raises
    ------
    RecordsRebuildError
        What it would lose (the module's docstring); nothing changed.
    """
    cur.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
    cur.execute(
        "SELECT c.oid, quote_ident(n.nspname), c.relkind = 'p', (SELECT count(*) FROM "
        "pg_inherits i WHERE i.inhparent = c.oid) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'records'::regclass"
    )
    table, schema, was_partitioned, had = cur.fetchone()
    if partitions is None:
        partitions = int(had) if was_partitioned else 0
    cur.execute(_TREE, {"o": table})
    tree = [row[0] for row in cur.fetchall()]
    leaves = [oid for oid in tree if oid != table]
    cur.execute(_COLUMNS, (table,))
    columns = dict(cur.fetchall())
    if order is None:
        order = list(columns)
    if set(columns) != set(order):
        raise RecordsRebuildError(
            f"records has the columns {sorted(columns)}, {by} rebuilds exactly "
            f"{sorted(order)}: drop the columns added outside shardcat's migrations, then "
            f"{again}"
        )
    _refuse_what_is_lost(cur, table, tree, leaves, partitions, by, again)
    # A partitioned table holds no rows, so no storage options: its partitions' (the first's).
    owner, options = _relation(cur, table)
    if leaves:
        options = _relation(cur, leaves[0])[1]
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
        f"ALTER COLUMN {column} {setting}"
        for column, storage, column_options, compression in cur.fetchall()
        for setting in (
            f"SET STORAGE {_STORAGE[storage]}" if storage else "",
            f"SET ({column_options})" if column_options else "",
            f"SET COMPRESSION {_COMPRESSION[compression]}" if compression else "",
        )
        if setting
    ]
    comments = _comments(cur, table, "TABLE", "records")
    # Its indexes' comments and its own and referencing constraints' (by name: made again
    # alike). The primary key's index and the partitioned layout's plain index stand for
    # each other: a comment on one goes to the other.
    cur.execute(
        "SELECT i.indexrelid::regclass::text, quote_literal(d.description) FROM pg_index i "
        "JOIN pg_description d ON d.classoid = 'pg_class'::regclass "
        "AND d.objoid = i.indexrelid AND d.objsubid = 0 WHERE i.indrelid = %(o)s",
        {"o": table},
    )
    key_index = PLAIN_INDEX if partitions else PRIMARY_KEY
    for index, text in cur.fetchall():
        bare = index.rsplit(".", 1)[-1]
        named = f"{schema}.{key_index}" if bare in (PLAIN_INDEX, PRIMARY_KEY) else index
        comments.append(f"COMMENT ON INDEX {named} IS {text}")
    cur.execute(
        "SELECT 'COMMENT ON CONSTRAINT ' "
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
    # Its own constraints but the primary key, which the layout makes (CHECKs, foreign keys).
    cur.execute(
        "SELECT quote_ident(conname), pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s AND contype NOT IN ('n', 'p') ORDER BY contype = 'f', conname",
        (table,),
    )
    constraints = cur.fetchall()
    # Indexes that back no constraint, as CREATE INDEX statements; the plain index on
    # the key columns is the layout's.
    cur.execute(
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class x "
        "ON x.oid = i.indexrelid WHERE i.indrelid = %(o)s AND x.relname <> %(plain)s "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid "
        "AND c.conrelid = %(o)s) ORDER BY i.indexrelid",
        {"o": table, "plain": PLAIN_INDEX},
    )
    indexes = [_ON_ONLY.sub(r"\1", row[0]) for row in cur.fetchall()]
    # Other tables' foreign keys pointing at it (shardcat declares none: docs/CATALOG.md).
    cur.execute(
        "SELECT conrelid::regclass::text, quote_ident(conname), pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE confrelid = %(o)s AND conrelid <> %(o)s AND contype = 'f'",
        {"o": table},
    )
    referencing = cur.fetchall()
    views = _views(cur, table, by, again)

    for other, name, _ in referencing:
        cur.execute(f"ALTER TABLE {other} DROP CONSTRAINT {name}")
    for name, *_ in reversed(views):
        cur.execute(f"DROP VIEW {name}")
    body = ", ".join(f"{column} {columns[column]}" for column in order)
    # Beside it (the schema records is in, whatever the search path), renamed after.
    made = create_statements(schema, _NEW, body, partitions)
    made_leaves = [f"{schema}.{partition_name(i, _NEW)}" for i in range(partitions)]
    if options and not partitions:
        made[0] += f" WITH ({options})"
    for statement in made:
        cur.execute(statement)
    for leaf in made_leaves:
        if options:
            cur.execute(f"ALTER TABLE {leaf} SET ({options})")
    # Before the rows: storage and compression apply as written. Set on each partition
    # too: a partitioned table passes some on (storage) and not others (n_distinct).
    for relation in (f"{schema}.{_NEW}", *made_leaves):
        for setting in column_settings:
            cur.execute(f"ALTER TABLE ONLY {relation} {setting}")
    listed = ", ".join(order)
    # One statement, in the table's physical order (a shard's rows stay together).
    cur.execute(f"INSERT INTO {schema}.{_NEW} ({listed}) SELECT {listed} FROM records")
    cur.execute("DROP TABLE records")
    cur.execute(f"ALTER TABLE {schema}.{_NEW} RENAME TO records")
    for i in range(partitions):
        cur.execute(f"ALTER TABLE {schema}.{partition_name(i, _NEW)} RENAME TO {partition_name(i)}")
    leaves_now = [f"{schema}.{partition_name(i)}" for i in range(partitions)]
    cur.execute(key_statement(partitions))
    for name, definition in constraints:
        cur.execute(f"ALTER TABLE records ADD CONSTRAINT {name} {definition}")
    for definition in indexes:
        cur.execute(definition)
    for other, name, definition in referencing:
        cur.execute(f"ALTER TABLE {other} ADD CONSTRAINT {name} {definition}")
    for relation in ("records", *leaves_now):
        for column, target in targets:
            cur.execute(
                f"ALTER TABLE ONLY {relation} ALTER COLUMN {column} SET STATISTICS {target}"
            )
    if identity != "d":
        using = f"USING INDEX {identity_index}" if identity == "i" else _IDENTITY[identity]
        cur.execute(f"ALTER TABLE records REPLICA IDENTITY {using}")
    for relation in ("records", *leaves_now):
        cur.execute(f"ALTER TABLE {relation} OWNER TO {owner}")
    for statement in table_grants + comments:
        cur.execute(statement)
    _create_views(cur, views, {})
    # Lookups are planned from statistics (catalog/statistics.py): the new table has none.
    cur.execute("ANALYZE records")


def replace_record_views(cur: Any, definitions: dict[str, str], *, by: str, again: str) -> None:
    """Make every view reading ``records`` again, those in ``definitions`` from that ``SELECT``.

    The views users built on shardcat's come back from their own definitions,
    with their owners, options, grants and comments, as :func:`rebuild_records`
    makes them. Through the driver's cursor, in the caller's transaction.

    Raises
    ------
    RecordsRebuildError
        A view has what this would not make again (triggers, rules, column
        defaults), or a materialized view reads records; nothing changed.
    """
    cur.execute("SELECT 'records'::regclass::oid")
    views = _views(cur, cur.fetchone()[0], by, again)
    for name, *_ in reversed(views):
        cur.execute(f"DROP VIEW {name}")
    _create_views(cur, views, definitions)


def _create_views(cur: Any, views: list[tuple[Any, ...]], definitions: dict[str, str]) -> None:
    """Create ``views`` (from :func:`_views`) again, parents first; ``definitions`` override theirs."""
    for name, definition, view_owner, view_options, extra in views:
        with_options = f" WITH ({view_options})" if view_options else ""
        cur.execute(f"CREATE VIEW {name}{with_options} AS {definitions.get(name, definition)}")
        cur.execute(f"ALTER VIEW {name} OWNER TO {view_owner}")
        for statement in extra:
            cur.execute(statement)


def _refuse_what_is_lost(
    cur: Any,
    table: int,
    tree: list[int],
    leaves: list[int],
    partitions: int,
    by: str,
    again: str,
) -> None:
    """Raise RecordsRebuildError for what DROP TABLE would take along unseen."""
    cur.execute(
        "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = ANY(%(t)s::oid[]) AND NOT tgisinternal) "
        "+ (SELECT count(*) FROM pg_policy WHERE polrelid = ANY(%(t)s::oid[])) "
        "+ (SELECT count(*) FROM pg_statistic_ext WHERE stxrelid = ANY(%(t)s::oid[]))",
        {"t": tree},
    )
    if cur.fetchone()[0]:
        raise RecordsRebuildError(
            "records has triggers, row security policies or extended statistics, which "
            f"{by} does not rebuild with it: drop them, {again}, and create them again"
        )
    # Any publication with records in it (FOR TABLE, FOR ALL TABLES, FOR TABLES IN SCHEMA):
    # the latter two would also send the copy as inserts into the new table's name.
    cur.execute(
        "SELECT quote_ident(p.pubname), p.puballtables OR NOT EXISTS (SELECT 1 FROM "
        "pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = %(o)s) FROM pg_publication p "
        "WHERE EXISTS (SELECT 1 FROM pg_publication_tables t JOIN pg_class c "
        "ON c.relname = t.tablename JOIN pg_namespace n ON n.oid = c.relnamespace "
        "AND n.nspname = t.schemaname WHERE t.pubname = p.pubname AND c.oid = ANY(%(t)s::oid[])) "
        "ORDER BY 1",
        {"o": table, "t": tree},
    )
    publications = cur.fetchall()
    if publications:
        raise RecordsRebuildError(
            f"records is in the publications {', '.join(p for p, _ in publications)}, which "
            f"{by} does not carry over to the rebuilt table: "
            + "; ".join(
                f"DROP PUBLICATION {p}" if whole else f"ALTER PUBLICATION {p} DROP TABLE records"
                for p, whole in publications
            )
            + f", {again}, and make them again as they were (subscribers then "
            "copy records anew)"
        )
    # Where and how it is stored: a new table gets the defaults.
    cur.execute(
        "SELECT count(*) FROM pg_class c WHERE c.oid = ANY(%(t)s::oid[]) AND (c.relpersistence <> 'p' "
        "OR c.reltablespace <> 0 OR EXISTS (SELECT 1 FROM pg_index i JOIN pg_class x "
        "ON x.oid = i.indexrelid WHERE i.indrelid = c.oid AND x.reltablespace <> 0))",
        {"t": tree},
    )
    if cur.fetchone()[0]:
        raise RecordsRebuildError(
            f"records, a partition or their indexes are UNLOGGED or in a tablespace of their "
            f"own, which {by} does not rebuild them as: ALTER TABLE records SET LOGGED, and "
            "SET TABLESPACE to the database's default (ALTER INDEX ... SET TABLESPACE for its "
            f"indexes), {again}, and set them again"
        )
    # A partition's own comments or indexes (not its share of the parent's). Its grants
    # are not read: reads go through the parent, whose grants are (new partitions get the
    # schema's default privileges, as `create-readonly-role` sets them).
    cur.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.oid = ANY(%(l)s::oid[]) AND "
        "(EXISTS (SELECT 1 FROM pg_description d WHERE d.classoid = "
        "'pg_class'::regclass AND d.objoid = c.oid) OR EXISTS (SELECT 1 FROM pg_index i WHERE "
        "i.indrelid = c.oid AND NOT i.indexrelid IN (SELECT inhrelid FROM pg_inherits))) "
        "ORDER BY 1",
        {"l": leaves},
    )
    own = [row[0] for row in cur.fetchall()]
    if own:
        raise RecordsRebuildError(
            f"the partitions {', '.join(own)} have comments or indexes of their own, which "
            f"{by} does not make again (it makes the partitions anew): drop them (make them "
            f"on records instead), {again}"
        )
    if not partitions:
        return
    # What needs the primary key a partitioned records has not.
    cur.execute(
        "SELECT (SELECT relreplident FROM pg_class WHERE oid = %(o)s) = 'i' "
        "OR EXISTS (SELECT 1 FROM pg_constraint WHERE confrelid = %(o)s AND conrelid <> %(o)s) "
        "OR EXISTS (SELECT 1 FROM pg_constraint c JOIN pg_description d ON d.classoid = "
        "'pg_constraint'::regclass AND d.objoid = c.oid WHERE c.conrelid = %(o)s "
        "AND c.contype = 'p')",
        {"o": table},
    )
    if cur.fetchone()[0]:
        raise RecordsRebuildError(
            f"records' primary key {PRIMARY_KEY} ({', '.join(KEY_COLUMNS)}) is its replica "
            "identity, a foreign key's target or commented on, and a partitioned records has "
            f"no primary key ({by}): ALTER TABLE records REPLICA IDENTITY DEFAULT, drop the "
            f"foreign keys, COMMENT ON CONSTRAINT {PRIMARY_KEY} ON records IS NULL, {again}"
        )


def _views(cur: Any, table: int, by: str, again: str) -> list[tuple[Any, ...]]:
    """The views reading records, parents first: name, definition, owner, options, extras."""
    cur.execute(_VIEWS, {"o": table})
    views = []
    for oid, name, kind in cur.fetchall():
        if kind != "v":
            raise RecordsRebuildError(
                f"{name} (relkind {kind!r}) depends on records, and {by} rebuilds "
                f"only the views around it: drop it, {again}, and create it again"
            )
        # What DROP VIEW takes along that its definition does not say.
        cur.execute(
            "SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = %(o)s AND NOT tgisinternal) "
            "+ (SELECT count(*) FROM pg_rewrite WHERE ev_class = %(o)s AND rulename <> '_RETURN') "
            "+ (SELECT count(*) FROM pg_attrdef WHERE adrelid = %(o)s)",
            {"o": oid},
        )
        if cur.fetchone()[0]:
            raise RecordsRebuildError(
                f"the view {name}, which reads records, has triggers, rules or column "
                f"defaults, which {by} does not make again with it: drop them, {again}, "
                "and create them again"
            )
        cur.execute("SELECT pg_get_viewdef(%s)", (oid,))
        definition = cur.fetchone()[0].rstrip().rstrip(";")
        extra = _grants(cur, oid, name) + _comments(cur, oid, "VIEW", name)
        views.append((name, definition, *_relation(cur, oid), extra))
    return views
