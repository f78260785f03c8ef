"""Who a request is: ``Authorization: Bearer <token>`` checked against the catalogs' tokens.

A token is looked up by its SHA-256 in each catalog's ``api_tokens`` (the
first that has it is its catalog) and its row is trusted for
``token_cache_seconds``: a revoked token is refused that long after
``token revoke`` at most. Unknown tokens are remembered as unknown for as
long, so that a client repeating a bad token does not cost a query per
catalog per request. Expiry is checked at every request, against the cached row.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable

from ..catalog.tokens import TokenRow
from ..errors import AccessDeniedError, Hint
from .catalogs import Catalogs, Principal
from .tokens import hash_token, lookup_token

__all__ = ["COOKIE", "Authenticator", "bearer"]

COOKIE = "shardcat_token"
"""The cookie a browser's session keeps its token in (:mod:`.session`)."""

_MAX_CACHED = 10_000
_HOW = Hint(
    python="send the header Authorization: Bearer <token>",
    cli="send the header Authorization: Bearer <token> (make one with "
    "`shardcat serve token create`)",
)


def bearer(authorization: str | None, cookie: str | None) -> str | None:
    """The request's ``Authorization`` header; without one, the session cookie's token as one."""
    if authorization:
        return authorization
    return f"Bearer {cookie}" if cookie else None


class Authenticator:
    """Turns a request's ``Authorization`` header into a :class:`Principal`, or refuses it.

    Parameters
    ----------
    catalogs:
        Where tokens are looked up.
    anonymous:
        Requests without the header are anonymous principals (``--allow-anonymous``);
        a request that sends a token still has it checked.
    cache_seconds:
        How long a token's row (or its absence) is reused.
    clock:
        Monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        catalogs: Catalogs,
        *,
        anonymous: bool = False,
        cache_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.catalogs = catalogs
        self.anonymous = anonymous
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, tuple[str, TokenRow] | None]] = {}

    def principal(self, authorization: str | None, client: str) -> Principal:
        """Who sent a request with this header, from the address ``client``.

        Blocking (catalog queries): call it from a worker thread.

        Raises
        ------
        AccessDeniedError
            No header (unless anonymous access is on), not a bearer token, or
            a token that is unknown, expired or revoked (401).
        """
        if not authorization:
            if self.anonymous:
                return Principal(caller=f"anon:{client}")
            raise AccessDeniedError("this server needs a token", hint=_HOW)
        scheme, _, token = authorization.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AccessDeniedError("the Authorization header is not 'Bearer <token>'", hint=_HOW)
        found = self._find(token)
        if found is None:
            raise AccessDeniedError("unknown token", hint=_HOW)
        catalog, row = found
        state = row.state(dt.datetime.now(dt.timezone.utc))
        if state != "active":
            raise AccessDeniedError(
                f"token {row.name!r} is {state}",
                hint=Hint(
                    python="ask for a new token",
                    cli="ask for a new token (`shardcat serve token create`)",
                ),
            )
        scope = None if row.datasets is None else frozenset(row.datasets)
        return Principal(
            caller=f"token:{row.id}@{catalog}", catalog=catalog, datasets=scope, name=row.name
        )

    def _find(self, token: str) -> tuple[str, TokenRow] | None:
        digest = hash_token(token)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        found: tuple[str, TokenRow] | None = None
        for name in self.catalogs.names:
            row = lookup_token(self.catalogs.get(name), token)
            if row is not None:
                found = (name, row)
                break
        if self.cache_seconds > 0:
            with self._lock:
                if len(self._cache) >= _MAX_CACHED:
                    self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                    if len(self._cache) >= _MAX_CACHED:
                        self._cache.clear()
                self._cache[digest] = (now + self.cache_seconds, found)
        return found
