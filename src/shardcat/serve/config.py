"""What a ``shardcat serve`` process serves and how: catalogs, bind address, access, limits.

:class:`ServeConfig` is the one value the CLI builds and the app reads. It
travels to uvicorn's worker processes as JSON in an environment variable
(:func:`ServeConfig.to_env`), since uvicorn starts each worker from an import
string: the catalog URLs in it may hold passwords, so it is never printed
(``repr`` hides them) and the variable is readable by this user only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from .. import config as settings
from .._units import parse_size
from ..errors import BadRequestError

__all__ = [
    "CONFIG_ENV",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "ServeConfig",
    "is_loopback",
    "parse_catalog",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
CONFIG_ENV = "SHARDCAT_SERVE_CONFIG_JSON"
"""How the CLI hands the configuration to uvicorn's workers (JSON, with secrets: never logged)."""

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` accepts connections from this machine only.

    ``localhost`` and the loopback networks (127.0.0.0/8, ::1) are; ``0.0.0.0``,
    ``::`` and every other address or name are not (a name may resolve to anything).
    """
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def parse_catalog(spec: str, index: int = 0) -> tuple[str, str]:
    """``NAME=URL`` (or a bare URL, named ``default``, ``default2``, ... by position).

    Raises
    ------
    BadRequestError
        If the name is not 1 to 64 letters, digits, ``_``, ``.`` or ``-``, or the URL is empty.
    """
    name, sep, url = spec.partition("=")
    # A URL's query holds '=' too: only a short name before '://' counts as NAME=.
    if not sep or "://" in name or ":" in name:
        name, url = ("default" if index == 0 else f"default{index + 1}"), spec
    if not _NAME.fullmatch(name):
        raise BadRequestError(
            f"catalog name {name!r} must be 1 to 64 letters, digits, '_', '.' or '-' "
            "(write --catalog NAME=URL)"
        )
    if not url.strip():
        raise BadRequestError(f"--catalog {name}= names no URL")
    return name, url.strip()


@dataclass(frozen=True)
class ServeConfig:
    """The configuration of one ``shardcat serve`` process (and its workers).

    Attributes
    ----------
    catalogs:
        ``(name, url)`` pairs; the first is the default of ``?catalog=``.
    host, port:
        The address uvicorn binds.
    allow_anonymous:
        Serve requests without a token (refused unless ``host`` is loopback).
    cors_origins:
        Origins a browser may call the API from (none: CORS stays off).
    root_path:
        The path prefix a reverse proxy serves the app under (``/shardcat``).
    workers:
        uvicorn worker processes.
    sql:
        Serve ``POST /api/v1/sql`` (off unless asked: it reads every table).
    sql_role:
        PostgreSQL: the read-only role SQL runs as (``shardcat sql``'s ``--role``).
    sql_timeout:
        Seconds a SQL query may run.
    max_batch_keys, max_response_bytes, rate_limit, rate_burst:
        The limits of docs/SERVE.md (settings ``serve_*``).
    token_cache_seconds:
        How long a token's row is trusted before it is read again: a revoked
        token is refused at most this long after ``token revoke``.
    storage_options:
        fsspec options for reading shards (credentials: never shown).
    page:
        Serve the dataset browser at ``/ui/`` (:mod:`.page`).
    """

    catalogs: tuple[tuple[str, str], ...] = field(repr=False)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    allow_anonymous: bool = False
    cors_origins: tuple[str, ...] = ()
    root_path: str = ""
    workers: int = 1
    sql: bool = False
    sql_role: str | None = None
    sql_timeout: float = 30.0
    max_batch_keys: int = 1000
    max_response_bytes: int = 64 * 1024**2
    rate_limit: float = 50.0
    rate_burst: int = 200
    token_cache_seconds: float = 5.0
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    page: bool = True

    def __post_init__(self) -> None:
        if not self.catalogs:
            raise BadRequestError("shardcat serve needs at least one catalog (--catalog)")
        names = [n for n, _ in self.catalogs]
        if len(set(names)) != len(names):
            raise BadRequestError(f"catalog names must differ: {names}")
        if self.allow_anonymous and not is_loopback(self.host):
            raise BadRequestError(
                f"refusing --allow-anonymous on {self.host!r}: anyone who can reach that "
                "address could read every dataset; bind a loopback address (127.0.0.1) or "
                "make tokens (`shardcat serve token create`)"
            )
        if self.root_path and (not self.root_path.startswith("/") or self.root_path.endswith("/")):
            raise BadRequestError(
                f"--root-path {self.root_path!r} must start with '/' and not end with one "
                "(e.g. /shardcat)"
            )
        if self.workers < 1 or self.max_batch_keys < 1 or self.max_response_bytes < 1:
            raise BadRequestError("workers, max_batch_keys and max_response_bytes must be >= 1")
        if self.rate_limit < 0 or self.rate_burst < 1:
            raise BadRequestError("rate_limit must be >= 0 and rate_burst >= 1")

    @classmethod
    def from_settings(cls, catalogs: tuple[tuple[str, str], ...], **given: Any) -> ServeConfig:
        """A configuration whose limits default to the ``serve_*`` settings (docs/CONFIG.md).

        Raises
        ------
        BadRequestError
            A setting's value cannot be read, or :class:`ServeConfig` refuses the values.
        """
        try:
            defaults: dict[str, Any] = {
                "max_batch_keys": int(settings.get("serve_max_batch_keys")),
                "max_response_bytes": parse_size(settings.get("serve_max_response_bytes")),
                "rate_limit": float(settings.get("serve_rate_limit")),
                "rate_burst": int(settings.get("serve_rate_burst")),
            }
        except (TypeError, ValueError) as e:
            raise BadRequestError(f"a serve_* setting cannot be read: {e}") from None
        defaults.update({k: v for k, v in given.items() if v is not None})
        return cls(catalogs=catalogs, **defaults)

    def to_env(self) -> str:
        """The configuration as JSON, for :data:`CONFIG_ENV` (holds secrets)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ServeConfig:
        """The configuration :meth:`to_env` wrote (a uvicorn worker's).

        Raises
        ------
        BadRequestError
            If the variable is not set or not a configuration.
        """
        raw = (os.environ if environ is None else environ).get(CONFIG_ENV)
        if not raw:
            raise BadRequestError(f"${CONFIG_ENV} is not set: start the server with shardcat serve")
        doc = json.loads(raw)
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in doc.items() if k in known}
        values["catalogs"] = tuple((str(n), str(u)) for n, u in values["catalogs"])
        values["cors_origins"] = tuple(values.get("cors_origins", ()))
        return cls(**values)
