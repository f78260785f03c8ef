"""SQLite: a bulk registration builds ``records``' key indexes after its rows, not during.

Every row a registration inserts is also an entry in the key-hash index (and,
with key text, in the key-order index). Once those indexes outgrow SQLite's
page cache, each entry lands on a page of its own, read and written back:
at 10M keys registered on 10M, 36,000 keys/s. A transaction that brings many
rows instead drops them, inserts the rows into the table alone and creates
them again from one sort: 105,000 keys/s there (docs/SCALE.md §3, "A
registration that builds its indexes after its rows").

SQLite's DDL is transactional and its readers read snapshots: until the
commit every other connection sees the indexes as they were, and a failure
or a rollback puts them back as they were. Writers wait on the write lock,
as for any registration. The indexes come back from their own
``CREATE INDEX`` text (whoever created them: migrations or a user), with
their planner statistics (``sqlite_stat1``, which ``DROP INDEX`` deletes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.orm import Session

__all__ = ["DEFER_MIN_ROWS", "DEFER_SHARE", "key_indexes_deferred"]

DEFER_MIN_ROWS = 1_000_000
"""A transaction bringing fewer rows keeps the indexes (at 1M into an empty catalog the two
paths are even: 0.86-1.26 x in docs/SCALE.md's runs; 3M: 1.4 x)."""
DEFER_SHARE = 0.25
"""... and so does one that brings fewer than this fraction of the rows ``records`` holds: the
sort then rebuilds every entry the catalog has (10M on 10M: 2.9 x the keys/s; the time an
incremental entry costs falls with the index's size, so a small share is not worth a sort)."""

_KEY_COLUMNS = frozenset({"key_hash", "key"})


@contextmanager
def key_indexes_deferred(session: Session, rows: int) -> Iterator[bool]:
    """Within the block, ``records`` has no index on ``key_hash`` or ``key`` if it pays.

    ``rows``: how many records the block inserts. Yields whether the indexes
    were dropped; they are created again when the block ends without an
    error, before the caller's duplicate-key check and commit need them. An
    error leaves them dropped in the session's transaction, whose rollback
    (the caller's) restores them: a block must not be followed by a commit
    after an error.
    """
    conn = session.connection()
    if conn.dialect.name != "sqlite" or rows < DEFER_MIN_ROWS:
        yield False
        return
    dbapi: Any = conn.connection.driver_connection
    cur = dbapi.cursor()
    try:
        held = cur.execute("SELECT coalesce(sum(record_count), 0) FROM shards").fetchone()[0]
        if rows < DEFER_SHARE * held:
            yield False
            return
        quote = conn.dialect.identifier_preparer.quote_identifier
        indexes = _key_indexes(cur, quote)
        stats = _stats(cur, [name for name, _ in indexes])
        for name, _ in indexes:
            cur.execute(f"DROP INDEX {quote(name)}")
        yield bool(indexes)
        for _, sql in indexes:
            cur.execute(sql)
        if stats:  # without an ANALYZE before, there is no sqlite_stat1 to fill
            cur.executemany("INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES (?, ?, ?)", stats)
    finally:
        cur.close()


def _key_indexes(cur: Any, quote: Callable[[str], str]) -> list[tuple[str, str]]:
    """Name and ``CREATE INDEX`` text of each index of ``records`` over a key column."""
    found = cur.execute(
        "SELECT name, sql FROM sqlite_master "
        "WHERE type = 'index' AND tbl_name = 'records' AND sql IS NOT NULL ORDER BY name"
    ).fetchall()
    out = []
    for name, sql in found:
        columns = {row[2] for row in cur.execute(f"PRAGMA index_info({quote(name)})").fetchall()}
        if columns & _KEY_COLUMNS:
            out.append((name, sql))
    return out


def _stats(cur: Any, names: list[str]) -> list[tuple[str, str, str]]:
    """Their ``sqlite_stat1`` rows (none before an ``ANALYZE``)."""
    if (
        not names
        or not cur.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'"
        ).fetchone()
    ):
        return []
    marks = ", ".join("?" * len(names))
    rows: list[tuple[str, str, str]] = cur.execute(
        f"SELECT tbl, idx, stat FROM sqlite_stat1 WHERE tbl = 'records' AND idx IN ({marks})",
        names,
    ).fetchall()
    return rows
