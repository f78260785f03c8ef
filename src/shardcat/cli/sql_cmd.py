"""``shardcat sql``: a read-only query against the catalog, printed as a table.

The checks and limits live in :mod:`shardcat.catalog.readonly`; this module
parses the options and prints.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ..catalog.readonly import DEFAULT_TIMEOUT, check_read_only
from .common import CONFIG_ENV, SQL_ROLE_ENV, load_config, require_catalog, state_of

__all__ = ["check_read_only", "register"]

DEFAULT_MAX_BYTES = "64MiB"


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


def _configured_role(ctx: typer.Context) -> str | None:
    """The config file's ``sql_role`` (the file the global --config or $SHARDCAT_CONFIG names)."""
    path = ctx.find_root().params.get("config") or os.environ.get(CONFIG_ENV)
    if not path:
        return None
    role = load_config(path).get("sql_role")
    return role if isinstance(role, str) else None


def sql(
    ctx: typer.Context,
    query: Annotated[
        str, typer.Argument(help="One SELECT, WITH, EXPLAIN or VALUES statement.", metavar="QUERY")
    ],
    limit: Annotated[
        int, typer.Option(min=1, help="Print at most this many rows.", metavar="N")
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

    Anything but one SELECT/WITH/EXPLAIN/VALUES statement is refused, the
    query runs in a read-only transaction, and on PostgreSQL a query naming
    a function with side effects (VOLATILE: pg_read_file, pg_sleep, ...) is
    refused. Tables: datasets, jobs, shards, records, layouts,
    layout_entries (docs/CATALOG.md). On SQLite, read pragmas as tables:
    SELECT * FROM pragma_table_info('shards').
    """
    from .._units import format_bytes, parse_size
    from ..catalog import create_catalog_engine
    from ..catalog.readonly import run_read_only

    state = state_of(ctx)
    url = state.catalog_url
    require_catalog(url)
    source = ctx.get_parameter_source("role")  # typer may vendor click: compare by name
    explicit_role = getattr(source, "name", None) == "COMMANDLINE"
    if role is None:
        role = _configured_role(ctx)
    budget = 0 if max_bytes.strip() == "0" else parse_size(max_bytes)
    engine = create_catalog_engine(url)
    try:
        if engine.dialect.name != "postgresql" and not explicit_role:
            role = None  # a team-wide $SHARDCAT_SQL_ROLE does not stop queries of a SQLite file
        result = run_read_only(
            engine, query, limit=limit, timeout=timeout, max_bytes=budget, role=role or None
        )
    finally:
        engine.dispose()
    out = state.out
    out.query_result(result.columns, result.rows)
    if result.cut == "limit":
        out.note(f"(showing the first {limit} rows; raise --limit to see more)")
    elif result.cut == "max_bytes":
        out.note(
            f"(output cut after {len(result.rows)} row(s): the next row would pass --max-bytes "
            f"{format_bytes(budget)}; raise --max-bytes or select less)"
        )
