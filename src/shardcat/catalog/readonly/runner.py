"""Layers 2, 5 and 6 of ``shardcat sql``: the read-only transaction, the timeout, bounded results."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from ..._units import format_bytes
from ...errors import (
    CatalogError,
    QueryError,
    QueryLimitError,
    QueryRefusedError,
    QueryTimeoutError,
)
from ..migrate import verify_schema
from ..session import translate_errors
from .functions import refuse_side_effects
from .roles import require_postgres
from .statement import parse

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Engine

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_TIMEOUT",
    "QueryResult",
    "QueryStream",
    "open_read_only",
    "run_read_only",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds a query may run (0: no limit of shardcat's own)."""
DEFAULT_MAX_BYTES = 64 * 1024**2
"""Bytes of values a query may return (0: no limit)."""

_BATCH_BYTES = 1024**2  # aim for about this much per fetch from the server
_FIRST_BATCH_ROWS = 16
_MAX_BATCH_ROWS = 1000
_MIN_LENGTH_LIMIT = 1024**2  # SQLite: never cap single values (and table rows) below 1 MiB
# SQLite: the progress handler runs every this many virtual-machine steps. A step can be one
# function call over a value of up to the length limit: few steps per row must still be
# checked (measured: no cost to tell from every 10,000 on a 3,000,000-row scan).
_PROGRESS_STEPS = 1000
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


@dataclass(slots=True)
class QueryStream:
    """The rows of a running query (:func:`open_read_only`), fetched as they are iterated.

    Iterate it once, inside the ``with`` block; ``cut``, ``rows`` and
    ``nbytes`` are final when the iteration ends.

    Attributes
    ----------
    columns:
        The result's column names.
    limit, max_bytes:
        The bounds it runs under (0: none).
    rows:
        Rows handed out so far.
    nbytes:
        Their size, as counted against ``max_bytes``.
    cut:
        ``"limit"``, ``"max_bytes"`` or None, as in :class:`QueryResult`.
    """

    columns: tuple[str, ...]
    limit: int
    max_bytes: int
    _fetch: Callable[[int], Sequence[Any]]
    _before_fetch: Callable[[], None]
    _max_batch: int = _MAX_BATCH_ROWS
    rows: int = 0
    nbytes: int = 0
    cut: str | None = None
    _started: bool = False

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self._started:
            raise RuntimeError("a query's rows can be iterated once")
        self._started = True
        return self._rows()

    def _rows(self) -> Iterator[tuple[Any, ...]]:
        """Rows in batches of about 1 MiB until ``limit`` rows or ``max_bytes``."""
        limit, max_bytes = self.limit, self.max_bytes
        batch = _FIRST_BATCH_ROWS
        while True:
            # One row more than the limit: whether there is more is what `cut` tells.
            want = min(batch, limit + 1 - self.rows) if limit else batch
            self._before_fetch()
            chunk = self._fetch(want)
            take = chunk[: limit - self.rows] if limit else chunk
            size = _rows_size(take)
            if max_bytes and self.nbytes + size > max_bytes:
                # The budget ends inside this batch: hand out the rows before it, one by one.
                for row in take:
                    size = sum(map(_value_size, row))
                    if self.nbytes + size > max_bytes:
                        break
                    self.rows += 1
                    self.nbytes += size
                    yield tuple(row)
                self.cut = "max_bytes"
                return
            self.rows += len(take)
            self.nbytes += size
            yield from take if not take or type(take[0]) is tuple else map(tuple, take)
            if len(take) < len(chunk):
                self.cut = "limit"
                return
            if len(chunk) < want:
                return
            average = max(self.nbytes / self.rows, 1.0) if self.rows else 1.0
            batch = max(1, min(self._max_batch, int(_BATCH_BYTES / average)))


_NUMBERS = frozenset({int, float, bool})


def _rows_size(rows: Sequence[Sequence[Any]]) -> int:
    """The size of ``rows`` as :func:`_value_size` counts it, a column at a time.

    A column of numbers or of text (the common case) is counted without a
    Python call per value: a selection fetches millions of rows.
    """
    total = 0
    for j in range(len(rows[0]) if rows else 0):
        column = list(map(itemgetter(j), rows))
        kinds = set(map(type, column))
        if type(None) in kinds:
            kinds.discard(type(None))
            column = [v for v in column if v is not None]
        if kinds <= _NUMBERS:
            total += 8 * len(column)
        elif kinds == {str}:
            text = "".join(column)
            total += len(text) if text.isascii() else len(text.encode("utf-8", "replace"))
        else:
            total += sum(map(_value_size, column))
    return total


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


