"""Layer 4 of ``shardcat sql`` (PostgreSQL): a role that may only read the catalog."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import config
from ...errors import CatalogError, SchemaVersionError
from ..session import display_url, translate_errors
from .statement import NAMEDATALEN

if TYPE_CHECKING:
    import psycopg
    from sqlalchemy import Engine

__all__ = ["SQL_ROLE_ENV", "ReadOnlyRole", "create_readonly_role", "require_postgres"]

SQL_ROLE_ENV = config.env_var("sql_role")
"""PostgreSQL: the role ``shardcat sql`` and ``where=`` filters run as (``SET LOCAL ROLE``)."""


def require_postgres(engine: Engine, what: str) -> None:
    """Raise unless ``engine`` is a PostgreSQL catalog.

    Raises
    ------
    CatalogError
        On SQLite (and any other database), naming ``what``.
    """
    if engine.dialect.name != "postgresql":
        raise CatalogError(
            f"{what} is PostgreSQL-only: a {engine.dialect.name} catalog has no roles "
            "(shardcat sql opens SQLite with PRAGMA query_only; to share it read-only, "
            "give other people read access to the file)"
        )


@dataclass(frozen=True, slots=True)
class ReadOnlyRole:
    """What :func:`create_readonly_role` did.

    Attributes
    ----------
    name:
        The role.
    schema:
        The catalog's schema, which the role may use.
    tables:
        The catalog tables and views (``live_records``, ...) the role may SELECT.
    created:
        False when the role existed already (its grants were brought up to date).
    login:
        The role may log in (with a password).
    granted_to:
        The user the role was granted to, so that it can ``SET ROLE`` to it
        (None when that user could already).
    """

    name: str
    schema: str
    tables: tuple[str, ...]
    created: bool
    login: bool
    granted_to: str | None


_POWERS = ("rolsuper", "rolcreaterole", "rolcreatedb", "rolreplication", "rolbypassrls")


def create_readonly_role(engine: Engine, name: str, *, password: str | None = None) -> ReadOnlyRole:
    """Create (or update) a PostgreSQL role that can only read the catalog.

    The role gets USAGE on the catalog's schema (the connection's
    ``current_schema()``), SELECT on the catalog tables and views, SELECT on tables
    the catalog's owner creates there later (default privileges, for new
    migrations), and CONNECT on the database if it may log in. It is
    granted to the connected user, so ``shardcat sql --role NAME`` can
    ``SET ROLE`` to it. Running it again changes nothing but a new password.

    Parameters
    ----------
    engine:
        A PostgreSQL catalog, connected as a user that may create roles and
        grant on the catalog tables (their owner, or a superuser).
    name:
        The role; created NOLOGIN unless ``password`` is given.
    password:
        Let the role log in with this password. It is sent to the server as
        a SCRAM verifier, never in clear text (which the server could log).

    Raises
    ------
    CatalogError
        On SQLite, if a role of this name exists with powers beyond reading
        (SUPERUSER, CREATEROLE, ...), or if the database refuses.
    SchemaVersionError
        If the catalog has no tables yet (run ``shardcat catalog upgrade``).
    """
    require_postgres(engine, "shardcat catalog create-readonly-role")
    if not name or len(name.encode()) > NAMEDATALEN:
        raise ValueError(f"a role name has 1 to {NAMEDATALEN} bytes, not {name!r}")
    if password is not None and not password:
        raise ValueError("the password is empty")
    with translate_errors(engine.url):
        raw = engine.raw_connection()
        try:
            conn: Any = raw.driver_connection
            try:
                report = _create_role(conn, name, password, display_url(engine.url))
                conn.commit()
            except BaseException:
                with suppress(Exception):
                    conn.rollback()
                raise
        finally:
            raw.close()
    return report


def _create_role(
    conn: psycopg.Connection[Any], name: str, password: str | None, where: str
) -> ReadOnlyRole:
    from psycopg import sql

    from ..models import Base
    from ..views import VIEW_NAMES

    cur = conn.cursor()
    here: Any = cur.execute("SELECT current_schema(), current_user, current_database()").fetchone()
    schema, user, database = here
    if schema is None:
        raise CatalogError(f"catalog {where}: its search_path names no schema that exists")
    present = {
        r[0]
        for r in cur.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s"
            " UNION ALL SELECT viewname FROM pg_views WHERE schemaname = %s",
            (schema, schema),
        )
    }
    if "datasets" not in present:
        raise SchemaVersionError(
            f"catalog {where} has no catalog tables in schema {schema}: run "
            f"`shardcat catalog upgrade --catalog {where}` first"
        )
    catalog = (*Base.metadata.tables, "alembic_version", *VIEW_NAMES)
    tables = tuple(sorted(t for t in catalog if t in present))
    if name == user:
        raise CatalogError(f"role {name} is the user you are connected as; choose another name")
    role = sql.Identifier(name)
    existing = cur.execute(
        f"SELECT {', '.join(_POWERS)}, rolcanlogin FROM pg_roles WHERE rolname = %s", (name,)
    ).fetchone()
    secret: sql.Composable = sql.SQL("")
    if password is not None:
        algorithm = (cur.execute("SHOW password_encryption").fetchone() or ("scram-sha-256",))[0]
        verifier = conn.pgconn.encrypt_password(
            password.encode(), name.encode(), algorithm.encode()
        )
        secret = sql.SQL(" LOGIN PASSWORD {}").format(sql.Literal(verifier.decode()))
    if existing is None:
        login = sql.SQL("") if password is not None else sql.SQL(" NOLOGIN")
        cur.execute(sql.SQL("CREATE ROLE {}{}{}").format(role, login, secret))
    else:
        powers = [p[3:].upper() for p, on in zip(_POWERS, existing) if on]
        if powers:
            raise CatalogError(
                f"role {name} exists and can do more than read ({', '.join(powers)}); "
                "choose another name"
            )
        if password is not None:
            cur.execute(sql.SQL("ALTER ROLE {}{}").format(role, secret))
    can_login = password is not None or bool(existing and existing[-1])
    ident_schema = sql.Identifier(schema)
    cur.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident_schema, role))
    cur.execute(
        sql.SQL("GRANT SELECT ON TABLE {} TO {}").format(
            sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables), role
        )
    )
    owner_row = cur.execute(
        "SELECT tableowner FROM pg_tables WHERE schemaname = %s AND tablename = 'datasets'",
        (schema,),
    ).fetchone()
    if owner_row is not None:
        # Tables later migrations add (created by the catalog's owner) are readable too.
        cur.execute(
            sql.SQL(
                "ALTER DEFAULT PRIVILEGES FOR ROLE {} IN SCHEMA {} GRANT SELECT ON TABLES TO {}"
            ).format(sql.Identifier(owner_row[0]), ident_schema, role)
        )
    if can_login:
        cur.execute(
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(sql.Identifier(database), role)
        )
    member = cur.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (name,)).fetchone()
    granted_to = None
    if not (member and member[0]):
        cur.execute(sql.SQL("GRANT {} TO {}").format(role, sql.Identifier(user)))
        granted_to = user
    return ReadOnlyRole(name, schema, tables, existing is None, can_login, granted_to)
