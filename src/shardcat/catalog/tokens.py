"""The rows of ``api_tokens``: the access tokens of ``shardcat serve``, kept hashed.

Only the SHA-256 of a token reaches the catalog (``shardcat.serve.tokens``
makes tokens and hashes them); this module stores, lists, finds and revokes
the rows. Times are UTC: SQLite keeps them without a zone, so a naive value
read back is UTC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from ..errors import CatalogError, TokenNotFoundError
from .models import ApiToken
from .session import unit_of_work

__all__ = ["TokenRow", "find_token", "insert_token", "list_tokens", "revoke_token"]


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A token's row, without the token (which the catalog never holds)."""

    id: int
    name: str
    datasets: tuple[str, ...] | None
    """The datasets it may read; None: every dataset of its catalog."""
    created_at: dt.datetime
    expires_at: dt.datetime | None
    revoked_at: dt.datetime | None

    def state(self, now: dt.datetime | None = None) -> str:
        """``active``, ``expired`` or ``revoked`` at ``now`` (default: the current time)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    @classmethod
    def of(cls, row: ApiToken) -> TokenRow:
        """The value of an ORM row."""
        return cls(
            id=row.id,
            name=row.name,
            datasets=None if row.datasets is None else tuple(row.datasets),
            created_at=_utc(row.created_at) or dt.datetime.now(dt.timezone.utc),
            expires_at=_utc(row.expires_at),
            revoked_at=_utc(row.revoked_at),
        )


def _naive_utc(value: dt.datetime | None) -> dt.datetime | None:
    # Stored without a zone on SQLite and with one on PostgreSQL: UTC in both.
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc)
    return value.replace(tzinfo=None) if value.tzinfo is not None else value


def insert_token(
    engine: Engine,
    *,
    name: str,
    token_hash: str,
    datasets: Sequence[str] | None,
    expires_at: dt.datetime | None,
) -> TokenRow:
    """Store a new token's hash under ``name``.

    Raises
    ------
    CatalogError
        If a token of that name exists already (or the database fails).
    """
    now = dt.datetime.now(dt.timezone.utc)
    row = ApiToken(
        name=name,
        token_hash=token_hash,
        datasets=None if datasets is None else list(datasets),
        created_at=_naive_utc(now) if engine.dialect.name == "sqlite" else now,
        expires_at=_naive_utc(expires_at) if engine.dialect.name == "sqlite" else expires_at,
    )
    exists = CatalogError(
        f"a token named {name!r} exists already: choose another --name (revoked tokens keep "
        "their names, so that `token list` shows what they were)"
    )
    try:
        with unit_of_work(engine, write=True) as s:
            if s.scalars(select(ApiToken.id).where(ApiToken.name == name)).first() is not None:
                raise exists
            s.add(row)
            s.flush()
            return TokenRow.of(row)
    except CatalogError as e:
        # Two processes making the same name at once: the unique index decides.
        if e is not exists and isinstance(e.__cause__, IntegrityError):
            raise exists from None
        raise


def list_tokens(engine: Engine) -> list[TokenRow]:
    """Every token's row (active, expired and revoked), oldest first.

    Raises
    ------
    CatalogError
        If the database fails.
    """
    with unit_of_work(engine) as s:
        rows = s.scalars(select(ApiToken).order_by(ApiToken.id)).all()
        return [TokenRow.of(r) for r in rows]


def find_token(engine: Engine, token_hash: str) -> TokenRow | None:
    """The row of the token whose SHA-256 is ``token_hash`` (None: no such token).

    Raises
    ------
    CatalogError
        If the database fails.
    """
    with unit_of_work(engine) as s:
        row = s.scalars(select(ApiToken).where(ApiToken.token_hash == token_hash)).one_or_none()
        return None if row is None else TokenRow.of(row)


def revoke_token(engine: Engine, name: str) -> TokenRow:
    """Revoke the token named ``name`` (or whose id is ``name``); revoking twice is harmless.

    Raises
    ------
    TokenNotFoundError
        If no token has that name or id.
    CatalogError
        If the database fails.
    """
    with unit_of_work(engine, write=True) as s:
        row = s.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()
        if row is None and name.isdigit():
            row = s.get(ApiToken, int(name))
        if row is None:
            raise TokenNotFoundError(
                f"no token named {name!r} in this catalog: `shardcat serve token list` lists them"
            )
        if row.revoked_at is None:
            now = dt.datetime.now(dt.timezone.utc)
            row.revoked_at = _naive_utc(now) if engine.dialect.name == "sqlite" else now
            s.flush()
        return TokenRow.of(row)