def _too_big(max_bytes: int) -> QueryLimitError:
    return QueryLimitError(
        f"refused: a value in the result is larger than the --max-bytes budget of "
        f"{format_bytes(max(max_bytes, 1))}; raise --max-bytes, or select a part of it "
        "(substr, length)"
    )


def _timed_out(timeout: float) -> QueryTimeoutError:
    return QueryTimeoutError(
        f"the query ran over the {timeout:g} s timeout and was cancelled; raise --timeout "
        "(0 = no limit) if it needs longer"
    )


_WRITE_REFUSED = ("SQLITE_READONLY", "25006")  # query_only; read_only_sql_transaction


@contextmanager
def _refuse_writes(engine: Engine) -> Iterator[None]:
    """Say plainly when the read-only transaction stopped a write, or the schema is not there."""
    try:
        yield
    except QueryRefusedError:
        raise  # refused before it ran: nothing to explain
    except QueryError as e:
        state = e.sqlstate or ""
        if (
            state.startswith(_WRITE_REFUSED)
            or (not state and "readonly database" in str(e))  # Python 3.10: no SQLite codes
            # feature_not_supported: (WITH x AS (DELETE ...) SELECT) as a subquery
            or (state == "0A000" and "data-modifying statement" in str(e))
        ):
            raise CatalogError(
                f"refused: the query tried to write; shardcat sql is read-only ({e})"
            ) from e
        if e.undefined_object:
            # The user's typo, or a catalog without shardcat's tables: only the latter
            # is fixed by an upgrade (verify_schema raises, naming it).
            verify_schema(engine)
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
    params: Mapping[str, Any] | None = None,
) -> QueryResult:
    """Run one read-only statement against the catalog and collect its rows.

    The parameters and errors are :func:`open_read_only`'s; ``limit=0``
    collects every row (bounded by ``max_bytes`` only).
    """
    with open_read_only(
        engine,
        query,
        limit=limit,
        timeout=timeout,
        max_bytes=max_bytes,
        role=role,
        check_functions=check_functions,
        params=params,
    ) as stream:
        rows = tuple(stream)
    return QueryResult(stream.columns, rows, stream.cut, stream.nbytes)


@contextmanager
def open_read_only(
    engine: Engine,
    query: str,
    *,
    limit: int = 1000,
    timeout: float = DEFAULT_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
    role: str | None = None,
    check_functions: bool = True,
    params: Mapping[str, Any] | None = None,
    batch_rows: int = 0,
    max_value_bytes: int = 0,
    guard_rows: bool = True,
) -> Iterator[QueryStream]:
    """Run one read-only statement against the catalog, bounded in time and memory.

    The rows are fetched from the database as the returned
    :class:`QueryStream` is iterated (in batches of about 1 MiB), inside the
    ``with`` block, so a result of any size needs no more memory than a batch.

    Parameters
    ----------
    engine:
        The catalog's engine (SQLite or PostgreSQL).
    query:
        One SELECT, WITH, EXPLAIN or VALUES statement.
    limit:
        Return at most this many rows; 0 for no limit.
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
    params:
        Values bound to the statement's placeholders, in the driver's style:
        ``:name`` on SQLite, ``%(name)s`` on PostgreSQL (where every other
        ``%`` is then written ``%%``). :meth:`.expression.SqlFilter.statement`
        writes them so. None: the statement has no placeholders (``shardcat sql``).
    batch_rows:
        Fetch up to this many rows at a time (0: at most 1,000, what
        printing needs); a large result read whole goes faster in bigger batches.
    max_value_bytes:
        SQLite: no value the statement builds, in its result or on the way,
        may be longer (at least 1 MiB); 0: ``max_bytes`` decides, as above.
    guard_rows:
        PostgreSQL: refuse a row over ``max_bytes`` on the server (layer 6).
        A caller whose rows are small by their shape (a selection's ids,
        offsets and keys) turns it off: it costs each row a conversion to text.

    Raises
    ------
    CatalogError
        If the statement is not one read statement, tries to write, names a
        function with side effects, or fails in the database.
    QueryTimeoutError
        If it runs longer than ``timeout``.
    """
    if limit < 0:
        raise ValueError(f"limit must be 0 (no limit) or positive, not {limit}")
    if batch_rows < 0:
        raise ValueError(f"batch_rows must be 0 (the default) or positive, not {batch_rows}")
    if timeout < 0 or max_bytes < 0:
        raise ValueError("timeout and max_bytes must be 0 (no limit) or positive")
    dialect = engine.dialect.name
    statement, verb = parse(query, dialect)
    if role:
        require_postgres(engine, "a role (--role, SHARDCAT_SQL_ROLE)")
    with _refuse_writes(engine), translate_errors(engine.url, user_query=True):
        raw = engine.raw_connection()
        try:
            driver: Any = raw.driver_connection
            if isinstance(driver, sqlite3.Connection):
                with _run_sqlite(
                    driver,
                    statement,
                    params,
                    limit=limit,
                    timeout=timeout,
                    max_bytes=max_bytes,
                    batch_rows=batch_rows,
                    max_value_bytes=max_value_bytes,
                ) as stream:
                    yield stream
                return
            if dialect == "postgresql":
                with _run_postgres(
                    driver,
                    statement,
                    params,
                    batch_rows=batch_rows,
                    explain=verb == "explain",
                    guard_rows=guard_rows,
                    limit=limit,
                    timeout=timeout,
                    max_bytes=max_bytes,
                    role=role or None,
                    check_functions=check_functions,
                ) as stream:
                    yield stream
                return
            raise CatalogError(f"shardcat sql runs on SQLite and PostgreSQL, not {dialect}")
        finally:
            raw.close()


