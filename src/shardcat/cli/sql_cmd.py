"""``shardcat sql``: a read-only query against the catalog, printed as rows arrive.

The checks and limits live in :mod:`shardcat.catalog.readonly`; this module
parses the options and prints.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .._units import count_of
from .common import SQL_ROLE_ENV, require_catalog, state_of

__all__ = ["register"]  # and check_read_only, loaded on use (__getattr__)

DEFAULT_MAX_BYTES = "64MiB"
DEFAULT_TIMEOUT = 30.0
"""shardcat.catalog.readonly.DEFAULT_TIMEOUT, repeated: `--help` must not import SQLAlchemy
(a test checks that the two agree)."""


def __getattr__(name: str) -> object:
    if name == "check_read_only":  # re-exported, loaded on use (it imports SQLAlchemy)
        from ..catalog.readonly import check_read_only

        return check_read_only
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(app: typer.Typer) -> None:
    app.command("sql")(sql)


def _max_bytes(value: str) -> str:
    from .._units import parse_size

    if value.strip() != "0":
        try:
            parse_size(value)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
    return value


def sql(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(help="One SELECT, WITH, EXPLAIN or VALUES statement.", metavar="QUERY")
    ],
    limit: Annotated[
        int,
        typer.Option(
            min=0,
            help="Print at most this many rows (0 = every row, streamed as it arrives).",
            metavar="N",
        ),
    ] = 1000,
    timeout: Annotated[
        float,
        typer.Option(
            min=0,
            help="Cancel the query after this many seconds (0 = no limit).",
            metavar="SECONDS",
        ),
    ] = DEFAULT_TIMEOUT,
    max_bytes: Annotated[
        str,
        typer.Option(
            callback=_max_bytes,
            help="Stop before the values printed pass this size, e.g. 64MiB; one larger value "
            "is refused (0 = no limit).",
            metavar="SIZE",
        ),
    ] = DEFAULT_MAX_BYTES,
    role: Annotated[
        str | None,
        typer.Option(
            envvar=SQL_ROLE_ENV,
            help="PostgreSQL: run the query as this read-only role (SET ROLE; see "
            "`shardcat catalog create-readonly-role`). Default: $SHARDCAT_SQL_ROLE, else the "
            "config file's sql_role.",
            show_default=False,
            metavar="NAME",
        ),
    ] = None,
) -> None:
    """Run a read-only SQL query against the catalog and print the rows.

    Rows are printed as they arrive. --json prints one document,
    {"columns": [...], "rows": [{...}, ...], "truncated": false, "cut": null,
    "limit": 1000, "max_bytes": 67108864}: "truncated" says whether rows were
    left out, "cut" why ("limit" or "max_bytes"). --limit 0 --max-bytes 0
    prints every row.

    Anything but one SELECT/WITH/EXPLAIN/VALUES statement is refused, the
    query runs in a read-only transaction, and on PostgreSQL a query naming
    a function with side effects (VOLATILE: pg_read_file, pg_sleep, ...) is
    refused. Tables: datasets, jobs, shards, records, layouts,
    layout_entries (docs/CATALOG.md). On SQLite, read pragmas as tables:
    SELECT * FROM pragma_table_info('shards').
    """
    from .._units import format_bytes, parse_size
    from ..catalog import create_catalog_engine
    from ..catalog.readonly import open_read_only

    state = state_of(ctx)
    url = state.catalog_url
    require_catalog(url)
    source = ctx.get_parameter_source("role")  # typer may vendor click: compare by name
    explicit_role = getattr(source, "name", None) == "COMMANDLINE"
    if role is None:
        configured = state.config.get("sql_role")
        role = configured if isinstance(configured, str) else None
    budget = 0 if max_bytes.strip() == "0" else parse_size(max_bytes)
    engine = create_catalog_engine(url)
    out = state.out
    try:
        if engine.dialect.name != "postgresql" and not explicit_role:
            role = None  # a team-wide $SHARDCAT_SQL_ROLE does not stop queries of a SQLite file
        with open_read_only(
            engine, query, limit=limit, timeout=timeout, max_bytes=budget, role=role or None
        ) as result:
            out.query_result(result)
    finally:
        engine.dispose()
    if result.cut == "limit":
        out.note(f"(showing the first {limit} rows; raise --limit, or 0 for every row)")
    elif result.cut == "max_bytes":
        out.note(
            f"(output cut after {count_of(result.rows, 'row')}: the next row would pass --max-bytes "
            f"{format_bytes(budget)}; raise --max-bytes (0 = no limit) or select less)"
        )
