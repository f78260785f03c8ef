"""``shardcat sql``: a read-only query against the catalog, printed as a table."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from ..errors import CatalogError
from .common import require_catalog, state_of
from .output import err_console

__all__ = ["check_read_only", "register"]

_READ_ONLY_VERBS = ("select", "with", "explain", "values")
_VERB = re.compile(r"[\s(]*([A-Za-z_][A-Za-z0-9_$]*)")
_DOLLAR_TAG = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


def _code(query: str, dialect: str) -> str:
    """The query with quoted text as ``x`` and comments as spaces, position for position.

    Unterminated quotes or comments raise. PostgreSQL's dollar quotes are
    understood there; block comments end at the first ``*/`` (even where
    PostgreSQL nests them), which can only make more text count as code, so
    the checks err towards refusing.
    """
    out: list[str] = []
    i, n = 0, len(query)
    while i < n:
        c = query[i]
        if c in "'\"`" or (c == "[" and dialect == "sqlite"):
            close = "]" if c == "[" else c
            j = i + 1
            while True:
                j = query.find(close, j)
                if j < 0:
                    raise CatalogError("refused: the query has an unterminated quote")
                if close != "]" and query.startswith(close * 2, j):  # '' escapes a quote
                    j += 2
                    continue
                break
            out.append("x" * (j + 1 - i))
            i = j + 1
        elif query.startswith("--", i):
            j = query.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif query.startswith("/*", i):
            j = query.find("*/", i + 2)
            if j < 0:
                raise CatalogError("refused: the query has an unterminated /* comment")
            out.append(" " * (j + 2 - i))
            i = j + 2
        elif c == "$" and dialect == "postgresql" and (m := _DOLLAR_TAG.match(query, i)):
            prev = query[i - 1] if i else " "
            if prev.isalnum() or prev == "_":  # part of a name like a$b$, not a quote
                out.append(c)
                i += 1
                continue
            j = query.find(m.group(0), m.end())
            if j < 0:
                raise CatalogError("refused: the query has an unterminated dollar quote")
            j += len(m.group(0))
            out.append("x" * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_read_only(query: str, dialect: str = "sqlite") -> str:
    """The statement, if it is one SELECT, WITH, EXPLAIN or VALUES (trailing ``;`` dropped).

    This is the first of two guards: the query also runs in a read-only
    transaction, which stops writes hidden inside an allowed statement
    (``WITH x AS (DELETE ...) SELECT``, ``EXPLAIN ANALYZE DELETE``).

    Raises
    ------
    CatalogError
        If the text is empty, holds several statements, or starts with another verb.
    """
    code = _code(query, dialect)
    end = len(code.rstrip())
    while end and code[end - 1] == ";":
        end = len(code[: end - 1].rstrip())
    body = code[:end]
    if ";" in body:
        raise CatalogError("refused: shardcat sql runs one statement at a time")
    m = _VERB.match(body)
    verb = m.group(1).lower() if m else ""
    if not body.strip():
        raise CatalogError("refused: the query is empty")
    if verb not in _READ_ONLY_VERBS:
        shown = verb.upper() or body.strip()[:20]
        raise CatalogError(
            f"refused: {shown} statements are not allowed; shardcat sql is read-only "
            "(one SELECT, WITH, EXPLAIN or VALUES statement)"
        )
    return query[:end]


@contextlib.contextmanager
def _refuse_writes() -> Iterator[None]:
    """Say plainly when the read-only transaction stopped a write."""
    try:
        yield
    except CatalogError as e:
        text = str(e).lower()
        if "readonly database" in text or "read-only transaction" in text:
            raise CatalogError(
                f"refused: the query tried to write; shardcat sql is read-only ({e})"
            ) from e
        raise


def _cell(value: Any, *, as_json: bool) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        return raw.hex() if as_json or len(raw) <= 32 else f"<{len(raw):,} bytes>"
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return value


def sql(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(help="One SELECT, WITH, EXPLAIN or VALUES statement.", metavar="QUERY")
    ],
    limit: Annotated[
        int, typer.Option(min=1, help="Print at most this many rows.", metavar="N")
    ] = 1000,
) -> None:
    """Run a read-only SQL query against the catalog and print the rows.

    Anything but one SELECT/WITH/EXPLAIN/VALUES statement is refused, and the
    query runs in a read-only transaction. Tables: datasets, jobs, shards,
    records, layouts, layout_entries (docs/CATALOG.md). On SQLite, read
    pragmas as tables: SELECT * FROM pragma_table_info('shards').
    """
    from sqlalchemy.engine import make_url

    from ..catalog.session import create_catalog_engine, translate_errors

    state = state_of(ctx)
    url = state.catalog_url
    require_catalog(url)
    engine = create_catalog_engine(url)
    try:
        dialect = engine.dialect.name
        statement = check_read_only(query, dialect)
        with _refuse_writes(), translate_errors(make_url(url)), engine.connect() as conn:
            if dialect == "sqlite":
                conn.exec_driver_sql("PRAGMA query_only = ON")
            else:
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            try:
                # no_parameters: the text goes to the driver as is (':' and '%' are not placeholders).
                result = conn.execution_options(no_parameters=True).exec_driver_sql(statement)
                columns = list(result.keys()) if result.returns_rows else []
                rows = result.fetchmany(limit + 1) if result.returns_rows else []
            finally:
                conn.rollback()
                if dialect == "sqlite":  # the connection goes back to the pool writable
                    conn.exec_driver_sql("PRAGMA query_only = OFF")
                    conn.rollback()
    finally:
        engine.dispose()
    truncated = len(rows) > limit
    rows = rows[:limit]
    out = state.out
    as_json = out.as_json
    cells = [[_cell(v, as_json=as_json) for v in row] for row in rows]
    out.table(f"{len(cells)} row(s)", columns, cells)
    if truncated:
        err_console.print(
            f"(showing the first {limit} rows; raise --limit to see more)", markup=False
        )
