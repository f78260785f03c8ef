"""``shardcat catalog ...``: manage the catalog database's schema and its read-only role.

Register with ``app.add_typer(catalog_app, name="catalog")``.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from ..catalog import current as current_revision
from ..catalog import display_url, head_revision
from ..catalog import upgrade as upgrade_catalog
from .common import state_of
from .output import Output

__all__ = ["catalog_app"]

catalog_app = typer.Typer(
    name="catalog",
    help="Manage the SQL catalog: apply schema migrations, show the schema revision, create a "
    "read-only role.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

PASSWORD_ENV = "SHARDCAT_ROLE_PASSWORD"

CatalogOption = Annotated[
    str | None,
    typer.Option(
        "--catalog",
        "-c",
        help="SQLAlchemy URL of the catalog (default: the global --catalog, $SHARDCAT_CATALOG, "
        "else sqlite:///shardcat.db).",
        show_default=False,
    ),
]


def _output(ctx: typer.Context) -> Output:
    return state_of(ctx).out


def _url(ctx: typer.Context, catalog: str | None) -> str:
    """This command's --catalog, else the global one (which falls back to env, config, default)."""
    return catalog or state_of(ctx).catalog_url


@catalog_app.command()
def upgrade(
    ctx: typer.Context,
    catalog: CatalogOption = None,
    revision: Annotated[str, typer.Option(help="Target revision.")] = "head",
) -> None:
    """Apply the catalog's schema migrations (creates the tables in an empty database)."""
    url = _url(ctx, catalog)
    before, after = upgrade_catalog(url, revision)
    out = _output(ctx)
    if out.as_json:
        out.json({"catalog": display_url(url), "from": before, "to": after})
    elif before == after:
        out.line(f"catalog {display_url(url)} is at revision {after} already", markup=False)
    else:
        out.line(
            f"catalog {display_url(url)} upgraded from {before or 'empty'} to revision {after}",
            markup=False,
        )


@catalog_app.command()
def current(ctx: typer.Context, catalog: CatalogOption = None) -> None:
    """Print the catalog's schema revision (and whether it is the newest this shardcat knows)."""
    url = _url(ctx, catalog)
    rev = current_revision(url)
    head = head_revision()
    out = _output(ctx)
    if out.as_json:
        out.json(
            {"catalog": display_url(url), "revision": rev, "head": head, "at_head": rev == head}
        )
        return
    if rev is None:
        out.line(
            f"none (catalog {display_url(url)} has no schema; run `shardcat catalog upgrade`)",
            markup=False,
        )
    elif rev == head:
        out.line(f"{rev} (head)")
    else:
        out.line(f"{rev} (this shardcat's head is {head}; run `shardcat catalog upgrade`)")


@catalog_app.command("create-readonly-role")
def create_readonly_role(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The role to create or update.", metavar="NAME")],
    catalog: CatalogOption = None,
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
    from ..catalog import create_catalog_engine
    from ..catalog.readonly import create_readonly_role as create
    from ..catalog.readonly import require_postgres

    url = _url(ctx, catalog)
    engine = create_catalog_engine(url)
    try:
        require_postgres(engine, "shardcat catalog create-readonly-role")  # before asking anything
        password = None
        if login:
            password = os.environ.get(PASSWORD_ENV) or typer.prompt(
                f"password for role {name}", hide_input=True, confirmation_prompt=True
            )
        role = create(engine, name, password=password)
    finally:
        engine.dispose()
    out = _output(ctx)
    if out.as_json:
        out.json(
            {
                "catalog": display_url(url),
                "role": role.name,
                "schema": role.schema,
                "tables": list(role.tables),
                "created": role.created,
                "login": role.login,
                "granted_to": role.granted_to,
            }
        )
        return
    verb = "created" if role.created else "updated"
    kind = "LOGIN" if role.login else "NOLOGIN"
    out.line(
        f"{verb} role {role.name} ({kind}): SELECT on {len(role.tables)} catalog tables in "
        f"schema {role.schema} of {display_url(url)}",
        markup=False,
    )
    if role.granted_to:
        out.line(f"granted {role.name} to {role.granted_to}", markup=False)
    out.line(
        f'use it: shardcat sql --role {role.name} "SELECT ..." (or SHARDCAT_SQL_ROLE={role.name})',
        markup=False,
    )
