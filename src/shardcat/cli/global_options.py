"""The global options, accepted before the command and after it, with the same meaning.

``shardcat -c URL ls DATASET --json`` and ``shardcat ls DATASET -c URL --json``
are the same command. The options are declared once (:func:`_declare`, a
typer signature); the root callback takes them before the command and every
command takes them too (:class:`GlobalOptionsCommand` adds them to its
parameters). What a command was given on its own line wins over what was
given before it; ``-S`` pairs and ``-v`` counts add up.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import rich
import typer
from typer.core import TyperCommand, TyperGroup

from .. import config
from .._redact import Scrubber
from .common import (
    CONFIG_ENV,
    State,
    collect_settings,
    merge_options,
    resolve_catalog_url,
)
from .metavars import clean_params
from .storage_options import STORAGE_OPTION_HELP, parse_storage_options

__all__ = [
    "GLOBAL_NAMES",
    "OUTPUTS",
    "GlobalArgs",
    "GlobalOptionsCommand",
    "GlobalOptionsGroup",
    "Interrupted",
    "configure",
    "scrubber",
    "set_scrubber",
    "use_global_options",
]

OUTPUTS = ("table", "tsv", "json")
PANEL = "Global options (before or after the command)"


class _Secrets:
    """This invocation's secrets: main() collects the command line's, :func:`configure` the
    config file's. Every error text and log line goes through it."""

    current = Scrubber()


def scrubber() -> Scrubber:
    """The invocation's :class:`~shardcat._redact.Scrubber`."""
    return _Secrets.current


def set_scrubber(value: Scrubber) -> None:
    """Start an invocation with the secrets its command line holds."""
    _Secrets.current = value


def _output_choice(value: str | None) -> str | None:
    if value is not None and value not in OUTPUTS:
        raise typer.BadParameter(f"{value!r} is not one of: {', '.join(OUTPUTS)}")
    return value


def _declare(
    catalog: Annotated[
        str | None,
        typer.Option(
            "--catalog",
            "-c",
            help="SQLAlchemy URL of the catalog (default: $SHARDCAT_CATALOG, else the config "
            "file's, else sqlite:///shardcat.db).",
            show_default=False,
            metavar="URL",
            rich_help_panel=PANEL,
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            callback=_output_choice,
            help="table (a terminal's default), tsv (a pipe's default: a header line, then "
            "tab-separated rows) or json.",
            show_default=False,
            metavar="table|tsv|json",
            rich_help_panel=PANEL,
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="The same as --output json.", rich_help_panel=PANEL),
    ] = False,
    verbose: Annotated[
        int,
        typer.Option(
            "-v",
            "--verbose",
            count=True,
            show_default=False,
            help="More logging (-vv: debug); tracebacks on errors.",
            rich_help_panel=PANEL,
        ),
    ] = 0,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            "-S",
            help=STORAGE_OPTION_HELP,
            metavar="KEY=VALUE",
            rich_help_panel=PANEL,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML file with `catalog = URL` and a storage_options table "
            f"(default: ${CONFIG_ENV}). Command-line options and environment variables win.",
            show_default=False,
            metavar="FILE",
            rich_help_panel=PANEL,
        ),
    ] = None,
) -> None:
    """Only declares the options: typer turns this signature into click parameters."""


GLOBAL_NAMES = ("catalog", "output", "as_json", "verbose", "storage_option", "config")


def _global_params() -> list[Any]:
    """The global options as click parameters (a new set per command: click keeps state on them).

    Typed ``Any``: typer vendors click (``typer._click``), whose classes are private.
    """
    probe = typer.Typer(add_completion=False)
    probe.command()(_declare)
    return list(typer.main.get_command(probe).params)


@dataclasses.dataclass(frozen=True, slots=True)
class GlobalArgs:
    """The global options as given (before the command, after it, or both merged)."""

    catalog: str | None = None
    output: str | None = None
    as_json: bool = False
    verbose: int = 0
    storage_option: tuple[str, ...] = ()
    config: Path | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> GlobalArgs:
        return cls(
            catalog=params.get("catalog"),
            output=params.get("output"),
            as_json=bool(params.get("as_json")),
            verbose=int(params.get("verbose") or 0),
            storage_option=tuple(params.get("storage_option") or ()),
            config=params.get("config"),
        )

    def then(self, later: GlobalArgs) -> GlobalArgs:
        """These options, with ``later`` (given after the command) on top."""
        return GlobalArgs(
            catalog=later.catalog or self.catalog,
            output=later.output or self.output,
            as_json=self.as_json or later.as_json,
            verbose=self.verbose + later.verbose,
            storage_option=self.storage_option + later.storage_option,
            config=later.config or self.config,
        )

    def output_name(self) -> str:
        """``json``, ``tsv`` or ``table``: what the flags chose, else what stdout is."""
        if self.as_json and self.output not in (None, "json"):
            raise typer.BadParameter(
                f"--json and --output {self.output} disagree; give one", param_hint="--output"
            )
        if self.as_json:
            return "json"
        if self.output is not None:
            return self.output
        return "table" if sys.stdout.isatty() else "tsv"


