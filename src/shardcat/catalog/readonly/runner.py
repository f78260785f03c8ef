"""Layers 2, 5 and 6 of ``shardcat sql``: the read-only transaction, the timeout, bounded results."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..._units import format_bytes
from ...errors import CatalogError, QueryTimeoutError
from ..session import translate_errors
from .functions import refuse_side_effects
from .roles import require_postgres
from .statement import parse

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Engine

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_TIMEOUT", "QueryResult", "run_read_only"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a query may run (0: no limit of shardcat's own)."""
DEFAULT_MAX_BYTES = 64 * 1024**2
"""Bytes of values a query may return (0: no limit)."""

_BATCH_BYTES = 1024**2  # aim for about this much per fetch from the server
_FIRST_BATCH_ROWS = 16
_MAX_BATCH_ROWS = 1000
_MIN_LENGTH_LIMIT = 1024**2  # SQLite: never cap single values (and table rows) below 1 MiB
_CURSOR = "shardcat_sql"


# --- results ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What :func:`run_read_only` fetched.

    Attributes
    ----------
    columns:
        The result's column names.
    rows:
        At most ``limit`` rows, whose values add up to at most ``max_bytes``.
    cut:
        Why rows were left out: ``"limit"`` (there are more rows),
        ``"max_bytes"`` (the next row would pass the byte budget), or None.
    nbytes:
        The size of the values in ``rows`` as counted against ``max_bytes``.
    """

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    cut: str | None
    nbytes: int


def _value_size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "replace"))
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, memoryview):
        return value.nbytes
    if isinstance(value, (bool, int, float)):
        return 8
    return len(str(value))


def _collect(
    fetch: Callable[[int], Sequence[Any]],
    *,
    limit: int,
    max_bytes: int,
    before_fetch: Callable[[], None],
) -> tuple[list[tuple[Any, ...]], str | None, int]:
    """Fetch rows in batches of about 1 MiB until ``limit`` rows or ``max_bytes``."""
    rows: list[tuple[Any, ...]] = []
    used = 0
    batch = min(limit + 1, _FIRST_BATCH_ROWS)
    while True:
        want = min(batch, limit + 1 - len(rows))
        before_fetch()
        chunk = fetch(want)
        for row in chunk:
            if len(rows) == limit:
                return rows, "limit", used
            size = sum(_value_size(v) for v in row)
            if max_bytes and used + size > max_bytes:
                return rows, "max_bytes", used
            rows.append(tuple(row))
            used += size
        if len(chunk) < want:
            return rows, None, used
        average = max(used / len(rows), 1.0) if rows else 1.0
        batch = max(1, min(_MAX_BATCH_ROWS, int(_BATCH_BYTES / average)))


_ROW_GUARD_MARK = "shardcat: row over the --max-bytes budget"


def _row_guard(statement: str, max_bytes: int) -> str:
    """PostgreSQL: the statement, made to fail on the server at a row over ``max_bytes``.

    A client receives a row whole, so ``repeat('x', 900000000)`` or a
    ``string_agg`` over every record would cost gigabytes before the byte
    budget could look at it. A subquery keeps its ORDER BY (PostgreSQL never
    flattens a sorted subquery); the newline ends a trailing ``--`` comment.
    The error text is built from the row, so the planner cannot fold it into
    a constant (and raise it for every query).
    """
    if not max_bytes:
        return statement
    size = "octet_length(_shardcat_row::text)"
    return (
        f"SELECT * FROM ({statement}\n) AS _shardcat_row "
        f"WHERE CASE WHEN {size} > {int(max_bytes)} "
        f"THEN ('{_ROW_GUARD_MARK}: ' || {size})::int ELSE 0 END = 0"
    )


def _too_big(max_bytes: int) -> CatalogError:
    return CatalogError(
        f"refused: a value in the result is larger than the --max-bytes budget of "
        f"{format_bytes(max(max_bytes, 1))}; raise --max-bytes, or select a part of it "
        "(substr, length)"
    )


def _timed_out(timeout: float) -> QueryTimeoutError:
    return QueryTimeoutError(
        f"the query ran over the {timeout:g} s timeout and was cancelled; raise --timeout "
        "(0 = no limit) if it needs longer"
    )


@contextmanager
def _refuse_writes() -> Iterator[None]:
    """Say plainly when the read-only transaction stopped a write."""
    try:
        yield
    except CatalogError as e:
        text = str(e).lower()
        if (
            "readonly database" in text
            or "read-only transaction" in text
            or "data-modifying statement" in text  # (WITH x AS (DELETE ...) SELECT) as a subquery
        ):
            raise CatalogError(
                f"refused: the query tried to write; shardcat sql is read-only ({e})"
            ) from e
        raise


# --- the runner ---------------------------------------------------------------


def run_read_only(
    engine: Engine,
    query: str,
    *,
    limit: int = 1000,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    role: str | None = None,
    check_functions: bool = True,
) -> QueryResult:
    """Run one read-only statement against the catalog, bounded in time and memory.

    Parameters
    ----------
    engine:
        The catalog's engine (SQLite or PostgreSQL).
    query:
        One SELECT, WITH, EXPLAIN or VALUES statement.
    limit:
        Return at most this many rows.
    timeout:
        Seconds the whole query may take, fetching included; 0 for no limit
        of shardcat's own (a server-side ``statement_timeout`` still applies).
    max_bytes:
        Stop before the values returned pass this many bytes (text counted
        as UTF-8); on SQLite no single value may be larger. 0 for no limit.
    role:
        PostgreSQL: run the statement as this role (``SET LOCAL ROLE``),
        e.g. one made by :func:`create_readonly_role`.
    check_functions:
        PostgreSQL: refuse statements that name a function with side effects
        (layer 3 of the module docstring). Only tests turn this off.

    Raises
    ------
    CatalogError
        If the statement is not one read statement, tries to write, names a
        function with side effects, or fails in the database.
    QueryTimeoutError
        If it runs longer than ``timeout``.
    """
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if timeout < 0 or max_bytes < 0:
        raise ValueError("timeout and max_bytes must be 0 (no limit) or positive")
    dialect = engine.dialect.name
    statement, verb = parse(query, dialect)
    if role:
        require_postgres(engine, "a role (--role, SHARDCAT_SQL_ROLE)")
    with _refuse_writes(), translate_errors(engine.url):
        raw = engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            if isinstance(driver, sqlite3.Connection):
                return _run_sqlite(
                    driver, statement, limit=limit, timeout=timeout, max_bytes=max_bytes
                )
            if dialect == "postgresql":
                return _run_postgres(
                    driver,
                    statement,
                    explain=verb == "explain",
                    limit=limit,
                    timeout=timeout,
                    max_bytes=max_bytes,
                    role=role or None,
                    check_functions=check_functions,
                )
            raise CatalogError(f"shardcat sql runs on SQLite and PostgreSQL, not {dialect}")
        finally:
            raw.close()


def _run_sqlite(
    conn: sqlite3.Connection, statement: str, *, limit: int, timeout: float, max_bytes: int
) -> QueryResult:
    # Why no function check here: SQLite as Python ships it has no function that
    # touches files or other connections (readfile() and friends live in the sqlite3
    # shell, not the library), extension loading is off, and ATTACH, PRAGMA and
    # VACUUM INTO are statements the verb check refuses; pragma table functions
    # exist only for pragmas without side effects.
    deadline = time.monotonic() + timeout if timeout else None
    fired = False

    def progress() -> int:
        nonlocal fired
        if deadline is not None and time.monotonic() > deadline:
            fired = True
            return 1  # sqlite3 aborts the statement: OperationalError("interrupted")
        return 0

    def before_fetch() -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise _timed_out(timeout)

    length = sqlite3.SQLITE_LIMIT_LENGTH if hasattr(sqlite3, "SQLITE_LIMIT_LENGTH") else None
    old_length = conn.getlimit(length) if length is not None and max_bytes else None
    conn.execute("PRAGMA query_only = ON")
    try:
        if length is not None and old_length is not None:
            # One value over the budget could never be printed: fail as it is built,
            # before zeroblob(1e9) or printf('%.*c', 1e9, 'x') fills the memory.
            conn.setlimit(length, min(old_length, max(max_bytes, _MIN_LENGTH_LIMIT)))
        if deadline is not None:
            conn.set_progress_handler(progress, 10_000)
        conn.execute("BEGIN")
        cur = conn.execute(statement)
        columns = tuple(d[0] for d in cur.description or ())
        rows, cut, used = _collect(
            cur.fetchmany if cur.description else lambda n: [],
            limit=limit,
            max_bytes=max_bytes,
            before_fetch=before_fetch,
        )
        cur.close()
    except sqlite3.DatabaseError as e:  # OperationalError: interrupted; DataError: too big
        if fired:
            raise _timed_out(timeout) from e
        if "too big" in str(e).lower():
            raise _too_big(max(max_bytes, _MIN_LENGTH_LIMIT)) from e
        raise
    finally:
        conn.set_progress_handler(None, 0)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.execute("PRAGMA query_only = OFF")  # the connection goes back to the pool writable
        if length is not None and old_length is not None:
            conn.setlimit(length, old_length)
    return QueryResult(columns, tuple(rows), cut, used)


def _run_postgres(
    conn: psycopg.Connection[Any],
    statement: str,
    *,
    explain: bool,
    limit: int,
    timeout: float,
    max_bytes: int,
    role: str | None,
    check_functions: bool,
) -> QueryResult:
    from psycopg import errors as pg_errors

    deadline = time.monotonic() + timeout if timeout else None
    settings = conn.cursor()

    def setting(name: str, value: str, *, local: bool = True) -> None:
        # set_config(..., true) = SET LOCAL: ends with the transaction, and also at an error
        settings.execute("SELECT set_config(%s, %s, %s)", (name, value, local))

    def arm() -> None:
        """Give the next statement the time left, so the whole query stays within the timeout."""
        if deadline is None:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise _timed_out(timeout)
        setting("statement_timeout", str(max(1, int(left * 1000))))

    try:
        if deadline is not None:
            # A client that stalls (suspended) loses its session after the timeout. Set for
            # the session, in a transaction of its own: a failed transaction (the timeout
            # itself) undoes the settings made inside it. Reset below.
            idle = str(max(1000, int(timeout * 1000)))
            setting("idle_in_transaction_session_timeout", idle, local=False)
            conn.commit()
        settings.execute("SET TRANSACTION READ ONLY")
        # Layer 1 reads backslashes in '...' as PostgreSQL does with this on (the default).
        setting("standard_conforming_strings", "on")
        if conn.info.server_version >= 140000:
            # A client that died (killed, network gone) stops its query within a second
            # instead of leaving it running until the timeout. In a savepoint: a server
            # on a system without the kernel support (Windows) refuses the setting.
            with suppress(pg_errors.InvalidParameterValue), conn.transaction():
                setting("client_connection_check_interval", "1000")
        arm()
        if role:
            try:
                setting("role", role)  # = SET LOCAL ROLE: the privileges of `role` from here on
            except (pg_errors.InvalidParameterValue, pg_errors.InsufficientPrivilege) as e:
                raise CatalogError(
                    f"cannot run the query as role {role} ({str(e).strip()}): create it, and "
                    f"grant it to you, with `shardcat catalog create-readonly-role {role}`"
                ) from e
        if check_functions:
            refuse_side_effects(settings, statement)
        if explain:
            # A prepared statement: the extended protocol, so exactly one statement.
            cur: Any = conn.cursor()
            arm()
            cur.execute(statement, prepare=True)
        else:
            # DECLARE ... CURSOR: rows stay on the server until fetched.
            cur = conn.cursor(name=_CURSOR, scrollable=False)
            arm()
            cur.execute(_row_guard(statement, max_bytes))
        columns = tuple(d.name for d in cur.description or ())
        rows, cut, used = _collect(
            cur.fetchmany if cur.description else lambda n: [],
            limit=limit,
            max_bytes=max_bytes,
            before_fetch=arm,
        )
        return QueryResult(columns, tuple(rows), cut, used)
    except pg_errors.QueryCanceled as e:
        if deadline is not None and "statement timeout" in str(e):
            raise _timed_out(timeout) from e
        raise
    except pg_errors.InvalidTextRepresentation as e:
        if _ROW_GUARD_MARK in str(e):
            raise _too_big(max_bytes) from e
        raise
    finally:
        # Closes the cursor and ends the transaction (SET LOCAL settings and role end too).
        with suppress(Exception):
            conn.rollback()
            if deadline is not None:
                settings.execute("RESET idle_in_transaction_session_timeout")
                conn.commit()
