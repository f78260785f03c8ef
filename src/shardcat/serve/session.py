"""A browser's session: its token kept in an HttpOnly cookie, so that ``<img>`` and ``<video>`` load.

A page cannot put an ``Authorization`` header on the requests an image or a
video element makes. ``POST /api/v1/session {"token": ...}`` checks the
token as any request's would be checked and answers with a cookie holding
it; every endpoint then takes the cookie where no header was sent
(:meth:`.routes.Services.principal`). The cookie is:

* ``HttpOnly``: the page's script cannot read it (a script injected into
  the page could not send it elsewhere);
* ``SameSite=Strict``: another site's page cannot make the browser send it,
  so no cross-site request (a form posting SQL, an image of an entry) runs
  as the user;
* ``Secure`` when the request came over HTTPS (directly or through a proxy
  that says so in ``X-Forwarded-Proto``);
* scoped to the app's root path, and a session cookie (gone when the browser
  closes; the token's own expiry and revocation still apply at every request).

``GET /api/v1/session`` says who the caller is (the page's "signed in as")
and whether it may run SQL; ``DELETE /api/v1/session`` removes the cookie.
"""

from __future__ import annotations

import json

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..errors import AccessDeniedError, BadRequestError, ShardcatError
from .auth import COOKIE
from .catalogs import Principal
from .routes import JsonBody, Services, endpoint, read_body

__all__ = ["end_session", "session_info", "start_session"]


def _secure(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


def _cookie_path(request: Request, services: Services) -> str:
    return (services.config.root_path or "") + "/"


async def start_session(request: Request) -> Response:
    """Check ``{"token": ...}`` and keep it in the session cookie; the token's name and scope."""
    services: Services = request.app.state.services
    try:
        body = await read_body(request)
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        token = doc.get("token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token.strip():
            raise BadRequestError('the body must be {"token": "..."}')
        token = token.strip()
        client = request.client.host if request.client else "unknown"

        def check() -> dict[str, object]:
            try:
                who = services.auth.principal(f"Bearer {token}", client)
            except AccessDeniedError:
                services.rate.take(f"refused:{client}")  # as for any request: guessing is rated
                raise
            services.rate.take(who.caller)
            return _who(who, services)

        answer = await run_in_threadpool(check)
    except ShardcatError as e:
        return services.error(e)
    response = JsonBody(answer)
    response.set_cookie(
        COOKIE,
        token,
        path=_cookie_path(request, services),
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def _who(who: Principal, services: Services) -> dict[str, object]:
    """A caller as the page shows it: the token's name and scope, and what the server allows."""
    return {
        "name": who.name,
        "catalog": who.catalog,
        "datasets": None if who.datasets is None else sorted(who.datasets),
        "anonymous": who.name is None and who.caller.startswith("anon:"),
        "sql": services.config.sql and who.unscoped,
    }


@endpoint
def session_info(request: Request, services: Services, who: Principal) -> Response:
    """Who this request is (its header or its session cookie): the page's "signed in as"."""
    response = JsonBody(_who(who, services))
    response.headers["Cache-Control"] = "no-store"
    return response


async def end_session(request: Request) -> Response:
    """Forget the session cookie (the token itself stays valid: ``token revoke`` ends it)."""
    services: Services = request.app.state.services
    response = Response(status_code=204)
    response.delete_cookie(
        COOKIE,
        path=_cookie_path(request, services),
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response
