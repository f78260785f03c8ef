"""What the commands share: the global state, the config file, opening the catalog, parsing."""

from __future__ import annotations

import datetime as dt
import enum
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .. import config as cfg
from .._keymodes import KEY_MODES
from ..errors import CatalogError
from .output import Output, output_for

if TYPE_CHECKING:
    from ..orchestration.cluster import DaskCluster
    from ..reading import Catalog

__all__ = [
    "CONFIG_ENV",
    "SQL_ROLE_ENV",
    "FieldEntryOption",
    "FieldOption",
    "ProgressOption",
    "SchedulerOption",
    "State",
    "WorkersOption",
    "collect_settings",
    "dask_cluster",
    "load_config",
    "merge_options",
    "open_catalog",
    "parse_duration",
    "parse_fields",
    "require_catalog",
    "resolve_catalog_url",
    "state_of",
]


# The two ways to say where a job's Dask tasks run, shared by every command that starts a job.
WorkersOption = Annotated[
    int | None,
    typer.Option(min=1, help="Start a local Dask cluster of N processes (default: one per core)."),
]
SchedulerOption = Annotated[
    str | None,
    typer.Option(help="Use a running Dask scheduler (tcp://host:8786) instead.", metavar="ADDRESS"),
]

# Options of a second store, for commands that write somewhere else (copy, export).
DestOption = Annotated[
    list[str] | None,
    typer.Option(
        "--dest-option",
        help="fsspec option of the destination (KEY=VALUE, repeatable; default: the -S options).",
        metavar="KEY=VALUE",
    ),
]

# Every command that runs a Dask job draws its progress on stderr unless told not to.
ProgressOption = Annotated[
    bool, typer.Option(help="Show a progress bar (on stderr; never with --json).")
]

# Declared fields (docs/TRAINING.md, "Filtering on sample fields"), for every command that
# registers samples: each a column of where= filters.
FieldOption = Annotated[
    list[str] | None,
    typer.Option(
        "--field",
        help="Store a scalar of each sample's JSON entry in the catalog, a column of where= "
        "filters: NAME:TYPE, TYPE one of int, float, bool, str (repeat for more).",
        metavar="NAME:TYPE",
    ),
]
FieldEntryOption = Annotated[
    str,
    typer.Option(
        "--field-entry", help="The JSON entry --field values are read from.", metavar="ENTRY"
    ),
]
_FIELD_TYPES: dict[str, type] = {"int": int, "float": float, "bool": bool, "str": str}


def parse_fields(specs: list[str] | None) -> dict[str, type] | None:
    """``["label:int", "split:str"]`` as ``{"label": int, "split": str}`` (None: no --field).

    Raises
    ------
    typer.BadParameter
        A spec that is not NAME:TYPE with a known TYPE, or a name given twice.
    """
    if not specs:
        return None
    out: dict[str, type] = {}
    for spec in specs:
        name, sep, kind = spec.partition(":")
        name, kind = name.strip(), kind.strip().lower()
        if not sep or not name or kind not in _FIELD_TYPES:
            raise typer.BadParameter(
                f"{spec!r} is not NAME:TYPE; write e.g. label:int (TYPE: "
                f"{', '.join(_FIELD_TYPES)})",
                param_hint="--field",
            )
        if name in out:
            raise typer.BadParameter(f"field {name!r} is given twice", param_hint="--field")
        out[name] = _FIELD_TYPES[kind]
    return out


def dask_cluster(workers: int | None, scheduler: str | None) -> DaskCluster | None:
    """Where ``--workers``/``--scheduler`` say a job runs (None: the job's default cluster).

    Raises
    ------
    typer.BadParameter
        Both are given.
    """
    if workers is not None and scheduler is not None:
        raise typer.BadParameter("give --workers or --scheduler, not both", param_hint="--workers")
    if workers is None and scheduler is None:
        return None
    from ..orchestration.cluster import DaskCluster

    return DaskCluster(scheduler=scheduler, workers=workers)


CONFIG_ENV = cfg.CONFIG_ENV
CATALOG_ENV = cfg.env_var("catalog")
SQL_ROLE_ENV = cfg.env_var("sql_role")
DEFAULT_CATALOG = "sqlite:///shardcat.db"


