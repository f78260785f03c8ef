"""Engines, units of work and error translation for the catalog database.

SQLite gets WAL (readers never block the writer), a busy timeout, foreign
keys, ``synchronous=NORMAL`` and explicit transactions: write units of work
start with ``BEGIN IMMEDIATE`` so two writers queue on the busy timeout
instead of failing half-way. PostgreSQL goes through psycopg 3.

Every database error leaving this package is a :class:`~shardcat.errors.CatalogError`,
classified by the driver's error class and code (SQLSTATE on PostgreSQL,
the result code on SQLite), never by message text alone: a lock held too
long becomes :class:`~shardcat.errors.CatalogLockedError`; a missing table or
column in shardcat's own statements becomes
:class:`~shardcat.errors.SchemaVersionError` naming the upgrade; in a query a
user wrote (``shardcat sql``) every SQL mistake is
:class:`~shardcat.errors.QueryError`, the user's to fix.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import config
from .._lazy import lazy_module
from .._redact import mask_url, mentions_secret, scrub, url_secrets
from ..errors import (
    CatalogError,
    CatalogLockedError,
    CatalogUnreachableError,
    Hint,
    InvalidNameError,
    QueryError,
    SchemaVersionError,
    ShardcatError,
)
from . import sqlite_file

if TYPE_CHECKING:
    import sqlalchemy as _sa
    from sqlalchemy import Engine
    from sqlalchemy.engine import URL
    from sqlalchemy.orm import Session
else:
    # SQLAlchemy loads when an engine or a unit of work is first needed: a
    # lookup on a SQLite file needs neither (sqlite_file.py).
    _sa = lazy_module("sqlalchemy")

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "DEFAULT_URL",
    "NO_SYNC",
    "absolute_sqlite_url",
    "catalog_exists",
    "create_catalog_engine",
    "default_url",
    "display_url",
    "translate_errors",
    "translate_exception",
    "unit_of_work",
    "upgrade_hint",
]

DEFAULT_URL = "sqlite:///shardcat.db"
"""A SQLite file in the working folder."""
DEFAULT_BUSY_TIMEOUT = 30.0
"""Seconds a SQLite writer waits for another one before CatalogLockedError."""
ENV_VAR = config.env_var("catalog")
"""The environment variable of the ``catalog`` setting (docs/CONFIG.md)."""

_WRITE = "shardcat_write"

NO_SYNC = {"synchronize_session": False}
"""Execution options of bulk UPDATE/DELETE statements: the session holds no rows to keep in sync."""


SUPPORTED_DIALECTS = {
    "sqlite": "built in (Python's sqlite3)",
    "postgresql": "pip install 'shardcat[postgres]' (psycopg 3)",
}
"""The databases a catalog can live in, and what each needs installed."""
_SUPPORTED = "; ".join(f"{name}: {need}" for name, need in SUPPORTED_DIALECTS.items())


def upgrade_hint(where: str, *, backup: bool = False) -> Hint:
    """How to bring the catalog at ``where`` (a displayed URL) to this shardcat's schema."""
    first = " (back up the catalog first)" if backup else ""
    return Hint(
        python=f"upgrade it with shardcat.catalog.upgrade(url){first}, or run "
        f"`shardcat catalog upgrade --catalog {where}`",
        cli=f"run `shardcat catalog upgrade --catalog {where}`{first}",
    )


def default_url() -> str:
    """The ``catalog`` setting (``$SHARDCAT_CATALOG``), else ``sqlite:///shardcat.db``."""
    return str(config.get("catalog") or DEFAULT_URL)


