"""The dataset browser: one static page (``static/``) served beside the API, no build step.

The page is plain HTML, CSS and JavaScript shipped in the package; it holds
no data, so it needs no token: everything it shows comes from ``/api/v1``
with the caller's own token (sent as the cookie :mod:`.session` sets, so
that ``<img>`` and ``<video>`` load entries too). Its three views are URLs
that can be shared: ``ui/``, ``ui/dataset?d=NAME&v=…&prefix=…&sql=…`` and
``ui/sample?d=NAME&k=KEY&v=…``; each is the same document, which routes
on its own URL.
"""

from __future__ import annotations

import html
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

__all__ = ["PAGE_HEADERS", "page_routes"]

VIEWS = ("", "dataset", "sample")
"""The page's views, under ``/ui/``."""

PAGE_HEADERS = {
    # Only the page's own script and styles run; entries (images, audio, video) come from the
    # same origin; nothing embeds the page.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "media-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}


def _index() -> bytes:
    return (files("shardcat.serve") / "static" / "index.html").read_bytes()


class _Static(StaticFiles):
    """The page's script and style, with the page's headers (revalidated: they change with releases)."""

    async def get_response(self, path: str, scope: dict) -> Response:  # type: ignore[override,type-arg]
        response = await super().get_response(path, scope)
        response.headers.update(PAGE_HEADERS)
        return response


def page_routes() -> list[BaseRoute]:
    """The page's routes: ``/`` and ``/ui`` lead to ``/ui/``; each view; ``/ui/static/``."""
    plain = _index()
    by_root: dict[str, bytes] = {}

    def document(root: str) -> bytes:
        # The root path the API is under, for the page's script: a reverse proxy may strip it
        # from the paths this process sees, but the browser must send it (the session cookie
        # is scoped to it). Escaped as an attribute: it is the operator's text.
        if root not in by_root:
            meta = f'<meta name="shardcat-root" content="{html.escape(root, quote=True)}">'
            by_root[root] = plain.replace(b"<head>", b"<head>\n  " + meta.encode(), 1)
        return by_root[root]

    async def page(request: Request) -> Response:
        root = request.app.state.services.config.root_path
        return Response(document(root), media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    async def home(request: Request) -> Response:
        root = request.app.state.services.config.root_path
        return RedirectResponse(f"{root}/ui/", status_code=308)

    return [
        Route("/", home, methods=["GET", "HEAD"], name="home"),
        Route("/ui", home, methods=["GET", "HEAD"], name="ui"),
        *(
            Route(f"/ui/{view}", page, methods=["GET", "HEAD"], name=f"page_{view or 'datasets'}")
            for view in VIEWS
        ),
        Mount("/ui/static", _Static(packages=[("shardcat.serve", "static")]), name="static"),
    ]
