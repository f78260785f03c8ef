"""The ``shardcat`` command: global options, error handling and command registration."""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import rich
import typer
from rich.markup import escape

from ..errors import ShardcatError
from .common import CONFIG_ENV, State, load_config, merge_options, resolve_catalog_url
from .output import err_console

__all__ = ["State", "app", "main"]

app = typer.Typer(
    name="shardcat",
    help="Numbered binary shards in any object store, found by key through a SQL catalog.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def parse_storage_options(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (dotted keys nest: ``client_kwargs.endpoint_url=...``)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            # Not echoed: a malformed pair may still hold a secret.
            raise typer.BadParameter("expected KEY=VALUE", param_hint="--storage-option")
        key, value = pair.split("=", 1)
        parsed: Any = value
        if value.lower() in ("true", "false"):
            parsed = value.lower() == "true"
        elif value.isdigit():
            parsed = int(value)
        node = options
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = parsed
    return options


@app.callback()
def _global(
    ctx: typer.Context,
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            "-c",
            help="SQLAlchemy URL of the catalog (default: $SHARDCAT_CATALOG, else the config "
            "file's, else sqlite:///shardcat.db).",
            show_default=False,
            metavar="URL",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More logging; tracebacks on errors.")
    ] = 0,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            "-S",
            help="fsspec option key=value (repeatable; dotted keys nest).",
            metavar="KEY=VALUE",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            envvar=CONFIG_ENV,
            help="TOML file with `catalog = URL` and a storage_options table "
            f"(default: ${CONFIG_ENV}). Command-line options and environment variables win.",
            show_default=False,
            metavar="FILE",
        ),
    ] = None,
) -> None:
    """Numbered binary shards in any object store, found by key through a SQL catalog."""
    # Only shardcat's own loggers: with -vv, third-party DEBUG logs (botocore,
    # urllib3) would show request headers, and storage options are secrets.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("shardcat").setLevel(
        logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    )
    # Progress bars and spinners (rich's global console) go to stderr: stdout is for results.
    rich.reconfigure(stderr=True)
    doc = load_config(config) if config is not None else {}
    options = merge_options(
        doc.get("storage_options", {}), parse_storage_options(storage_option or [])
    )
    ctx.obj = State(as_json, verbose, options, resolve_catalog_url(catalog, doc))


def _register() -> None:
    from . import dataset_cmds, maintenance_cmds, shard_cmds, sql_cmd, write_cmd
    from .catalog import catalog_app

    write_cmd.register(app)
    dataset_cmds.register(app)
    maintenance_cmds.register(app)
    sql_cmd.register(app)
    shard_cmds.register(app)
    app.add_typer(catalog_app, name="catalog")


_register()


_VERBOSE = re.compile(r"-v+|--verbose")
# click's ClickException, wherever this typer takes click from (typer >= 0.20 vendors it
# as typer._click, whose exceptions `import click` would not catch).
_CLICK_EXCEPTION: type[Any] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def main(argv: list[str] | None = None) -> None:
    """Entry point: map shardcat errors to one line on stderr and exit code 1."""
    args = sys.argv[1:] if argv is None else argv
    verbose = any(_VERBOSE.fullmatch(a) for a in args) or os.environ.get("SHARDCAT_DEBUG")
    try:
        # Outside standalone mode click returns typer.Exit's code instead of exiting.
        code = app(args, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except ShardcatError as e:
        if verbose:
            raise
        _print_error(e)
        sys.exit(1)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (OSError, ValueError) as e:  # the library's "bad argument" errors, e.g. a bad size
        if verbose:
            raise
        _print_error(e)
        sys.exit(1)
    except _CLICK_EXCEPTION as e:  # usage errors and friends
        e.show()
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        if verbose:
            raise
        err_console.print("interrupted")
        sys.exit(130)


def _print_error(e: BaseException) -> None:
    # The message is data (keys, URLs may hold '['): escape it, never parse it as markup.
    err_console.print(f"[red]error:[/red] {escape(str(e))}", markup=True, highlight=False)
