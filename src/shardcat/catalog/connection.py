"""The lookup's raw DBAPI connection: one per thread, autocommit, reconnected once after a drop.

SQLAlchemy Core alone costs about three times a raw SQLite point query, and
a lookup must stay within 1.2 × (raw query + raw read): the hot path talks
to the driver directly, with statements the driver prepares and caches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from ..errors import ShardcatError
from .session import translate_exception
from .sqlite_file import SqliteFile

if TYPE_CHECKING:
    import sqlalchemy as _sa
    from sqlalchemy import Engine
else:
    _sa = lazy_module("sqlalchemy")  # loaded already where an Engine is given

__all__ = ["RawConnection", "binds"]


def binds(dialect: str, text: str) -> bool:
    """Whether ``text`` can be bound on ``dialect``: PostgreSQL's text holds no NUL, so no row
    has it (a key holding one is found by no statement; asking would fail)."""
    return dialect != "postgresql" or "\x00" not in text


class RawConnection:
    """A driver connection of its own: a SQLite file's, or one taken from ``source``'s pool and detached.

    A SQLite file is connected through :mod:`sqlite3` with the engine's
    settings (:class:`~.sqlite_file.SqliteFile`), so a lookup loads no
    SQLAlchemy. An in-memory SQLite catalog (``StaticPool``) has one
    connection that all share: it is used, never detached or closed here.
    """

    def __init__(self, source: Engine | SqliteFile) -> None:
        self._source = source
        self.file: str | None
        """A SQLite catalog's file, for connections of other libraries (None: a server, memory, URI options)."""
        if isinstance(source, SqliteFile):
            self.url: Any = source.url
            self.dialect = "sqlite"
            self.file = source.path
            self._detached = True
        else:
            self.url = source.url
            self.dialect = source.dialect.name
            db = source.url.database
            plain = self.dialect == "sqlite" and not source.url.query
            self.file = db if plain and db not in (None, "", ":memory:") else None
            self._detached = not isinstance(source.pool, _sa.pool.StaticPool)
        self.placeholder = "%s" if self.dialect == "postgresql" else "?"
        self._connect()

    def _connect(self) -> None:
        source = self._source
        try:
            fairy = None if isinstance(source, SqliteFile) else source.raw_connection()
            conn: Any = source.connect() if fairy is None else fairy.driver_connection
        except ShardcatError:  # already says what happened and what to do (a bad setting)
            raise
        except Exception as e:
            raise translate_exception(e, self.url) from e
        self.conn = conn
        self._fairy = fairy
        if fairy is not None and self._detached:
            fairy.detach()  # ours alone: autocommit, never returned to the pool
        if self.dialect == "postgresql":
            self.conn.autocommit = True
            # psycopg prepares a statement server-side after its first use with prepare=True.
            self.execute: Callable[[str, Sequence[Any]], Any] = partial(conn.execute, prepare=True)
            self.partitioned = self._setup(conn)
        else:
            # One cursor kept for the thread's lookups: no cursor object made
            # per query. fetchall() runs every statement to its end, which
            # resets it, so no read transaction stays open between queries.
            self.execute = conn.cursor().execute

    partitioned = False
    """Whether ``records`` was hash-partitioned when this connection was made (PostgreSQL,
    :mod:`.partitions`): the batch statement is chosen by it (:func:`~shardcat.reading.statements.batch_sql`)."""

    def _setup(self, conn: Any) -> bool:
        """Whether records is partitioned; if it is, generic plans for this connection.

        Under ``plan_cache_mode`` ``auto`` a partitioned ``records``' point lookup was
        planned anew on every call (the generic plan's estimate counts every partition):
        0.46 ms p50 against 0.09 on the plain table at 1M keys in 16 partitions; the
        generic plan prunes to one partition at executor start (0.10 ms, docs/SCALE.md §6).
        A plain table keeps the server's setting (``auto`` settles on generic point plans
        by itself). The setting exists from PostgreSQL 12.
        """
        row = conn.execute(
            "SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('records')"
        ).fetchone()
        partitioned = bool(row and row[0])
        if partitioned:
            conn.execute(
                "SELECT CASE WHEN current_setting('server_version_num')::int >= 120000 "
                "THEN set_config('plan_cache_mode', 'force_generic_plan', false) END"
            )
        return partitioned

    def binds(self, text: str) -> bool:
        """Whether ``text`` can be bound on this connection's database (:func:`binds`)."""
        return binds(self.dialect, text)

    def query(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """All rows of ``sql``; a dropped connection is reopened and the query asked again, once.

        Raises
        ------
        CatalogError
            The driver's error, translated (:func:`~.session.translate_exception`).
        """
        try:
            return self.execute(sql, params).fetchall()  # type: ignore[no-any-return]
        except Exception as e:
            return self.recover(e, sql, params)

    def recover(self, error: Exception, sql: str, params: Sequence[Any]) -> list[Any]:
        """After ``execute(sql, params)`` raised ``error``: all rows of ``sql`` asked again on a new
        connection if the server dropped this one, else ``error`` translated.

        The point lookup calls ``execute`` itself (one Python frame fewer than
        :meth:`query`) and comes here only when it raised.
        """
        if not self._dropped():
            raise translate_exception(error, self.url) from error
        # The server dropped the connection (restart, failover, idle timeout):
        # a lookup only reads, so reconnecting and asking again is safe.
        self.close()
        self._connect()
        try:
            return self.execute(sql, params).fetchall()  # type: ignore[no-any-return]
        except Exception as e:
            raise translate_exception(e, self.url) from e

    def _dropped(self) -> bool:
        """Whether the connection is gone (psycopg marks it broken or closed)."""
        return bool(getattr(self.conn, "broken", False) or getattr(self.conn, "closed", False))

    def close(self) -> None:
        # A connection the server already dropped may fail to close: nothing to release then.
        with contextlib.suppress(Exception):
            if self._detached:
                self.conn.close()
            elif self._fairy is not None:
                self._fairy.close()
