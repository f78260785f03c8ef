"""shardcat's settings: one table of keys, their environment variables and defaults.

Every setting has a key (``"where_timeout"``) and an environment variable
(``SHARDCAT_WHERE_TIMEOUT``). Values are layered, the later winning: the
defaults in :data:`SETTINGS`, then the TOML file ``$SHARDCAT_CONFIG`` names
(the CLI's ``--config FILE`` instead, for one command), then the environment,
then :func:`set`::

    import shardcat.config

    shardcat.config.get("s3_transport")          # "auto"
    with shardcat.config.set(s3_transport="fsspec"):
        ...                                      # reads go through s3fs here
    shardcat.config.refresh()                    # re-read the file and the environment

The file and the environment are read when a setting is first asked for, and
again on :func:`refresh`; never when a module is imported (a process that sets
``os.environ`` after importing shardcat calls :func:`refresh`). Values from
the environment and the file are kept as given (text); the code that uses a
setting parses it and names the variable when it cannot. ``docs/CONFIG.md`` is
this table, written out (``python -m shardcat.config`` prints it).

The store is a :class:`donfig.Config`, as zarr's and Dask's are.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import donfig

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "SETTINGS",
    "Setting",
    "collect",
    "collect_env",
    "defaults",
    "enabled",
    "env_var",
    "get",
    "markdown_table",
    "read_file",
    "refresh",
    "set",
]

ENV_PREFIX = "SHARDCAT_"
CONFIG_ENV = "SHARDCAT_CONFIG"
"""The TOML file of settings (``catalog = "..."``, ``[storage_options]``, any key below)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting: its key, default, what values it takes, and what it does."""

    key: str
    default: Any
    kind: str
    doc: str
    group: str = "user"
    """``user``, or ``implementation``: which code runs (tests and benchmarks switch it)."""

    @property
    def env(self) -> str:
        return env_var(self.key)


def env_var(key: str) -> str:
    """``SHARDCAT_`` and the key in capitals: ``where_timeout`` -> ``SHARDCAT_WHERE_TIMEOUT``."""
    return ENV_PREFIX + key.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "catalog",
        "sqlite:///shardcat.db",
        "URL",
        "SQLAlchemy URL of the catalog a `Catalog()` or a command opens when none is named.",
    ),
    Setting(
        "storage_options",
        {},
        "table",
        "fsspec options (credentials, endpoint) the CLI passes to every store; `-S` adds to "
        "them. A TOML table in the file, not an environment variable.",
    ),
    Setting(
        "sql_role",
        None,
        "role name",
        "PostgreSQL role that `where=` selections and `shardcat sql` run as "
        "(see `shardcat catalog create-readonly-role`); ignored on SQLite.",
    ),
    Setting(
        "record_partitions",
        0,
        "count, 0-1024",
        "PostgreSQL: a catalog created (or upgraded by migration 0017) with P > 0 has "
        "`records` hash-partitioned by `key_hash` into P partitions (`records_p000`...), with "
        "no primary key (docs/CATALOG.md); 0: one plain table. `shardcat catalog partition` "
        "converts a catalog later. Ignored on SQLite.",
    ),
    Setting(
        "sqlite_mmap_size",
        "2GiB",
        "size",
        "SQLite catalogs: bytes of the catalog file each connection reads through a memory "
        "map instead of copying pages into its own cache (`PRAGMA mmap_size`; SQLite caps it "
        "at its build's limit, 2 GiB in Python's). A point lookup in a warm catalog took "
        "0.009 ms with it against 0.015 through a new connection without it at 1M keys, 0.019 "
        "against 0.024 at 30M (docs/SCALE.md §3). The mapped pages are the page cache's, "
        "shared by every process, though each counts them in its RSS. 0: off, for a catalog "
        "on a file system whose reads can fail under a map.",
    ),
    Setting(
        "where_timeout",
        300.0,
        "seconds",
        "How long a `where=` selection may run, fetching included (0: no limit).",
    ),
    Setting(
        "where_max_rows",
        100_000_000,
        "count",
        "Records a `where=` selection may choose (0: no limit); a selection is held in "
        "memory, about 100 bytes per record.",
    ),
    Setting(
        "where_max_bytes",
        "4GiB",
        "size",
        "Bytes of the rows a `where=` selection returns, 8 per number plus each key's "
        "UTF-8 length (0: no limit).",
    ),
    Setting(
        "max_decompressed_bytes",
        "1GiB",
        "size",
        "The largest entry (decompressed) a reader accepts and a writer compresses.",
    ),
    Setting(
        "remote_max_gap",
        "auto",
        "size, auto",
        "Batch reads of object-store files read through gaps up to this size rather than "
        "send another request (0: only adjacent ranges). `auto`: derived per store from its "
        "measured latency L and bandwidth B, L x B / `remote_in_flight` within 16KiB-1MiB, "
        "and the gaps one batch reads add at most 0.75 x its records' bytes (docs/CATALOG.md, "
        "batch lookups); `Catalog(remote_max_gap=)` wins.",
    ),
    Setting(
        "max_open_shards",
        "auto",
        "count, auto",
        "Local shard files each thread's lookups keep open (the least recently used is "
        "closed first); a point lookup in a file not open costs an `open` more, so a dataset "
        "with more shards than this is looked up slower. `auto`: the process's limit of open "
        "files (`ulimit -n`) / 2, within 64-4096; whatever this says, all threads' lookups "
        "share that half of the limit. `Catalog(max_open_shards=)` wins.",
    ),
    Setting(
        "remote_in_flight",
        64,
        "count",
        "Requests a batch read keeps in flight at once on an object store, across all the "
        "files it reads (obstore), and the connections s3fs pools for them (botocore's "
        "`max_pool_connections`, unless `config_kwargs` names it). At 20-80 ms per request a "
        "batch moves at about this many requests per round trip; 64 is what Lance keeps in "
        "flight on object stores. Local files are read as before.",
    ),
    Setting(
        "s3_transport",
        "auto",
        "auto, obstore, fsspec",
        "Which client reads s3:// URLs: `auto` uses obstore where it reads what s3fs "
        "would, `obstore` always, `fsspec` always s3fs.",
    ),
    Setting(
        "s3_upload_memory",
        "512MiB",
        "size",
        "Bytes one S3 upload gathers in memory before it moves to a multipart upload.",
    ),
    Setting(
        "storage_retry_deadline",
        60.0,
        "seconds",
        "How long a request to an object store (a read or a listing, an upload's PUT or part, "
        "a delete) retries transient failures (refused or reset "
        "connections, timeouts, HTTP 5xx, throttling), with exponential backoff and jitter, "
        "before it fails (0: one try). A missing bucket or object, or refused credentials, "
        "fail at once.",
    ),
    Setting(
        "write_behind",
        True,
        "bool",
        "Local shard files write their 4 MiB blocks on a C thread (`0`: inline, for "
        "machines with no idle core).",
    ),
    Setting(
        "history_in_bucket",
        True,
        "bool",
        "Every commit writes its version's manifest beside the dataset's shards "
        "(`_versions/`), so `shardcat reindex` rebuilds every version and tag from the bucket "
        "(`0`: the history is in the catalog only, and `verify` does not check the folder's).",
    ),
    Setting(
        "in_process_max_bytes",
        "256MiB",
        "size",
        "A write of files totalling at most this size, with no client or cluster named and "
        "no current Dask client, runs on two threads in the calling process instead of "
        "starting local worker processes (0: always start them).",
    ),
    Setting(
        "dask_no_workers_timeout",
        60.0,
        "seconds",
        "How long a job (write, compact, copy, index-tar) waits while its Dask cluster has no "
        "workers before it stops with WorkersLostError, which says how to resume, or while its "
        "tasks wait behind tasks whose client is gone (WorkersHeldError) (0: no limit).",
    ),
    Setting(
        "dask_failed_task_wait",
        30.0,
        "seconds",
        "How long a failed write waits for the tasks its workers were running to stop (each "
        "stops at its next shard) before it removes what the job wrote (0: no wait; a late "
        "task still removes its own shard, and gc anything left).",
    ),
    Setting(
        "role_password",
        None,
        "secret",
        "Password of the login role `shardcat catalog create-readonly-role --login` makes "
        "(else it asks).",
    ),
    Setting(
        "serve_max_batch_keys",
        1000,
        "count",
        "`shardcat serve`: keys one batch request may ask for (more: HTTP 413).",
    ),
    Setting(
        "serve_max_response_bytes",
        "64MiB",
        "size",
        "`shardcat serve`: the largest response body (an entry, a batch, a SQL result); a "
        "larger entry is read in parts with `Range` requests.",
    ),
    Setting(
        "serve_rate_limit",
        50.0,
        "requests per second",
        "`shardcat serve`: the requests each token (or, anonymous, each client address) may "
        "make per second and per worker process, on average (0: no limit; more: HTTP 429).",
    ),
    Setting(
        "serve_rate_burst",
        200,
        "count",
        "`shardcat serve`: requests a token may make at once above `serve_rate_limit` before "
        "it is slowed down.",
    ),
    Setting(
        "debug",
        False,
        "bool",
        "The CLI prints tracebacks, as with `-v` (any non-empty value).",
    ),
    Setting(
        "record_codec",
        "auto",
        "auto, compiled, python",
        "The record codec: the compiled one where built (`auto`), or the Python reference. "
        "Chosen when shardcat.format is imported.",
        "implementation",
    ),
    Setting(
        "point_lookup",
        "auto",
        "auto, compiled, python",
        "The point lookup's compiled path where built and SQLite's functions were found "
        "(`auto`), or the Python path (its twin `reading/pypoint.py` on file-backed SQLite). "
        "Chosen when the catalog is imported.",
        "implementation",
    ),
    Setting(
        "cpython_tricks",
        True,
        "bool",
        "The compiled codec's CPython-internal shortcuts (records outside the cyclic GC, free "
        "lists) where they were compiled in (`0`: the plain path, the reference). Read when the "
        "codec is set up.",
        "implementation",
    ),
    Setting(
        "tar_walker",
        "auto",
        "auto, compiled, python",
        "The tar walker: the compiled one where built (`auto`), or the Python reference. "
        "Chosen when shardcat.format.tar is imported.",
        "implementation",
    ),
)

_BY_KEY = {s.key: s for s in SETTINGS}
_FILE_ONLY = frozenset({"storage_options"})
"""Settings a file gives (a table) and no environment variable does."""


def defaults() -> dict[str, Any]:
    """Each key's default (a fresh copy)."""
    return {
        s.key: (dict(s.default) if isinstance(s.default, dict) else s.default) for s in SETTINGS
    }


