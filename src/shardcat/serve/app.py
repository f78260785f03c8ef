"""The ASGI app of ``shardcat serve``: its routes, raw-path routing, CORS and JSON errors.

:func:`create_app` builds it from a :class:`.config.ServeConfig`. Pages and
other routes mount into it: ``create_app(config, routes=[Mount("/ui",
StaticFiles(directory=...))])`` serves a folder beside the API, and a route of
one's own authenticates its callers with :func:`authenticate` (the same
tokens, scopes and rate limit as the API). The API's routes come first: a
mounted route never shadows one of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import BadRequestError
from . import routes as r
from . import session
from .catalogs import Principal
from .config import ServeConfig
from .openapi import openapi_spec

__all__ = [
    "API",
    "RawPathRouting",
    "api_routes",
    "authenticate",
    "create_app",
    "error_response",
    "services_of",
]

API = "/api/v1"


class RawPathRouting:
    """Route ``/api/`` requests on their raw, percent-encoded path, under the root path.

    The server decodes the path before routing, which turns a key's ``%2F``
    into a separator; the raw path keeps each segment whole, and the
    handlers decode their segments once (:func:`.routes.segment`). Other
    paths (mounted pages, static files) are routed as decoded, as usual.

    ``root_path`` (``--root-path``) is the prefix a reverse proxy serves the
    app under. A proxy may pass it on (``proxy_pass http://host:8765;``, which
    keeps ``%2F`` as sent) or strip it: both reach the same routes, and the
    links the app makes carry it. uvicorn is not told about it (it would
    prepend it to every path, prefix or not).
    """

    def __init__(self, app: ASGIApp, root_path: str = "") -> None:
        self.app = app
        self.root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            root = self.root_path
            raw: bytes | None = scope.get("raw_path")
            path: str = scope["path"]
            if raw is not None:
                text = raw.decode("latin-1")
                route = text[len(root) :] if root and text.startswith(root + "/") else text
                if route == API or route.startswith(API + "/"):
                    path = text
            if root and not (path == root or path.startswith(root + "/")):
                path = root + path
            scope = dict(scope, path=path, root_path=root)
        await self.app(scope, receive, send)


def services_of(request: Request) -> r.Services:
    """The app's shared services (configuration, catalogs, authentication, rate limit)."""
    services: r.Services = request.app.state.services
    return services


async def authenticate(request: Request) -> Principal:
    """Who sent ``request``, counted against the rate limit: for routes mounted into the app.

    Raises
    ------
    AccessDeniedError
        As the API refuses (401); :func:`error_response` makes the JSON answer.
    RateLimitedError
        If the caller is over the rate limit (429).
    """
    services = services_of(request)
    return await run_in_threadpool(services.principal, request)


def error_response(request: Request, error: BaseException) -> Response:
    """The API's JSON error answer for ``error`` (for mounted routes)."""
    return services_of(request).error(error)


def _api(path: str, handler: r.Handler, methods: Sequence[str] = ("GET",)) -> Route:
    return Route(API + path, r.endpoint(handler), methods=list(methods), name=handler.__name__)


def api_routes() -> list[BaseRoute]:
    """The routes of ``/api/v1`` and ``/healthz`` (the OpenAPI spec lists exactly these)."""
    ds = "/datasets/{dataset}"
    return [
        Route("/healthz", r.health, methods=["GET"], name="health"),
        Route(API + "/openapi.json", _openapi, methods=["GET"], name="openapi"),
        _api("/datasets", r.list_datasets),
        _api(ds, r.dataset_info),
        _api(ds + "/versions", r.dataset_versions),
        _api(ds + "/tags", r.dataset_tags),
        _api(ds + "/keys", r.dataset_keys),
        _api(ds + "/samples/{key}", r.sample),
        _api(ds + "/samples/{key}/entries/{entry}", r.entry),
        _api(ds + "/batch", r.batch, ("POST",)),
        _api("/sql", r.sql, ("POST",)),
        Route(API + "/session", session.session_info, methods=["GET"], name="session_info"),
        Route(API + "/session", session.start_session, methods=["POST"], name="start_session"),
        Route(API + "/session", session.end_session, methods=["DELETE"], name="end_session"),
    ]


async def _openapi(request: Request) -> Response:
    """The OpenAPI document of this API (no token needed: it holds no data)."""
    return r.JsonBody(openapi_spec())


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own 404 and 405 (no such route, wrong method), as JSON like every error.
    assert isinstance(exc, HTTPException)
    error = BadRequestError(
        "no such endpoint: the API's paths are listed at /api/v1/openapi.json"
        if exc.status_code == 404
        else f"{request.method} is not allowed here"
    )
    hint = None
    if exc.status_code == 404 and "/datasets/" in request.url.path:
        # The usual cause: a key's "/" sent as is, which splits it into two path segments.
        hint = (
            "a dataset name, key or entry name is one path segment: percent-encode it "
            "(encodeURIComponent; '/' is %2F)"
        )
    body = {
        "error": "NotFound" if exc.status_code == 404 else "MethodNotAllowed",
        "message": error.message,
        "hint": hint,
    }
    return r.JsonBody(body, status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    # Reached only by a bug (endpoint() answers every ShardcatError): no message, which may
    # name paths; uvicorn logs the traceback.
    return services_of(request).error(exc)


def create_app(
    config: ServeConfig,
    *,
    routes: Sequence[BaseRoute] = (),
    middleware: Sequence[Middleware] = (),
) -> Starlette:
    """The ASGI app serving ``config``'s catalogs.

    Parameters
    ----------
    config:
        What to serve and how.
    routes:
        More routes (pages, static files), tried after the API's.
    middleware:
        More middleware, inside CORS and the raw-path routing.

    Returns
    -------
    Starlette
        The app; ``app.state.services`` holds its catalogs, authentication and limits.
    """
    services = r.Services(config)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        services.catalogs.close()

    stack: list[Middleware] = [Middleware(RawPathRouting, root_path=config.root_path)]
    if config.cors_origins:
        stack.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "HEAD", "POST"],
                allow_headers=["Authorization", "Content-Type", "Range", "If-None-Match"],
                expose_headers=["ETag", "Content-Range", "Content-Length", "Accept-Ranges"],
                allow_credentials=False,  # bearer tokens, never cookies
                max_age=600,
            )
        )
    stack.extend(middleware)
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        HTTPException: _http_error,
        Exception: _server_error,
    }
    pages: list[BaseRoute] = []
    if config.page:
        from .page import page_routes

        pages = page_routes()
    app = Starlette(
        routes=[*api_routes(), *pages, *routes],
        middleware=stack,
        exception_handlers=handlers,
        lifespan=lifespan,
    )
    app.state.services = services
    app.state.catalogs = services.catalogs
    return app
