"""What a version sees: the one definition of which records and shards each version reads.

A record is **visible at version V** iff its shard is committed with
``added_version <= V`` and the record's ``removed_version`` is NULL or greater
than ``V``; the latest version reads the committed shards' records whose
``removed_version`` is NULL (docs/LIFECYCLE.md §1). Each function here
returns that rule, or a named piece of it, as a SQLAlchemy expression over
the columns it is given: a mapped class (``Record``, ``Shard``), an
``aliased(...)`` one, or a table's ``.c``. ORM and Core statements call them
directly.

Statements kept as SQL text (the point lookup's prepared statements, the
commit's correlated updates) embed :func:`sql`: the same expression rendered
once, as text, for the aliases and values the statement names. No other
module writes the rule by hand.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, column, literal_column, or_, select, table
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.sql import operators

__all__ = [
    "added_after",
    "changed_since",
    "committed",
    "gone_by",
    "hidden_at",
    "kept",
    "live",
    "live_since",
    "not_removed",
    "shard_live",
    "shard_visible_at",
    "sql",
    "value_live",
    "value_visible_at",
    "visible_at",
    "visible_at_kept",
]

Columns = Any
"""A table's columns by attribute: a mapped class, an ``aliased()`` one, or ``Table.c``."""

Version = Any
"""A version number: an int, a column, a bound parameter or a SQL text (see :func:`sql`)."""

_DATASET_VERSIONS = table("dataset_versions", column("dataset_id"), column("number"))

COMMITTED = "committed"
"""The only shard state any version reads (``models.SHARD_STATES``)."""


def committed(shards: Columns) -> ColumnElement[bool]:
    """The shard is committed: staged and deleted shards are seen by no version."""
    return shards.state == COMMITTED  # type: ignore[no-any-return]


def not_removed(records: Columns) -> ColumnElement[bool]:
    """No commit removed the record (yet): in its shard's latest set, or staged and not hidden."""
    return records.removed_version.is_(None)  # type: ignore[no-any-return]


def gone_by(records: Columns, version: Version) -> ColumnElement[bool]:
    """A commit at or before ``version`` removed the record: versions from then on do not see it.

    ``IS NOT NULL`` is spelled out: it is the condition of the partial index on
    removed records (``ix_records_dataset_id_removed_version``).
    """
    return and_(records.removed_version.is_not(None), records.removed_version <= version)


def added_after(shards: Columns, version: Version) -> ColumnElement[bool]:
    """The shard's records appeared after ``version`` (NULL, while staged: never true)."""
    return shards.added_version > version  # type: ignore[no-any-return]


def live(records: Columns, shards: Columns) -> ColumnElement[bool]:
    """The record is visible at the latest version: committed shard, not removed."""
    return and_(committed(shards), not_removed(records))


def visible_at(records: Columns, shards: Columns, version: Version) -> ColumnElement[bool]:
    """The record is visible at ``version`` (whether that version is kept is :func:`kept`'s)."""
    return and_(
        committed(shards),
        shards.added_version <= version,
        or_(not_removed(records), records.removed_version > version),
    )


def hidden_at(records: Columns, shards: Columns, version: Version) -> ColumnElement[bool]:
    """The record's shard is visible at ``version`` but the record was removed by then."""
    return and_(committed(shards), shards.added_version <= version, gone_by(records, version))


def live_since(records: Columns, shards: Columns, base: Version) -> ColumnElement[bool]:
    """The record is live now and was visible at ``base``: no commit since changed it.

    A live record's ``removed_version`` is NULL, so it was visible at ``base``
    iff its shard was added by then.
    """
    return and_(live(records, shards), shards.added_version <= base)


def changed_since(records: Columns, shards: Columns, base: Version) -> ColumnElement[bool]:
    """A commit after ``base`` added or removed the record (the key conflict check's test)."""
    return or_(added_after(shards, base), records.removed_version > base)


def shard_live(shards: Columns) -> ColumnElement[bool]:
    """The latest version reads the shard: committed, and some record of it not removed."""
    return and_(committed(shards), shards.removed_version.is_(None))