def normalize_url(url: str | URL) -> URL:
    """Parse a catalog URL; plain ``postgresql://`` means psycopg 3.

    Raises
    ------
    CatalogError
        If the URL cannot be parsed or names an unsupported driver.
    """
    try:
        parsed = _sa.make_url(url)
    except Exception as e:  # ArgumentError, ValueError: both mean a malformed URL
        # No cause: SQLAlchemy's ArgumentError quotes the whole URL, password and all.
        raise CatalogError(
            f"not a catalog URL: {display_url(url)!r} ({_scrubbed(e, url)}); "
            "use e.g. sqlite:///shardcat.db"
        ) from None
    if parsed.drivername == "postgres" or parsed.drivername.startswith("postgres+"):
        # libpq, Heroku and most hosting panels write postgres://: the same database.
        parsed = parsed.set(drivername="postgresql" + parsed.drivername[len("postgres") :])
    backend = parsed.get_backend_name()
    if backend not in SUPPORTED_DIALECTS:
        raise CatalogError(
            f"catalog URL {display_url(parsed)} names a {backend} database; shardcat catalogs "
            f"run on {_SUPPORTED}"
        )
    if backend == "sqlite" and parsed.host and not parsed.database:
        # sqlite://shardcat.db: the file name landed where a server's host goes.
        raise CatalogError(
            f"catalog URL {display_url(parsed)} has two slashes where SQLite needs three: "
            f"write sqlite:///{parsed.host} (a file in this folder) or "
            f"sqlite:////absolute/path/{parsed.host}"
        )
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif parsed.drivername.startswith("postgresql+") and parsed.drivername != "postgresql+psycopg":
        raise CatalogError(
            f"catalog URL {display_url(parsed)} asks for driver {parsed.drivername!r}; shardcat "
            f"uses psycopg 3: write postgresql+psycopg://... ({SUPPORTED_DIALECTS['postgresql']})"
        )
    elif parsed.drivername.startswith("sqlite+") and parsed.drivername != "sqlite+pysqlite":
        raise CatalogError(
            f"catalog URL {display_url(parsed)} asks for driver {parsed.drivername!r}; shardcat "
            "uses Python's sqlite3: write sqlite:///path.db"
        )
    return parsed


def absolute_sqlite_url(url: str) -> str:
    """``url`` with a relative SQLite file made absolute (against this process's working folder).

    ``sqlite:///shardcat.db`` names a different file in every process that
    starts in another folder: a Dask worker would create its own empty
    catalog. Resolving it once, where the user typed it, gives every process
    the same file. Server URLs, in-memory databases, ``file:`` URIs and
    absolute paths come back unchanged (the same string).
    """
    plain = sqlite_file.absolute(url)
    if plain is not None:
        return plain
    try:
        parsed = _sa.make_url(url)
    except Exception:  # the engine reports malformed URLs, with secrets masked
        return url
    if parsed.get_backend_name() != "sqlite":
        return url
    db = parsed.database or ""
    if db in ("", ":memory:") or db.startswith("file:") or os.path.isabs(db):
        return url
    return parsed.set(database=os.path.abspath(db)).render_as_string(hide_password=False)


def catalog_exists(url: str | URL) -> bool:
    """Whether there is a catalog database to open at ``url`` without creating one.

    False only for a SQLite file that does not exist (connecting would create
    an empty one). A server database, an in-memory one and a URL that does not
    parse count as there: opening them reports what is wrong.
    """
    path = sqlite_file.file_path(url) if isinstance(url, str) else None
    if path is not None:
        return Path(path).exists()
    try:
        parsed = _sa.make_url(url)
    except Exception:  # the catalog reports malformed URLs itself
        return True
    if parsed.get_backend_name() != "sqlite":
        return True
    db = parsed.database or ""
    return db in ("", ":memory:") or db.startswith("file:") or Path(db).exists()


def display_url(url: str | URL) -> str:
    """The URL with its password and query-string secrets (``?password=``) hidden, for messages.

    A URL that does not parse is masked as text: whatever stands between
    ``://`` and the host's ``@`` becomes ``user:***``.
    """
    if isinstance(url, str) and sqlite_file.file_path(url) is not None:
        return mask_url(url)  # a file's path: no password, nothing to parse
    try:
        text = _sa.make_url(url).render_as_string(hide_password=True)
    except Exception:
        text = str(url) if isinstance(url, str) else url.render_as_string(hide_password=True)
    # Also for parsed URLs: an '@' in the password makes SQLAlchemy take part of it for the host.
    return mask_url(text)


