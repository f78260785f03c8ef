"""Access tokens of ``shardcat serve``: made here, shown once, kept in the catalog as a SHA-256.

A token is ``sct_`` and 43 characters of a 256-bit random value
(``secrets.token_urlsafe(32)``): far too many guesses for a fast hash to
matter, so a plain SHA-256 is what is stored (a slow password hash guards
guessable secrets, which these are not). The prefix lets secret scanners
recognise a leaked token. Imports nothing of the web stack: the CLI's
``serve token`` commands use it without Starlette.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from ..catalog.tokens import TokenRow, find_token, insert_token, revoke_token
from ..catalog.tokens import list_tokens as _token_rows
from ..errors import BadRequestError
from ..reading import Catalog

__all__ = [
    "PREFIX",
    "NewToken",
    "TokenRow",
    "create_token",
    "hash_token",
    "list_tokens",
    "lookup_token",
    "parse_expiry",
    "revoke",
]

PREFIX = "sct_"
_DURATION = re.compile(r"\s*(\d+)\s*(s|m|h|d|w|y)\s*", re.IGNORECASE)
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 365 * 86400}
_NAME = re.compile(r"[A-Za-z0-9_.@:-]{1,255}")


def hash_token(token: str) -> str:
    """The SHA-256 (hex) of a token: what the catalog keeps."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_expiry(value: str | None, now: dt.datetime | None = None) -> dt.datetime | None:
    """``"30d"``, ``"12h"``, ``"1y"`` from ``now`` (UTC); ``"never"`` or None: no expiry.

    Raises
    ------
    BadRequestError
        If the text is not a duration of a whole number and a unit (s, m, h, d, w, y).
    """
    if value is None or value.strip().lower() == "never":
        return None
    m = _DURATION.fullmatch(value)
    if m is None or int(m.group(1)) <= 0:
        raise BadRequestError(
            f"cannot read {value!r} as a duration: write e.g. 30d, 12h, 1y (or never)"
        )
    now = now or dt.datetime.now(dt.timezone.utc)
    return now + dt.timedelta(seconds=int(m.group(1)) * _SECONDS[m.group(2).lower()])


@dataclass(frozen=True, slots=True)
class NewToken:
    """A token just made: ``token`` is shown this once and is nowhere else."""

    token: str
    row: TokenRow

    def __repr__(self) -> str:
        return f"NewToken(row={self.row!r}, token=<hidden>)"


def create_token(
    catalog: Catalog,
    *,
    datasets: Iterable[str] | None = None,
    expires: str | dt.datetime | None = None,
    name: str | None = None,
) -> NewToken:
    """Make a token for reading ``datasets`` of ``catalog`` (None: all of them) over HTTP.

    Parameters
    ----------
    catalog:
        The catalog whose datasets the token reads and where its hash is kept.
    datasets:
        The dataset names it may read; each must exist now. None or empty: every
        dataset of the catalog, also those made later (and ``/api/v1/sql``).
    expires:
        A duration from now (``"30d"``), a time, or None for a token that never expires.
    name:
        A unique name to list and revoke it by (default: ``token-`` and 8 random hex digits).

    Raises
    ------
    DatasetNotFoundError
        If a dataset named does not exist.
    BadRequestError
        If ``expires`` or ``name`` cannot be used.
    CatalogError
        If a token of that name exists, or the catalog fails.
    """
    scope = sorted(set(datasets or ())) or None
    for dataset in scope or ():
        catalog.info(dataset)  # DatasetNotFoundError: a typo must not make a useless token
    expires_at = expires if isinstance(expires, dt.datetime) else parse_expiry(expires)
    if expires_at is not None and expires_at.tzinfo is None:
        raise BadRequestError("expires must be a time with a zone (UTC), or a duration")
    name = name or f"token-{secrets.token_hex(4)}"
    if not _NAME.fullmatch(name) or name.isdigit():
        raise BadRequestError(
            f"token name {name!r} must be letters, digits and _ . @ : - (not only digits: "
            "those are ids), at most 255 characters"
        )
    token = PREFIX + secrets.token_urlsafe(32)
    row = insert_token(
        catalog.engine,
        name=name,
        token_hash=hash_token(token),
        datasets=scope,
        expires_at=expires_at,
    )
    return NewToken(token, row)


def lookup_token(catalog: Catalog, token: str) -> TokenRow | None:
    """The row of ``token`` in ``catalog`` (any state), or None when the catalog has no such token.

    Raises
    ------
    CatalogError
        If the catalog fails.
    """
    if not token.startswith(PREFIX) or len(token) > 128:
        return None  # not one of ours: no query
    return find_token(catalog.engine, hash_token(token))


def revoke(catalog: Catalog, name: str) -> TokenRow:
    """Revoke the token named (or numbered) ``name``: refused from then on.

    Raises
    ------
    TokenNotFoundError
        If the catalog has no such token.
    """
    return revoke_token(catalog.engine, name)


def list_tokens(catalog: Catalog) -> list[TokenRow]:
    """Every token of ``catalog`` (active, expired, revoked), oldest first; never the tokens.

    Raises
    ------
    CatalogError
        If the catalog fails.
    """
    return _token_rows(catalog.engine)
