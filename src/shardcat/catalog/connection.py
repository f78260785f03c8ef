"""The lookup's raw DBAPI connection: one per thread, autocommit, reconnected once after a drop.

SQLAlchemy Core alone costs about three times a raw SQLite point query, and
a lookup must stay within 1.2 × (raw query + raw read): the hot path talks
to the driver directly, with statements the driver prepares and caches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.pool import StaticPool

from .session import translate_exception

__all__ = ["RawConnection"]


class RawConnection:
    """A driver connection taken from ``engine`` and detached from its pool.

    An in-memory SQLite catalog (``StaticPool``) has one connection that all
    share: it is used, never detached or closed here.
    """

    def __init__(self, engine: Engine) -> None:
        self.url = engine.url
        self.dialect = engine.dialect.name
        self.placeholder = "%s" if self.dialect == "postgresql" else "?"
        self._engine = engine
        self._detached = not isinstance(engine.pool, StaticPool)
        self._connect()

    def _connect(self) -> None:
        try:
            fairy = self._engine.raw_connection()
        except Exception as e:
            raise translate_exception(e, self.url) from e
        conn: Any = fairy.driver_connection
        self.conn = conn
        self._fairy = fairy
        if self._detached:
            fairy.detach()  # ours alone: autocommit, never returned to the pool
        if self.dialect == "postgresql":
            self.conn.autocommit = True
            # psycopg prepares a statement server-side after its first use with prepare=True.
            self.execute: Callable[[str, Sequence[Any]], Any] = partial(conn.execute, prepare=True)
        else:
            # One cursor kept for the thread's lookups: no cursor object made
            # per query. fetchall() runs every statement to its end, which
            # resets it, so no read transaction stays open between queries.
            self.execute = conn.cursor().execute

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
            else:
                self._fairy.close()
