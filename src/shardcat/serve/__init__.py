"""``shardcat serve``: a read-only HTTP API over one or more catalogs (the ``serve`` extra).

Datasets, versions, tags, keys by prefix (cursor pages), samples as JSON,
each entry's bytes (``ETag``, ``Range``, caching), batches and read-only SQL,
behind bearer tokens kept hashed in the catalog (docs/SERVE.md).

Modules, one job each: :mod:`.config` (what a process serves),
:mod:`.tokens` (making and checking tokens; no web stack: the CLI's token
commands use it alone), :mod:`.auth` (who a request is), :mod:`.catalogs`
(the catalogs and what a caller may see), :mod:`.limits` (rate, sizes),
:mod:`.encoding` (JSON documents and errors), :mod:`.entries` (bytes over
HTTP), :mod:`.routes` (the endpoints), :mod:`.app` (the ASGI app),
:mod:`.openapi` (its document) and :mod:`.server` (uvicorn).

Importing this package loads no web framework; :func:`create_app` and
:func:`run` do (Starlette, uvicorn: ``pip install 'shardcat[serve]'``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..errors import ExtraNotInstalledError
from .config import ServeConfig, is_loopback

if TYPE_CHECKING:
    from .app import authenticate, create_app
    from .server import run

__all__ = ["ServeConfig", "authenticate", "create_app", "is_loopback", "require_extra", "run"]

_LAZY = {"create_app": ".app", "authenticate": ".app", "run": ".server"}


def require_extra() -> None:
    """Check that the ``serve`` extra is installed.

    Raises
    ------
    ExtraNotInstalledError
        If Starlette or uvicorn is missing; the message says what to install.
    """
    for module in ("starlette", "uvicorn"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise ExtraNotInstalledError(
                f"shardcat serve needs the {module!r} package: pip install 'shardcat[serve]'"
            ) from e


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        require_extra()
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
