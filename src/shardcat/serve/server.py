"""Running the app under uvicorn: one process, or ``--workers N`` processes behind a proxy.

uvicorn starts each worker from an import string, so the configuration
travels in an environment variable (:data:`.config.CONFIG_ENV`) and
:func:`app_from_env` builds the app in each worker. ``--root-path`` is
the app's (:class:`.app.RawPathRouting`), not uvicorn's: requests reach the
same routes whether the proxy strips the prefix or passes it on.
The proxy's ``X-Forwarded-For`` is trusted from loopback only (uvicorn's
default), which is where a proxy on the same machine connects from.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette

from .app import create_app
from .config import CONFIG_ENV, ServeConfig

__all__ = ["app_from_env", "run"]


def app_from_env() -> Starlette:
    """The app of the configuration in ``$SHARDCAT_SERVE_CONFIG_JSON`` (uvicorn's factory)."""
    return create_app(ServeConfig.from_env())


def run(config: ServeConfig, *, log_level: str = "info") -> None:
    """Serve ``config`` until interrupted (blocking).

    Raises
    ------
    OSError
        If the address cannot be bound.
    """
    import uvicorn

    common = {
        "host": config.host,
        "port": config.port,
        "log_level": log_level,
        "proxy_headers": True,
        "server_header": False,
    }
    if config.workers == 1:
        uvicorn.run(create_app(config), **common)  # type: ignore[arg-type]
        return
    os.environ[CONFIG_ENV] = config.to_env()
    uvicorn.run(
        "shardcat.serve.server:app_from_env",
        factory=True,
        workers=config.workers,
        **common,  # type: ignore[arg-type]
    )
