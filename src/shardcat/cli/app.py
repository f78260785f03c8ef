"""The ``shardcat`` command: global options, error handling and command registration."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated, Any

import typer

from ..errors import ShardcatError
from .output import Output, err_console

__all__ = ["app", "main"]

app = typer.Typer(
    name="shardcat",
    help="Numbered binary shards in any object store, found by key through a SQL catalog.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class State:
    """What the global options chose, handed to every command."""

    def __init__(self, as_json: bool, verbose: int, storage_options: dict[str, Any]) -> None:
        self.out = Output(as_json)
        self.verbose = verbose
        self.storage_options = storage_options


def parse_storage_options(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs (dotted keys nest: ``client_kwargs.endpoint_url=...``)."""
    options: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--storage-option")
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
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    verbose: Annotated[
        int, typer.Option("-v", "--verbose", count=True, help="More logging; tracebacks on errors.")
    ] = 0,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            "-S",
            help="fsspec option key=value (repeatable).",
            metavar="KEY=VALUE",
        ),
    ] = None,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    )
    ctx.obj = State(as_json, verbose, parse_storage_options(storage_option or []))


def _register() -> None:
    from . import shard_cmds

    shard_cmds.register(app)


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point: map shardcat errors to one line on stderr and exit code 1."""
    args = sys.argv[1:] if argv is None else argv
    verbose = any(a in ("-v", "-vv", "--verbose") for a in args) or os.environ.get("SHARDCAT_DEBUG")
    try:
        app(args, standalone_mode=False)
    except ShardcatError as e:
        if verbose:
            raise
        err_console.print(f"[red]error:[/red] {e}", markup=True, highlight=False)
        sys.exit(1)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except OSError as e:
        if verbose:
            raise
        err_console.print(f"[red]error:[/red] {e}", markup=True, highlight=False)
        sys.exit(1)
    except Exception as e:  # click usage errors and friends
        import click

        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        raise