def _secrets(url: str | URL) -> list[str]:
    """What must never appear in a message about ``url``."""
    if isinstance(url, str):
        return url_secrets(url)
    found = url_secrets(url.render_as_string(hide_password=False))
    if url.password:
        found.append(str(url.password))
    return found


def _scrubbed(e: BaseException, url: str | URL) -> str:
    """``e``'s message without ``url``'s secrets (drivers may quote the host, DSN or URL)."""
    return scrub(str(e), _secrets(url))


def _safe_cause(e: BaseException, url: str | URL) -> BaseException | None:
    """``e`` to chain as the cause, or None if its chain's messages show ``url``'s secrets.

    With ``-v`` Python prints every chained exception's message, not only ours.
    """
    return None if mentions_secret(e, _secrets(url)) else e


def create_catalog_engine(
    url: str | URL, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, **kwargs: Any
) -> Engine:
    """An Engine configured for the catalog.

    Parameters
    ----------
    url:
        A SQLAlchemy URL: ``sqlite:///path.db``, ``sqlite://`` (in memory) or
        ``postgresql+psycopg://user@host/db``.
    busy_timeout:
        SQLite only: seconds to wait for another writer's lock.
    **kwargs:
        Passed to :func:`sqlalchemy.create_engine`.

    Raises
    ------
    CatalogError
        If the URL is malformed or its driver is not installed.
    """
    parsed = normalize_url(url)
    if parsed.get_backend_name() == "sqlite":
        memory = parsed.database in (None, "", ":memory:")
        connect_args = dict(kwargs.pop("connect_args", {}))
        connect_args.setdefault("timeout", busy_timeout)
        if memory:
            # One shared connection: every new connection to :memory: is a new, empty database.
            connect_args.setdefault("check_same_thread", False)
            kwargs.setdefault("poolclass", _sa.pool.StaticPool)
        try:
            engine = _sa.create_engine(parsed, connect_args=connect_args, **kwargs)
        except Exception as e:
            raise CatalogError(
                f"cannot open catalog {display_url(parsed)}: {_scrubbed(e, parsed)}"
            ) from _safe_cause(e, parsed)
        _configure_sqlite(engine, busy_timeout, memory)
        return engine
    # A server restart, failover or idle timeout drops pooled connections:
    # test each one as it is checked out (one round trip) instead of failing.
    kwargs.setdefault("pool_pre_ping", True)
    try:
        engine = _sa.create_engine(parsed, **kwargs)
    except ImportError as e:
        need = SUPPORTED_DIALECTS[parsed.get_backend_name()]
        raise CatalogError(
            f"catalog {display_url(parsed)} needs a database driver that is not installed "
            f"({_scrubbed(e, parsed)}): {need}"
        ) from _safe_cause(e, parsed)
    except Exception as e:
        raise CatalogError(
            f"cannot open catalog {display_url(parsed)}: {_scrubbed(e, parsed)}"
        ) from _safe_cause(e, parsed)
    if engine.dialect.name == "postgresql":
        _configure_postgresql(engine)
    return engine


def _configure_postgresql(engine: Engine) -> None:
    """Every connection runs without JIT compilation (``SET jit = off``).

    The catalog's statements are index probes and short scans, which JIT never
    pays back: a statement whose plan is costed above ``jit_above_cost`` (a
    batch's thousands of hashes, an ``update_fields`` chunk) spent more time
    compiling than running (``update_fields`` of 40,000 values: 11.7 s with
    JIT, 8.5 s without).
    """

    @_sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        autocommit = dbapi_conn.autocommit
        dbapi_conn.autocommit = True  # a SET outside any transaction lasts the session
        try:
            with dbapi_conn.cursor() as cur:
                cur.execute("SET jit = off")
        finally:
            dbapi_conn.autocommit = autocommit


