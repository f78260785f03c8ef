"""The ``shardcat`` command: global options, error handling and command registration."""

from __future__ import annotations

import io
import logging
import os
import re
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, NoReturn

import rich
import typer
from rich.markup import escape

from .._redact import Scrubber
from ..errors import ShardcatError
from .common import (
    CATALOG_ENV,
    CONFIG_ENV,
    State,
    load_config,
    merge_options,
    resolve_catalog_url,
)
from .output import err_console

__all__ = ["State", "app", "main"]

app = typer.Typer(
    name="shardcat",
    help="Numbered binary shards in any object store, found by key through a SQL catalog.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

_scrubber = Scrubber()
"""This invocation's secrets: main() collects the command line's, the global options the
config file's. Everything main() prints about an error, and every log line, goes through it."""


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
    handler = logging.StreamHandler()
    handler.setFormatter(_ScrubbingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("shardcat").setLevel(
        logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING
    )
    # Progress bars and spinners (rich's global console) go to stderr: stdout is for results.
    rich.reconfigure(stderr=True)
    doc = load_config(config) if config is not None else {}
    options = merge_options(
        doc.get("storage_options", {}), parse_storage_options(storage_option or [])
    )
    catalog_url = resolve_catalog_url(catalog, doc)
    _scrubber.add_url(catalog_url)
    _scrubber.add_options(options)
    ctx.obj = State(as_json, verbose, options, catalog_url)


class _ScrubbingFormatter(logging.Formatter):
    """Log lines (exception tracebacks included) without this invocation's secrets."""

    def format(self, record: logging.LogRecord) -> str:
        return _scrubber(super().format(record))


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


_CATALOG_FLAGS = ("-c", "--catalog")
_OPTION_FLAGS = ("-S", "--storage-option")


def command_line_secrets(args: list[str], environ: Mapping[str, str]) -> Scrubber:
    """The secrets of a command line, found before click parses it.

    Passwords and signed query values of every URL among ``args`` and of
    ``$SHARDCAT_CATALOG``, and the values of secret-named ``-S`` options: so
    that a usage error, a bad config file or a traceback never shows them,
    whatever stage the command fails at.
    """
    scrubber = Scrubber()
    scrubber.add_url(environ.get(CATALOG_ENV, ""))
    previous = ""
    for arg in args:
        flag, eq, inline = arg.partition("=")
        if previous in _CATALOG_FLAGS or (eq and flag == "--catalog"):
            scrubber.add_url(inline if eq and flag == "--catalog" else arg)
        elif "://" in arg or ":" in arg.rpartition("@")[0]:  # a URL, or what was meant as one
            scrubber.add_url(arg)
        pair = None
        if previous in _OPTION_FLAGS:
            pair = arg
        elif eq and flag == "--storage-option":
            pair = inline
        elif arg.startswith("-S") and len(arg) > 2:
            pair = arg[2:]
        if pair is not None:
            key, is_pair, value = pair.partition("=")
            # A malformed pair (no '=') may be a secret pasted on its own.
            scrubber.add_options({key: value} if is_pair else {"secret": pair})
        previous = arg
    return scrubber


def main(argv: list[str] | None = None) -> None:
    """Entry point: map shardcat errors to one line on stderr and exit code 1.

    With ``-v`` (or ``$SHARDCAT_DEBUG``) the traceback is printed instead. Every
    error text, traceback and usage message is passed through the invocation's
    :class:`~shardcat._redact.Scrubber` first: the messages are built from
    redacted URLs already, this catches what a library quoted on its own.
    """
    global _scrubber
    args = sys.argv[1:] if argv is None else argv
    verbose = any(_VERBOSE.fullmatch(a) for a in args) or os.environ.get("SHARDCAT_DEBUG")
    _scrubber = command_line_secrets(args, os.environ)
    try:
        # Outside standalone mode click returns typer.Exit's code instead of exiting.
        code = app(args, standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except ShardcatError as e:
        _fail(e, verbose)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(1)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (OSError, ValueError) as e:  # the library's "bad argument" errors, e.g. a bad size
        _fail(e, verbose)
    except _CLICK_EXCEPTION as e:  # usage errors and friends: click quotes the arguments
        shown = io.StringIO()
        e.show(file=shown)
        sys.stderr.write(_scrubber(shown.getvalue()))
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:
        if verbose:
            _print_traceback(e)
        else:
            err_console.print("interrupted")
        sys.exit(130)
    except Exception as e:  # not shardcat's: a bug, or a library's error nothing translated
        _print_traceback(e)
        sys.exit(1)


def _fail(e: BaseException, verbose: object) -> NoReturn:
    if verbose:
        _print_traceback(e)
    else:
        _print_error(e)
    sys.exit(1)


def _print_traceback(e: BaseException) -> None:
    """What Python prints for an uncaught exception (chained ones too), scrubbed."""
    sys.stderr.write(_scrubber("".join(traceback.format_exception(e))))
    sys.stderr.flush()


def _print_error(e: BaseException) -> None:
    # The message is data (keys, URLs may hold '['): escape it, never parse it as markup.
    err_console.print(
        f"[red]error:[/red] {escape(_scrubber(str(e)))}", markup=True, highlight=False
    )