_STATE_KEY = "shardcat.global_args"


def configure(ctx: typer.Context, args: GlobalArgs) -> State:
    """Build the invocation's State from ``args`` (and set up logging); it becomes ``ctx.obj``."""
    ctx.meta[_STATE_KEY] = args
    # Only shardcat's own loggers: with -vv, third-party DEBUG logs (botocore,
    # urllib3) would show request headers, and storage options are secrets.
    handler = logging.StreamHandler()
    handler.setFormatter(_ScrubbingFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    logging.getLogger("shardcat").setLevel(
        logging.DEBUG if args.verbose > 1 else logging.INFO if args.verbose else logging.WARNING
    )
    # Progress bars and spinners (rich's global console) go to stderr: stdout is for results.
    rich.reconfigure(stderr=True)
    # The file (--config, else $SHARDCAT_CONFIG) under the environment, read now and put
    # into shardcat.config for as long as the command runs; the options given win over both.
    settings = collect_settings(args.config)
    ctx.with_resource(config.set(settings))
    options = merge_options(
        settings.get("storage_options", {}), parse_storage_options(list(args.storage_option))
    )
    catalog_url = resolve_catalog_url(args.catalog, settings)
    scrubber().add_url(catalog_url)
    scrubber().add_options(options)
    state = State(
        verbose=args.verbose,
        storage_options=options,
        catalog_url=catalog_url,
        output=args.output_name(),
        config=settings,
    )
    ctx.obj = state
    return state


class _ScrubbingFormatter(logging.Formatter):
    """Log lines (exception tracebacks included) without this invocation's secrets."""

    def format(self, record: logging.LogRecord) -> str:
        return scrubber()(super().format(record))


def _take_global_options(ctx: typer.Context) -> None:
    """Move the global options out of ``ctx.params`` (the callback does not take them) into State.

    The outermost command configures; a nested one only when it was given
    global options of its own, which go on top of those before it.
    """
    given = {name: ctx.params.pop(name, None) for name in GLOBAL_NAMES}
    here = GlobalArgs.from_params(given)
    before = ctx.meta.get(_STATE_KEY)
    if before is None:  # the root, or a sub-app run on its own (tests)
        configure(ctx, here)
    elif here != GlobalArgs():
        configure(ctx, before.then(here))
        ctx.find_root().obj = ctx.obj


class _GlobalParams:
    """Adds the global options to a click command's parameters (after its own)."""

    _global_params: list[Any]

    # Contexts and parameters typed Any: typer vendors click (typer._click), whose classes are
    # private, and an override may not narrow them to typer.Context.
    def get_params(self, ctx: Any) -> Any:
        if not hasattr(self, "_global_params"):
            self._global_params = _global_params()
            clean_params(self.params)  # type: ignore[attr-defined]
        return clean_params([*super().get_params(ctx), *self._global_params])  # type: ignore[misc]


class GlobalOptionsCommand(_GlobalParams, TyperCommand):
    """A command that takes the global options too."""

    def invoke(self, ctx: Any) -> Any:
        _take_global_options(ctx)
        return super().invoke(ctx)


class Interrupted(Exception):
    """Ctrl-C during a command, carried past typer to :func:`shardcat.cli.app.main`.

    typer turns a ``KeyboardInterrupt`` into exit code 130 and prints nothing;
    the command line says what became of the job instead (one line).
    """

    def __init__(self, interrupt: KeyboardInterrupt) -> None:
        super().__init__(str(interrupt))
        self.interrupt = interrupt


class GlobalOptionsGroup(_GlobalParams, TyperGroup):
    """A group (the root, ``catalog``) that takes the global options before its command."""

    def invoke(self, ctx: Any) -> Any:
        _take_global_options(ctx)
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as e:
            raise Interrupted(e) from e


def use_global_options(app: typer.Typer) -> None:
    """Make every command registered on ``app`` take the global options too."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):  # typer's default; leave a chosen class alone
            info.cls = GlobalOptionsCommand
