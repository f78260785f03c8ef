"""What the commands share: the global state, the config file, opening the catalog, parsing."""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..errors import CatalogError
from .output import Output, output_for

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..orchestration.cluster import DaskCluster

__all__ = [
    "CONFIG_ENV",
    "SQL_ROLE_ENV",
    "SchedulerOption",
    "State",
    "WorkersOption",
    "dask_cluster",
    "load_config",
    "merge_options",
    "open_catalog",
    "parse_duration",
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


CONFIG_ENV = "SHARDCAT_CONFIG"
CATALOG_ENV = "SHARDCAT_CATALOG"
SQL_ROLE_ENV = "SHARDCAT_SQL_ROLE"
DEFAULT_CATALOG = "sqlite:///shardcat.db"
_CONFIG_KEYS = ("catalog", "sql_role", "storage_options")


class State:
    """What the global options chose, handed to every command as ``ctx.obj``.

    ``storage_options`` may hold credentials: never print them, nor this object.

    Attributes
    ----------
    out:
        The :class:`Output` that ``--output``/``--json`` chose.
    config:
        The config file's contents (empty without one).
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
        self.catalog_url = catalog_url or os.environ.get(CATALOG_ENV) or DEFAULT_CATALOG
        self.config: dict[str, Any] = dict(config or {})

    def __repr__(self) -> str:
        return f"State(output={self.out.name}, verbose={self.verbose}, options=<hidden>)"


def state_of(ctx: typer.Context) -> State:
    """The command's State (a default one when a sub-app runs on its own, as in tests)."""
    obj = ctx.find_root().obj if ctx.obj is None else ctx.obj
    return obj if isinstance(obj, State) else State()


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML config file: ``catalog = "..."``, ``sql_role = "..."``, ``[storage_options]``.

    Raises
    ------
    typer.BadParameter
        If the file is missing, is not TOML, or has unknown keys.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise typer.BadParameter(
                "reading a config file needs Python 3.11+ or `pip install tomli`",
                param_hint="--config",
            ) from None

    p = Path(path)
    try:
        with p.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise typer.BadParameter(f"no config file {p}", param_hint="--config") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        # The decoder's message names a line and column, never the file's values.
        raise typer.BadParameter(f"cannot read {p}: {e}", param_hint="--config") from None
    unknown = sorted(set(doc) - set(_CONFIG_KEYS))
    if unknown:
        raise typer.BadParameter(
            f"{p}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_CONFIG_KEYS)}",
            param_hint="--config",
        )
    if "catalog" in doc and not isinstance(doc["catalog"], str):
        raise typer.BadParameter(f"{p}: catalog must be a string URL", param_hint="--config")
    if "sql_role" in doc and not isinstance(doc["sql_role"], str):
        raise typer.BadParameter(f"{p}: sql_role must be a string", param_hint="--config")
    if not isinstance(doc.get("storage_options", {}), dict):
        raise typer.BadParameter(f"{p}: storage_options must be a table", param_hint="--config")
    return doc


def merge_options(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; nested tables merge key by key."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_options(out[k], v)
        else:
            out[k] = v
    return out


def resolve_catalog_url(flag: str | None, config: Mapping[str, Any]) -> str:
    """Command line, then ``$SHARDCAT_CATALOG``, then the config file, then the default."""
    return flag or os.environ.get(CATALOG_ENV) or config.get("catalog") or DEFAULT_CATALOG


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
    from ..catalog import Catalog

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