def shard_visible_at(shards: Columns, version: Version) -> ColumnElement[bool]:
    """Version ``version`` reads the shard: some record of it is visible there.

    ``shards.removed_version`` is the version that removed its last live record.
    """
    return and_(
        committed(shards),
        shards.added_version <= version,
        or_(shards.removed_version.is_(None), shards.removed_version > version),
    )


def kept(dataset_id: Any, version: Version) -> ColumnElement[bool]:
    """Version ``version`` of the dataset still exists: made, and not expired."""
    dv = _DATASET_VERSIONS.alias("dv")
    return (
        select(literal_column("1"))
        .select_from(dv)
        .where(dv.c.dataset_id == dataset_id, dv.c.number == version)
        .exists()
    )


def visible_at_kept(records: Columns, shards: Columns, version: Version) -> ColumnElement[bool]:
    """The record is visible at ``version``, and that version is kept (a lookup at a number)."""
    return and_(visible_at(records, shards, version), kept(records.dataset_id, version))


# --- declared fields' values (record_fields, revision 0015) --------------------
#
# A value of a record's field is itself versioned: ``added_version`` is the
# version that set it (0: stored with the record, by indexing or a write: seen
# wherever the record is), ``removed_version`` the version that superseded it
# (``update_fields`` set another value, or unset it). At most one value of a
# record's field is visible at any version.


def value_live(values: Columns) -> ColumnElement[bool]:
    """The latest version reads the value: nothing superseded it."""
    return values.removed_version.is_(None)  # type: ignore[no-any-return]


def value_visible_at(values: Columns, version: Version) -> ColumnElement[bool]:
    """Version ``version`` reads the value: set by then, and not superseded by then."""
    return and_(
        values.added_version <= version,
        or_(value_live(values), values.removed_version > version),
    )


# --- the same rules as SQL text ------------------------------------------------

# The columns the rules read, as lightweight tables: the lookup renders its
# statements without loading the ORM models (a cold lookup stays light).
_TABLES = {
    "records": table("records", column("dataset_id"), column("removed_version")),
    "shards": table("shards", column("state"), column("added_version"), column("removed_version")),
    "record_fields": table("record_fields", column("added_version"), column("removed_version")),
}
_TABLE = re.compile(r"(records|shards|record_fields)(?: AS (\w+))?")
# Plain SQL that SQLite and PostgreSQL read alike (the expressions use nothing
# dialect-specific), without the paramstyle escaping a driver's dialect adds: the
# text goes into raw DB-API statements (``?``, ``%s``) and into ``text()`` alike.
_DIALECT = DefaultDialect()


@functools.cache
def sql(rule: Callable[..., ColumnElement[bool]], *operands: str) -> str:
    """``rule`` applied to ``operands``, rendered once as SQL text (then cached).

    Each operand is a table, ``"records AS r"`` (alias ``r``) or ``"records"``
    (unaliased, so a correlated statement can refer to it), or, for a version,
    SQL text put in as written: a placeholder (``?``, ``%s``, ``:v``), a column
    (``v.number``) or a subquery. Constants render as literals
    (``s.state = 'committed'``).

    Examples
    --------
    >>> sql(live, "records AS r", "shards AS s")
    "s.state = 'committed' AND r.removed_version IS NULL"
    """
    args: list[Any] = []
    froms = []
    for operand in operands:
        match = _TABLE.fullmatch(operand)
        if match is None:
            args.append(literal_column(operand))
            continue
        table = _TABLES[match[1]]
        named = table.alias(match[2]) if match[2] else table
        froms.append(named)
        args.append(named.c)
    # Rendered as the WHERE of a statement over the tables, so a subquery
    # (``kept``) correlates to them instead of listing them again.
    # Grouped as an AND's operand: the text goes into statements as ``... AND {text}``.
    condition = rule(*args).self_group(against=operators.and_)
    statement: Select[Any] = select(literal_column("1")).select_from(*froms).where(condition)
    text = str(statement.compile(dialect=_DIALECT, compile_kwargs={"literal_binds": True}))
    where = text[text.index("\nWHERE ") + len("\nWHERE ") :]
    return re.sub(r" ?\n", " ", where)
