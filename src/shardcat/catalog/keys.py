"""Listing and counting a dataset's keys, in key order, as a range of ``ix_records_dataset_id_key``.

A prefix is a range: every key starting with ``P`` lies in ``[P, P')``, where
``P'`` (:func:`prefix_end`) is ``P`` with its last character incremented. That
holds in code point order, which is UTF-8 byte order: SQLite's BINARY
collation, and ``COLLATE "C"`` on PostgreSQL, which the index and these
statements both use (a prefix is not a range in a linguistic collation).
Unlike ``LIKE 'P%'`` nothing in ``P`` needs escaping, and both databases
read the range from the index (tests/catalog/test_keys.py checks the plans).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import ColumnElement, Engine, Select, collate, select, text

from . import fence, visibility
from .keyrange import KEY_ORDER, prefix_end, sorted_rows
from .models import BASE_GROUP, Record, Shard
from .session import translate_errors

__all__ = ["iter_keys", "keys_statement", "prefix_end"]

_BATCH = 1000  # keys fetched per round trip (a server-side cursor on PostgreSQL)


def _key(dialect: str) -> ColumnElement[str]:
    """The key column as the index orders it."""
    if dialect == "postgresql":
        # NULL only in a hash-only dataset, whose keys are never listed (hashkeys.needs_key_text).
        return collate(Record.key, KEY_ORDER.split()[-1].strip('"'))  # type: ignore[arg-type]
    return Record.key  # type: ignore[return-value]


def _where(
    stmt: Select[Any],
    dialect: str,
    dataset_id: int,
    prefix: str | None,
    after: str | None = None,
    version: int | None = None,
) -> Select[Any]:
    key = _key(dialect)
    seen = (
        visibility.live(Record, Shard)
        if version is None
        else visibility.visible_at(Record, Shard, version)
    )
    # A sample is its base record (a column group's records are entries of it).
    # The key index is partial (keyrange.SORTED_ROWS): the statement says its condition in
    # the same words to read it (as text: SQLAlchemy would write `key_sorted = 1` on SQLite).
    stmt = stmt.join(Shard, Shard.id == Record.shard_id).where(
        Record.dataset_id == dataset_id,
        text(sorted_rows(Record.__tablename__)),
        Record.group_id == BASE_GROUP,
        seen,
    )
    if after is not None:
        # A cursor: the range continues after the last key a page showed (a seek, never OFFSET).
        stmt = stmt.where(key > after)
    if prefix:
        stmt = stmt.where(key >= prefix)
        end = prefix_end(prefix)
        if end is not None:
            stmt = stmt.where(key < end)
    return stmt


def keys_statement(
    dialect: str,
    dataset_id: int,
    prefix: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    version: int | None = None,
) -> Select[Any]:
    """The keys of a dataset (starting with ``prefix``, after ``after``), in byte order.

    ``version``: the keys that (kept) version reads; None: the latest version's.
    """
    stmt = _where(select(Record.key), dialect, dataset_id, prefix, after, version)
    stmt = stmt.order_by(_key(dialect))
    return stmt.limit(limit) if limit else stmt


def iter_keys(
    engine: Engine,
    dataset_id: int,
    prefix: str | None = None,
    limit: int | None = None,
    after: str | None = None,
    version: int | None = None,
) -> Iterator[str]:
    """Stream the keys: fetched ``_BATCH`` at a time while the caller consumes them.

    ``after``: only keys that sort after it (the last key of the previous page).
    ``version``: a kept version's number (resolved by the caller); None: the latest.

    Raises
    ------
    CatalogError
        If the database fails (translated).
    """
    stmt = keys_statement(engine.dialect.name, dataset_id, prefix, limit, after, version)
    with translate_errors(engine.url), engine.connect() as conn:
        # stream_results: a server-side cursor on PostgreSQL; SQLite steps its cursor anyway.
        with fence.shared():
            result = conn.execution_options(stream_results=True, yield_per=_BATCH).execute(stmt)
            batches = result.scalars().partitions()
        while True:
            # Each fetch as a unit of work (a fork waits for it), never the pauses between.
            with fence.shared():
                batch = next(batches, None)
            if batch is None:
                return
            yield from batch