@contextmanager
def _run_sqlite(
    conn: sqlite3.Connection,
    statement: str,
    params: Mapping[str, Any] | None = None,
    *,
    limit: int,
    timeout: float,
    max_bytes: int,
    batch_rows: int = 0,
    max_value_bytes: int = 0,
) -> Iterator[QueryStream]:
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
    cap = max_value_bytes or max_bytes
    old_length = conn.getlimit(length) if length is not None and cap else None
    conn.execute("PRAGMA query_only = ON")
    try:
        if length is not None and old_length is not None:
            # One value over the budget could never be printed: fail as it is built,
            # before zeroblob(1e9) or printf('%.*c', 1e9, 'x') fills the memory.
            conn.setlimit(length, min(old_length, max(cap, _MIN_LENGTH_LIMIT)))
        if deadline is not None:
            conn.set_progress_handler(progress, _PROGRESS_STEPS)
        conn.execute("BEGIN")
        cur = conn.execute(statement) if params is None else conn.execute(statement, params)
        yield QueryStream(
            tuple(d[0] for d in cur.description or ()),
            limit,
            max_bytes,
            cur.fetchmany if cur.description else lambda n: [],
            before_fetch,
            batch_rows or _MAX_BATCH_ROWS,
        )
        cur.close()
    except sqlite3.DatabaseError as e:  # OperationalError: interrupted; DataError: too big
        if fired:
            raise _timed_out(timeout) from e
        if "too big" in str(e).lower():
            raise _too_big(max(cap, _MIN_LENGTH_LIMIT)) from e
        raise
    finally:
        conn.set_progress_handler(None, 0)
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.execute("PRAGMA query_only = OFF")  # the connection goes back to the pool writable
        if length is not None and old_length is not None:
            conn.setlimit(length, old_length)


@contextmanager
def _run_postgres(
    conn: psycopg.Connection[Any],
    statement: str,
    params: Mapping[str, Any] | None = None,
    *,
    batch_rows: int = 0,
    guard_rows: bool = True,
    explain: bool,
    limit: int,
    timeout: float,
    max_bytes: int,
    role: str | None,
    check_functions: bool,
) -> Iterator[QueryStream]:
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
            cur.execute(statement, params, prepare=True)
        else:
            # DECLARE ... CURSOR: rows stay on the server until fetched.
            cur = conn.cursor(name=_CURSOR, scrollable=False)
            arm()
            cur.execute(_row_guard(statement, max_bytes) if guard_rows else statement, params)
        yield QueryStream(
            tuple(d.name for d in cur.description or ()),
            limit,
            max_bytes,
            cur.fetchmany if cur.description else lambda n: [],
            arm,
            batch_rows or _MAX_BATCH_ROWS,
        )
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