def _configure_sqlite(engine: Engine, busy_timeout: float, memory: bool) -> None:
    @_sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: sqlite3.Connection, record: Any) -> None:
        sqlite_file.configure(dbapi_conn, busy_timeout, memory=memory)

    @_sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        write = conn.get_execution_options().get(_WRITE, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


@contextmanager
def unit_of_work(
    engine: Engine, *, write: bool = False, busy_timeout: float | None = None
) -> Iterator[Session]:
    """One transaction: commit on success, roll back on error, translate database errors.

    Parameters
    ----------
    engine:
        The catalog engine.
    write:
        The unit will write: on SQLite it takes the write lock up front.
    busy_timeout:
        For the message of a CatalogLockedError.

    Raises
    ------
    CatalogError
        Any database error, translated (see :func:`translate_exception`).
    """
    from sqlalchemy.orm import Session  # the ORM loads with the first unit of work, not on open

    bind = engine.execution_options(**{_WRITE: True}) if write else engine
    with (
        translate_errors(engine.url, busy_timeout),
        Session(bind, expire_on_commit=False, autoflush=False) as session,
        session.begin(),
    ):
        yield session


@contextmanager
def translate_errors(
    url: str | URL, busy_timeout: float | None = None, *, user_query: bool = False
) -> Iterator[None]:
    """Turn SQLAlchemy and driver errors into shardcat's catalog errors.

    ``user_query``: the statement is one a user wrote, so a SQL mistake in it
    is a :class:`~shardcat.errors.QueryError`, not a schema problem.
    """
    try:
        yield
    except ShardcatError:
        raise
    except Exception as e:
        if not (_is_sqlalchemy_error(e) or isinstance(e, sqlite3.Error) or _is_psycopg_error(e)):
            raise
        raise translate_exception(e, url, busy_timeout, user_query=user_query) from _safe_cause(
            e, url
        )


def _is_sqlalchemy_error(e: BaseException) -> bool:
    # Not loaded yet: nothing of SQLAlchemy's can have raised it.
    exc = sys.modules.get("sqlalchemy.exc")
    return exc is not None and isinstance(e, exc.SQLAlchemyError)


def _driver_error(e: BaseException) -> BaseException:
    """The driver's own error under SQLAlchemy's ``DBAPIError`` wrapper, or ``e`` itself."""
    exc = sys.modules.get("sqlalchemy.exc")
    if exc is not None and isinstance(e, exc.DBAPIError) and e.orig is not None:
        return e.orig  # type: ignore[no-any-return]
    return e


def _is_psycopg_error(e: BaseException) -> bool:
    mod = type(e).__module__
    return mod.startswith("psycopg")


# PostgreSQL SQLSTATE codes.
_PG_LOCKED = ("55P03", "40P01")  # lock_not_available, deadlock_detected
_PG_MISSING = ("42P01", "42703")  # undefined_table, undefined_column
_PG_CONNECTION = "08"  # connection_exception and its subclasses
_PG_BAD_CHARACTER = "22021"  # character_not_in_repertoire: a NUL sent by COPY
# What a query's text decides: class 42 (syntax error or access rule violation: 42601,
# 42883, ...), 22 (data exception: a bad cast, division by zero), 25 (invalid
# transaction state: 25006, a write in the read-only transaction), 0A (feature not
# supported: a data-modifying WITH below the top level).
_PG_USER_CLASSES = ("42", "22", "25", "0A")


def error_code(e: BaseException) -> tuple[str, str | None]:
    """(driver, code) of a driver error: ``("postgresql", SQLSTATE)``, ``("sqlite", code)``.

    The SQLite code is the primary result code as text (``"1"`` for
    SQLITE_ERROR, ``"5"`` for SQLITE_BUSY). ``("", None)`` for anything else.
    """
    orig = _driver_error(e)
    if isinstance(orig, sqlite3.Error):
        code = getattr(orig, "sqlite_errorcode", None)  # Python 3.11+
        return "sqlite", None if code is None else str(code & 0xFF)
    if _is_psycopg_error(orig):
        return "postgresql", getattr(orig, "sqlstate", None)
    return "", None


def _sqlite_missing_schema(orig: BaseException, text: str) -> bool:
    """SQLite: a missing table or column.

    SQLite reports it with the generic code SQLITE_ERROR, which a syntax error
    shares: the message's fixed prefix is the only distinction it gives.
    """
    return isinstance(orig, sqlite3.OperationalError) and text.startswith(
        ("no such table", "no such column")
    )


def nul_refused(url: str | URL) -> InvalidNameError:
    """The error for text PostgreSQL cannot bind: a NUL character (its driver refuses it)."""
    return InvalidNameError(
        f"catalog {display_url(url)}: PostgreSQL cannot store the NUL character (\\x00) that a "
        "key, dataset name or entry name here holds: remove it, or use a SQLite catalog"
    )


def translate_exception(
    e: BaseException,
    url: str | URL,
    busy_timeout: float | None = None,
    *,
    user_query: bool = False,
) -> CatalogError:
    """The CatalogError that says what ``e`` means for the user and what to do.

    Classified by the driver's error class and code: SQLSTATE on PostgreSQL,
    the result code (and, where SQLite gives nothing more specific, the
    error's fixed message prefix) on SQLite. The driver's message is scrubbed
    of ``url``'s secrets: psycopg quotes the host it could not reach, which is
    where a password with a raw ``@`` in it ends up.
    """
    orig = _driver_error(e)
    where = display_url(url)
    message = scrub(str(orig), _secrets(url)).strip()
    text = message.splitlines()[0] if message else type(orig).__name__
    driver, code = error_code(orig)
    if (driver == "sqlite" and sqlite_file.is_locked(orig)) or (
        driver == "postgresql" and code in _PG_LOCKED
    ):
        if driver == "sqlite":
            waited = f" for {busy_timeout:g} s" if busy_timeout is not None else ""
            return CatalogLockedError(
                f"catalog {where} is locked by another process (waited{waited}): wait for the "
                "other writer to finish, or open the Catalog with a longer busy_timeout"
            )
        return CatalogLockedError(
            f"catalog {where}: {text}; retry when the other writer has finished"
        )
    missing = (driver == "sqlite" and _sqlite_missing_schema(orig, text)) or (
        driver == "postgresql" and code in _PG_MISSING
    )
    if user_query:
        if driver == "sqlite" and isinstance(
            orig, (sqlite3.OperationalError, sqlite3.DataError, sqlite3.ProgrammingError)
        ):
            name = getattr(orig, "sqlite_errorname", None)
            return QueryError(f"your query failed: {text}", sqlstate=name, undefined_object=missing)
        if driver == "postgresql" and code is not None and code[:2] in _PG_USER_CLASSES:
            return QueryError(f"your query failed: {text}", sqlstate=code, undefined_object=missing)
    if driver == "postgresql" and (code == _PG_BAD_CHARACTER or "NUL (0x00)" in text):
        return nul_refused(url)
    if isinstance(orig, UnicodeEncodeError):  # a lone surrogate, bound as a parameter
        return InvalidNameError(
            f"catalog {where}: a dataset name, key or entry name here is not valid Unicode "
            f"text ({orig.reason}): decode it with errors='replace', or use another name"
        )
    if missing:
        return SchemaVersionError(
            f"catalog {where} does not have the tables this shardcat expects ({text})",
            hint=upgrade_hint(where),
        )
    if driver == "postgresql" and (
        (code or "").startswith(_PG_CONNECTION) or (code is None and "connection failed" in text)
    ):
        try:
            parsed = _sa.make_url(url)
            server = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
        except Exception:  # reported as given: the URL itself is in the message already
            server = where
        return CatalogUnreachableError(
            f"catalog {where}: cannot reach the PostgreSQL server at {server} ({text}): check "
            "that the server is running and that the URL's host, port, user and database are "
            "right (e.g. `psql` with the same values)"
        )
    if driver == "sqlite" and code == str(sqlite3.SQLITE_CANTOPEN):
        return CatalogError(
            f"catalog {where}: SQLite cannot open the file ({text}): check that its folder "
            "exists and that this user may write there"
        )
    return CatalogError(f"catalog {where}: {type(orig).__name__}: {text}")