def _canonical(key: str) -> str:
    name = key.replace("-", "_")
    if name not in _BY_KEY:
        raise KeyError(f"no shardcat setting {key!r}; known: {', '.join(_BY_KEY)}")
    return name


def read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The settings of the TOML file at ``path``.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If it is not TOML, or names a key that is no setting, or ``storage_options``
        is not a table. The message names the file and never its values.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ValueError(
                "reading a config file needs Python 3.11+ or `pip install tomli`"
            ) from None
    p = Path(path)
    try:
        with p.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"no config file {p}") from None
    except (OSError, tomllib.TOMLDecodeError) as e:
        # The decoder's message names a line and column, never the file's values.
        raise ValueError(f"cannot read {p}: {e}") from None
    doc = {k.replace("-", "_"): v for k, v in doc.items()}
    unknown = sorted(k for k in doc if k not in _BY_KEY)
    if unknown:
        raise ValueError(f"{p}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_BY_KEY)}")
    if not isinstance(doc.get("storage_options", {}), dict):
        raise ValueError(f"{p}: storage_options must be a table")
    for key, what in (("catalog", "a string URL"), ("sql_role", "a string")):
        if key in doc and not isinstance(doc[key], str):
            raise ValueError(f"{p}: {key} must be {what}")
    return doc


