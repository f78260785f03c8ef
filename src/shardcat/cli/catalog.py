"""``shardcat catalog ...``: manage the catalog database's schema and its read-only role.

Register with ``app.add_typer(catalog_app, name="catalog")``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .. import config
from .common import state_of
from .global_options import GlobalOptionsGroup, use_global_options
from .output import Output

__all__ = ["catalog_app"]

catalog_app = typer.Typer(
    name="catalog",
    help="Manage the SQL catalog: apply schema migrations, show the schema revision, partition "
    "records, create a read-only role.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=GlobalOptionsGroup,
)

PASSWORD_ENV = config.env_var("role_password")


def _output(ctx: typer.Context) -> Output:
    return state_of(ctx).out


def _url(ctx: typer.Context) -> str:
    """The global --catalog (given before or after the command), else env, config, default."""
    return state_of(ctx).catalog_url


@catalog_app.command()
def upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Apply the catalog's schema migrations (creates the tables in an empty database)."""
    from ..catalog import display_url
    from ..catalog import upgrade as upgrade_catalog

    url = _url(ctx)
    before, after = upgrade_catalog(url, revision)
    _output(ctx).catalog_upgraded(display_url(url), before, after)


@catalog_app.command()
def partition(
    ctx: typer.Context,
    partitions: Annotated[
        int,
        typer.Option(
            "--partitions",
            help="Hash partitions of records, 1-1024; 0 makes it one plain table again.",
            min=0,
            max=1024,
        ),
    ],
) -> None:
    """PostgreSQL: rebuild records hash-partitioned by key hash (or plain again), rows kept.

    The layout a catalog created with the `record_partitions` setting has
    (docs/CATALOG.md). One transaction under an exclusive lock on records:
    lookups and writes wait until it ends; it needs free disk for a second
    copy of records. The catalog must be at the newest revision.
    """
    from ..catalog import display_url, partition_records

    url = _url(ctx)
    before, after = partition_records(url, partitions)
    _output(ctx).records_partitioned(display_url(url), before, after)


@catalog_app.command()
def current(ctx: typer.Context) -> None:
    """Print the catalog's schema revision (and whether it is the newest this shardcat knows)."""
    from ..catalog import current as current_revision
    from ..catalog import display_url, head_revision

    url = _url(ctx)
    rev = current_revision(url)
    head = head_revision()
    _output(ctx).catalog_revision(display_url(url), rev, head)


@catalog_app.command("create-readonly-role")
def create_readonly_role(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The role to create or update.", metavar="NAME")],
    login: Annotated[
        bool,
        typer.Option(
            "--login",
            help=f"Let the role log in with a password (from ${PASSWORD_ENV}, else asked for; "
            "never echoed). Default: NOLOGIN, for `shardcat sql --role NAME`.",
        ),
    ] = False,
) -> None:
    """PostgreSQL: create a role that may only SELECT the catalog tables, for `shardcat sql --role`.

    Grants USAGE on the catalog's schema, SELECT on its tables (and on tables
    later migrations add), and the role to you, so `SET ROLE` works. Safe to
    run again.
    """
    from ..catalog import create_catalog_engine, display_url
    from ..catalog.readonly import create_readonly_role as create
    from ..catalog.readonly import require_postgres

    url = _url(ctx)
    engine = create_catalog_engine(url)
    try:
        require_postgres(engine, "shardcat catalog create-readonly-role")  # before asking anything
        password = None
        if login:
            password = config.get("role_password") or typer.prompt(
                f"password for role {name}", hide_input=True, confirmation_prompt=True
            )
        role = create(engine, name, password=password)
    finally:
        engine.dispose()
    _output(ctx).readonly_role(display_url(url), role)


use_global_options(catalog_app)