KeyMode = enum.Enum("KeyMode", {mode: mode for mode in KEY_MODES}, type=str)  # type: ignore[misc]
"""``--keys``: what a dataset's catalog keeps of its keys, the catalog's own list of modes."""


class State:
    """What the global options chose, handed to every command as ``ctx.obj``.

    ``storage_options`` may hold credentials: never print them, nor this object.

    Attributes
    ----------
    out:
        The :class:`Output` that ``--output``/``--json`` chose.
    config:
        The settings the config file and the environment give (empty without
        either); they are in :mod:`shardcat.config` too while the command runs.
    """

    def __init__(
        self,
        *,
        verbose: int = 0,
        storage_options: dict[str, Any] | None = None,
        catalog_url: str | None = None,
        output: str = "table",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.out: Output = output_for(output)
        self.verbose = verbose
        self.storage_options = dict(storage_options or {})
        self.catalog_url = catalog_url or cfg.get("catalog") or DEFAULT_CATALOG
        self.config: dict[str, Any] = dict(config or {})

    def __repr__(self) -> str:
        return f"State(output={self.out.name}, verbose={self.verbose}, options=<hidden>)"


def state_of(ctx: typer.Context) -> State:
    """The command's State (a default one when a sub-app runs on its own, as in tests)."""
    obj = ctx.find_root().obj if ctx.obj is None else ctx.obj
    return obj if isinstance(obj, State) else State()


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML config file: ``catalog = "..."``, ``[storage_options]``, any setting of
    docs/CONFIG.md (:func:`shardcat.config.read_file`).

    Raises
    ------
    typer.BadParameter
        If the file is missing, is not TOML, or has unknown keys.
    """
    try:
        return cfg.read_file(path)
    except (OSError, ValueError) as e:
        raise typer.BadParameter(str(e), param_hint="--config") from None


def collect_settings(path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """The settings of the file ``path`` (default ``$SHARDCAT_CONFIG``) and the environment.

    Raises
    ------
    typer.BadParameter
        As :func:`load_config`.
    """
    try:
        return cfg.collect(path)
    except (OSError, ValueError) as e:
        raise typer.BadParameter(str(e), param_hint="--config") from None


def merge_options(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; nested tables merge key by key."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_options(out[k], v)
        else:
            out[k] = v
    return out


def resolve_catalog_url(flag: str | None, settings: Mapping[str, Any]) -> str:
    """Command line, then the ``catalog`` setting (``$SHARDCAT_CATALOG``, then the config
    file: ``settings``, as :func:`collect_settings` gives them), then the default."""
    return flag or settings.get("catalog") or DEFAULT_CATALOG


def require_catalog(url: str) -> None:
    """Refuse a SQLite catalog file that does not exist (instead of creating an empty one).

    Raises
    ------
    CatalogError
        If ``url`` names a SQLite file that is not there.
    """
    from ..catalog import catalog_exists, display_url

    if not catalog_exists(url):
        raise CatalogError(
            f"no catalog at {display_url(url)}: write a dataset first, or name the catalog "
            "with --catalog or $SHARDCAT_CATALOG"
        )


def open_catalog(state: State, *, create: bool = False) -> Catalog:
    """The catalog the global options name, with their storage options.

    Commands that only read create nothing: a SQLite file that does not
    exist is an error, not a new empty catalog.

    Raises
    ------
    CatalogError
        If the catalog does not exist or cannot be opened.
    """
    from ..reading import Catalog

    if not create:
        require_catalog(state.catalog_url)
    return Catalog(state.catalog_url, storage_options=state.storage_options, create=create)


_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d|w)?\s*", re.IGNORECASE)
_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: str) -> dt.timedelta:
    """``"30m"``, ``"1h"``, ``"2d"``, ``"90s"``, ``"0"`` (a bare number is seconds).

    Raises
    ------
    typer.BadParameter
        If the text is not a duration.
    """
    m = _DURATION.fullmatch(value)
    if m is None:
        raise typer.BadParameter(f"cannot read {value!r} as a duration; write e.g. 30m, 1h, 2d, 0")
    unit = (m.group(2) or "s").lower()
    return dt.timedelta(seconds=float(m.group(1)) * _SECONDS[unit])
