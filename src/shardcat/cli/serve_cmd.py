"""``shardcat serve``: the read-only HTTP API, and ``shardcat serve token ...``: its tokens.

Parses the options and calls :mod:`shardcat.serve`; Starlette and uvicorn
load only when the server starts (the token commands need neither).

Register with ``app.add_typer(serve_app, name="serve")``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .common import open_catalog, require_catalog, state_of
from .global_options import GlobalOptionsGroup, use_global_options

if TYPE_CHECKING:
    from ..reading import Catalog

__all__ = ["serve_app"]

serve_app = typer.Typer(
    name="serve",
    invoke_without_command=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=GlobalOptionsGroup,
)
token_app = typer.Typer(
    name="token",
    help="Make, list and revoke the access tokens of `shardcat serve` (kept hashed in the catalog).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=GlobalOptionsGroup,
)


@serve_app.callback()
def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="The address to bind (0.0.0.0: every interface).", metavar="HOST")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="The TCP port.")] = 8765,
    catalog_name: Annotated[
        str,
        typer.Option(
            help="The name of the --catalog catalog in the API (?catalog=NAME).", metavar="NAME"
        ),
    ] = "default",
    add_catalog: Annotated[
        list[str] | None,
        typer.Option(
            help="Serve another catalog too, as NAME (repeat for more).", metavar="NAME=URL"
        ),
    ] = None,
    allow_anonymous: Annotated[
        bool,
        typer.Option(
            "--allow-anonymous",
            help="Answer requests without a token; refused unless --host is a loopback address.",
        ),
    ] = False,
    workers: Annotated[int, typer.Option(min=1, help="uvicorn worker processes.")] = 1,
    root_path: Annotated[
        str,
        typer.Option(
            help="The path a reverse proxy serves the API under, e.g. /shardcat.", metavar="PATH"
        ),
    ] = "",
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="Let browser pages of this origin call the API (repeat for more; default: "
            "none, CORS off).",
            metavar="ORIGIN",
        ),
    ] = None,
    sql: Annotated[
        bool,
        typer.Option(
            "--sql",
            help="Serve POST /api/v1/sql to tokens made without --dataset (it reads every table, "
            "shard URLs included).",
        ),
    ] = False,
    page: Annotated[
        bool,
        typer.Option(
            "--page/--no-page",
            help="Serve the dataset browser at /ui/ (a web page; it holds no data of its own).",
        ),
    ] = True,
    log_level: Annotated[str, typer.Option(help="uvicorn's log level.", metavar="LEVEL")] = "info",
) -> None:
    """Serve the catalog's datasets over HTTP, read-only: `serve token` makes its tokens.

    Datasets, keys, samples, entries (with Range), batches and read-only SQL under
    /api/v1, and a dataset browser at /ui/ (docs/SERVE.md; needs the serve extra).
    Every request needs 'Authorization: Bearer TOKEN' (`shardcat serve token create`)
    unless --allow-anonymous is given with a loopback --host. Limits: the settings
    serve_max_batch_keys, serve_max_response_bytes, serve_rate_limit, serve_rate_burst
    (docs/CONFIG.md).
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..serve import ServeConfig, require_extra
    from ..serve.config import parse_catalog

    state = state_of(ctx)
    require_catalog(state.catalog_url)
    catalogs = [parse_catalog(f"{catalog_name}={state.catalog_url}")]
    for i, spec in enumerate(add_catalog or (), start=1):
        name, url = parse_catalog(spec, i)
        require_catalog(url)
        catalogs.append((name, url))
    role = state.config.get("sql_role")
    config = ServeConfig.from_settings(
        tuple(catalogs),
        host=host,
        port=port,
        allow_anonymous=allow_anonymous,
        workers=workers,
        root_path=root_path,
        cors_origins=tuple(cors_origin or ()),
        sql=sql,
        sql_role=role if isinstance(role, str) else None,
        storage_options=state.storage_options,
        page=page,
    )
    require_extra()
    from ..serve import run

    where = f"http://{host}:{port}{root_path}"
    state.out.note(
        f"serving {len(catalogs)} catalog(s) at {where}/api/v1"
        + (f" and the dataset browser at {where}/ui/" if page else "")
        + f" ({'anonymous access' if allow_anonymous else 'tokens required'}); Ctrl-C stops"
    )
    run(config, log_level=log_level)


def _catalog(ctx: typer.Context) -> Catalog:
    return open_catalog(state_of(ctx))


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            help="A dataset the token may read (repeat for more; none: every dataset of the "
            "catalog, and SQL).",
            metavar="NAME",
        ),
    ] = None,
    expires: Annotated[
        str,
        typer.Option(help="Lifetime: 30d, 12h, 1y, or never.", metavar="DURATION"),
    ] = "90d",
    name: Annotated[
        str | None,
        typer.Option(help="A unique name to list and revoke it by.", metavar="NAME"),
    ] = None,
) -> None:
    """Make a token and print it once (only its SHA-256 is kept in the catalog)."""
    from ..serve.tokens import create_token

    with _catalog(ctx) as cat:
        made = create_token(cat, datasets=dataset, expires=expires, name=name)
    row = made.row
    out = state_of(ctx).out
    scope = "every dataset" if row.datasets is None else ", ".join(row.datasets)
    until = row.expires_at.isoformat() if row.expires_at else "never"
    if out.name == "json":
        doc = {
            "name": row.name,
            "token": made.token,
            "datasets": None if row.datasets is None else list(row.datasets),
            "expires_at": None if row.expires_at is None else until,
        }
        print(json.dumps(doc))
        return
    print(made.token)
    out.note(f"token {row.name!r}: reads {scope}; expires {until}. It is shown this once.")


@token_app.command("list")
def token_list(ctx: typer.Context) -> None:
    """List the tokens: name, scope, state, expiry (never the tokens themselves)."""
    from ..serve.tokens import list_tokens

    with _catalog(ctx) as cat:
        rows = list_tokens(cat)
    docs: list[dict[str, Any]] = [
        {
            "id": r.id,
            "name": r.name,
            "datasets": None if r.datasets is None else list(r.datasets),
            "state": r.state(),
            "created_at": r.created_at.isoformat(),
            "expires_at": r.expires_at.isoformat() if r.expires_at else None,
            "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
        }
        for r in rows
    ]
    out = state_of(ctx).out
    if out.name == "json":
        print(json.dumps(docs, indent=2))
        return
    print("\t".join(("id", "name", "state", "datasets", "expires_at")))
    for d in docs:
        scope = "*" if d["datasets"] is None else ",".join(d["datasets"])
        print("\t".join(map(str, (d["id"], d["name"], d["state"], scope, d["expires_at"] or "-"))))


@token_app.command("revoke")
def token_revoke(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The token's name (or id).", metavar="NAME")],
) -> None:
    """Revoke a token: servers refuse it within seconds (their cache of tokens, 5 s)."""
    from ..serve.tokens import revoke

    with _catalog(ctx) as cat:
        row = revoke(cat, name)
    state_of(ctx).out.note(f"token {row.name!r} revoked")


use_global_options(token_app)
serve_app.add_typer(token_app, name="token")
