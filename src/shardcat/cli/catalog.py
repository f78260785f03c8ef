"""``shardcat catalog ...``: manage the catalog database's schema.

Register with ``app.add_typer(catalog_app, name="catalog")``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ..catalog import migrate
from ..catalog.session import display_url
from .common import state_of
from .output import Output

__all__ = ["catalog_app"]

catalog_app = typer.Typer(
    name="catalog",
    help="Manage the SQL catalog: apply schema migrations, show the schema revision.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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
    before, after = migrate.upgrade(url, revision)
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
    rev = migrate.current(url)
    head = migrate.head_revision()
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
