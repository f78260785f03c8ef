"""The ``shardcat`` command: global options, error handling and command registration."""

from __future__ import annotations

import io
import os
import re
import sys
import traceback
from collections.abc import Mapping
from typing import Annotated, Any, NoReturn

import typer
from rich.markup import escape

from .. import config
from .._redact import Scrubber
from .._version import __version__
from ..errors import JobInterrupted, ShardcatError
from .common import CATALOG_ENV, State
from .dask_logs import failed_tasks_quiet
from .global_options import (
    GlobalOptionsGroup,
    Interrupted,
    scrubber,
    set_scrubber,
    use_global_options,
)
from .output import err_console
from .storage_options import parse_storage_options

__all__ = ["State", "app", "main", "parse_storage_options"]

app = typer.Typer(
    name="shardcat",
    help="Numbered binary shards in any object store, found by key through a SQL catalog.",
    cls=GlobalOptionsGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        print(f"shardcat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            expose_value=False,
            callback=_print_version,
            help="Print shardcat's version and exit.",
        ),
    ] = False,
) -> None:
    """Numbered binary shards in any object store, found by key through a SQL catalog."""
    # The global options are the group's (global_options.py), the same on every command.


def _register() -> None:
    from . import (
        compact_cmd,
        copy_cmd,
        dataset_cmds,
        export_cmd,
        fields_cmd,
        groups_cmds,
        maintenance_cmds,
        serve_cmd,
        shard_cmds,
        sql_cmd,
        tar_cmds,
        version_cmds,
        write_cmd,
    )
    from .catalog import catalog_app

    write_cmd.register(app)
    copy_cmd.register(app)
    export_cmd.register(app)
    compact_cmd.register(app)
    dataset_cmds.register(app)
    maintenance_cmds.register(app)
    version_cmds.register(app)
    groups_cmds.register(app)
    fields_cmd.register(app)
    sql_cmd.register(app)
    shard_cmds.register(app)
    tar_cmds.register(app)
    use_global_options(app)
    app.add_typer(catalog_app, name="catalog")
    app.add_typer(tar_cmds.taridx_app, name="taridx")
    app.add_typer(serve_cmd.serve_app, name="serve")


_register()


_VERBOSE = re.compile(r"-v+|--verbose")
# click's ClickException, wherever this typer takes click from (typer >= 0.20 vendors it
# as typer._click, whose exceptions `import click` would not catch).
_CLICK_EXCEPTION: type[Any] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


_CATALOG_FLAGS = ("-c", "--catalog", "--to-catalog")
_URL_FLAGS = ("--catalog", "--to-catalog")
_OPTION_FLAGS = ("-S", "--storage-option", "--dest-option")


def command_line_secrets(args: list[str], environ: Mapping[str, str]) -> Scrubber:
    """The secrets of a command line, found before click parses it.

    Passwords and signed query values of every URL among ``args`` and of
    ``$SHARDCAT_CATALOG``, and the values of secret-named ``-S`` options: so
    that a usage error, a bad config file or a traceback never shows them,
    whatever stage the command fails at.
    """
    found = Scrubber()
    found.add_url(environ.get(CATALOG_ENV, ""))
    previous = ""
    for arg in args:
        flag, eq, inline = arg.partition("=")
        if previous in _CATALOG_FLAGS or (eq and flag in _URL_FLAGS):
            found.add_url(inline if eq and flag in _URL_FLAGS else arg)
        elif "://" in arg or ":" in arg.rpartition("@")[0]:  # a URL, or what was meant as one
            found.add_url(arg)
        pair = None
        if previous in _OPTION_FLAGS:
            pair = arg
        elif eq and flag in ("--storage-option", "--dest-option"):
            pair = inline
        elif arg.startswith("-S") and len(arg) > 2:
            pair = arg[2:]
        if pair is not None:
            key, is_pair, value = pair.partition("=")
            # A malformed pair (no '=') may be a secret pasted on its own.
            key = key.partition(":")[0]  # KEY:TYPE=VALUE
            found.add_options({key: value} if is_pair else {"secret": pair})
        previous = arg
    return found


def main(argv: list[str] | None = None) -> None:
    """Entry point: map shardcat errors to one line on stderr and exit code 1.

    An error raised in a Dask task is printed the same way: Dask workers' own report of
    it is kept quiet (:mod:`.dask_logs`). With ``-v`` (or ``$SHARDCAT_DEBUG``) the
    traceback is printed instead, and the workers' reports too. Every
    error text, traceback and usage message is passed through the invocation's
    :class:`~shardcat._redact.Scrubber` first: the messages are built from
    redacted URLs already, this catches what a library quoted on its own.
    """
    args = sys.argv[1:] if argv is None else argv
    verbose = any(_VERBOSE.fullmatch(a) for a in args) or bool(config.collect_env().get("debug"))
    set_scrubber(command_line_secrets(args, os.environ))
    try:
        # Outside standalone mode click returns typer.Exit's code instead of exiting.
        with failed_tasks_quiet(verbose):
            code = app(args, prog_name="shardcat", standalone_mode=False)
        if isinstance(code, int) and code:
            sys.exit(code)
    except ShardcatError as e:
        _fail(e, verbose)
    except Interrupted as e:
        _interrupted(e.interrupt, verbose)
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
        sys.stderr.write(scrubber()(shown.getvalue()))
        sys.exit(e.exit_code)
    except KeyboardInterrupt as e:
        _interrupted(e, verbose)
    except Exception as e:  # not shardcat's: a bug, or a library's error nothing translated
        _print_traceback(e)
        sys.exit(1)


def _interrupted(e: KeyboardInterrupt, verbose: object) -> NoReturn:
    """Ctrl-C: one line saying what became of the job (how to resume it or clean up), exit 130."""
    if verbose:
        _print_traceback(e)
        sys.exit(130)
    # A second Ctrl-C while the job stopped (its cluster shutting down) says no more.
    seen: BaseException | None = e
    while seen is not None and not isinstance(seen, JobInterrupted):
        seen = seen.__context__
    if isinstance(seen, JobInterrupted):
        text = scrubber()(seen.render("cli"))
        err_console.print(escape(text), markup=True, highlight=False)
    else:
        err_console.print("interrupted")
    sys.exit(130)


def _fail(e: BaseException, verbose: object) -> NoReturn:
    if verbose:
        _print_traceback(e)
    else:
        _print_error(e)
    sys.exit(1)


def _print_traceback(e: BaseException) -> None:
    """What Python prints for an uncaught exception (chained ones too), scrubbed."""
    sys.stderr.write(scrubber()("".join(traceback.format_exception(e))))
    sys.stderr.flush()


def _print_error(e: BaseException) -> None:
    # The command line's words for what to do (--mode append, not mode='append').
    text = e.render("cli") if isinstance(e, ShardcatError) else str(e)
    # The message is data (keys, URLs may hold '['): escape it, never parse it as markup.
    err_console.print(f"[red]error:[/red] {escape(scrubber()(text))}", markup=True, highlight=False)