def collect(
    file: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The settings the file and the environment give (not the defaults, nor :func:`set`).

    ``file``: the TOML file to read (default ``$SHARDCAT_CONFIG``, none when unset).
    ``env``: the environment (default ``os.environ``); an empty variable counts as unset.

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`read_file`.
    """
    env = os.environ if env is None else env
    if file is None:
        file = env.get(CONFIG_ENV) or None
    found = read_file(file) if file is not None else {}
    found.update(collect_env(env))
    return found


def collect_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings the environment (default ``os.environ``) gives, as text; empty is unset."""
    env = os.environ if env is None else env
    found: dict[str, Any] = {}
    for s in SETTINGS:
        if s.key in _FILE_ONLY:
            continue
        raw = env.get(s.env)
        if raw is not None and raw.strip():
            found[s.key] = raw
    return found


class _State:
    """The store (made on first use) and a flat view of it, dropped whenever a value changes."""

    lock = threading.RLock()
    store: donfig.Config | None = None
    view: dict[str, Any] | None = None


def _store() -> donfig.Config:
    with _State.lock:
        if _State.store is None:
            # Imported here, not with this module: `shardcat --help` needs no store.
            import donfig

            class Store(donfig.Config):  # type: ignore[misc]
                """donfig's store, filled from :func:`collect` (the TOML file, the variables)."""

                def collect(self, paths: Any = None, env: Any = None) -> dict[str, Any]:
                    return collect()

            # paths=[]: no YAML files (donfig's default); env_var: donfig would read
            # $SHARDCAT_CONFIG as YAML, but it names shardcat's TOML file (collect reads it).
            _State.store = Store(
                "shardcat", defaults=[defaults()], paths=[], env={}, env_var="SHARDCAT_NO_YAML"
            )
        return _State.store


def _view() -> dict[str, Any]:
    view = _State.view
    if view is None:
        with _State.lock:
            store = _store()
            view = {}
            for s in SETTINGS:
                value = store.get(s.key)
                view[s.key] = s.default if value is None else value
            _State.view = view
    return view


def enabled(key: str) -> bool:
    """A ``bool`` setting: off only for ``False``, ``0``, ``false``, ``no`` or ``off``."""
    value = get(key)
    return value is not False and str(value).strip().lower() not in ("0", "false", "no", "off")


def get(key: str) -> Any:
    """The value of setting ``key`` now.

    Raises
    ------
    KeyError
        If ``key`` is no setting.
    """
    try:
        return _view()[key]
    except KeyError:
        return _view()[_canonical(key)]


def refresh(file: str | os.PathLike[str] | None = None) -> None:
    """Read the file and the environment again (values given to :func:`set` globally are dropped).

    Raises
    ------
    FileNotFoundError, ValueError
        As :func:`read_file`.
    """
    with _State.lock:
        store = _store()
        store.clear()
        store.update(defaults(), priority="old")
        store.update(collect(file))
        _State.view = None


class set:  # lowercase, as donfig's and Dask's `config.set`: used as a function
    """Set values now; as a context manager, put them back on leaving.

    ``set(where_timeout=10)``, ``set({"s3_transport": "fsspec"})``; keys may be
    written with ``-`` or ``_``; ``None`` puts a key's default back.

    Raises
    ------
    KeyError
        If a key is no setting.
    """

    def __init__(self, values: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        given = {_canonical(k): v for k, v in {**(values or {}), **kwargs}.items()}
        with _State.lock:
            self._inner = _store().set(given)
            _State.view = None

    def __enter__(self) -> set:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with _State.lock:
            self._inner.__exit__(exc_type, exc, tb)
            _State.view = None


def markdown_table(group: str) -> str:
    """The settings of ``group`` as the Markdown table docs/CONFIG.md holds."""
    lines = [
        "| Key | Environment variable | Values | Default | What it does |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        if s.group != group:
            continue
        env = "(file only)" if s.key in _FILE_ONLY else f"`{s.env}`"
        default = "none" if s.default is None else f"`{_show(s.default)}`"
        lines.append(f"| `{s.key}` | {env} | {s.kind} | {default} | {s.doc} |")
    return "\n".join(lines)


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dict):
        return "{}"
    return str(value)


def _main(write: Callable[[str], Any] = print) -> None:
    for group in ("user", "implementation"):
        write(markdown_table(group))
        write("")


if __name__ == "__main__":
    _main()
