"""Schema versions: Alembic migrations from the top-level ``migrations/`` folder.

The folder ships in the wheel as the ``shardcat.migrations`` package
(``pyproject.toml`` maps the package to the folder). ``shardcat catalog
upgrade`` calls :func:`upgrade`; a :class:`~shardcat.catalog.SqlCatalog` calls
:func:`ensure_schema`, which creates an empty catalog at the newest revision
and refuses, with a message naming the upgrade command, one at another.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from ..errors import CatalogError, SchemaVersionError
from .session import (
    create_catalog_engine,
    display_url,
    normalize_url,
    translate_errors,
    upgrade_hint,
)

if TYPE_CHECKING:
    import sqlalchemy as _sa
    from alembic.config import Config
    from sqlalchemy import Connection, Engine
else:
    _sa = lazy_module("sqlalchemy")

# Alembic and the ORM models load only where a migration, a comparison or a
# creation needs them: opening a catalog at head checks one row.

__all__ = [
    "VERSION_TABLE",
    "alembic_config",
    "check",
    "current",
    "downgrade",
    "ensure_schema",
    "head_revision",
    "migrations_dir",
    "upgrade",
    "verify_schema",
]

VERSION_TABLE = "alembic_version"

HEAD_REVISION = "0019"
"""The newest revision in ``migrations/versions`` (a test checks it is Alembic's head).

Opening a catalog compares the stamped revision with it, without reading the
migration scripts: a new migration must update it.
"""


def migrations_dir() -> Path:
    """The folder holding ``env.py`` and ``versions/``.

    Raises
    ------
    CatalogError
        If neither the installed package nor the checkout has it.
    """
    try:
        found = Path(str(importlib.resources.files("shardcat.migrations")))
        if (found / "env.py").is_file():
            return found
    except (ModuleNotFoundError, TypeError):
        pass
    checkout = Path(__file__).resolve().parents[3] / "migrations"
    if (checkout / "env.py").is_file():
        return checkout
    raise CatalogError(
        "shardcat's migration scripts are missing from this installation; reinstall shardcat"
    )


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config built in code (no alembic.ini needed)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("version_table", VERSION_TABLE)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


@functools.lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision this version of shardcat knows (read from the migration scripts)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:
        raise CatalogError("shardcat's migration scripts define no revision; reinstall shardcat")
    return head


@functools.lru_cache(maxsize=1)
def known_revisions() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())
    return frozenset(s.revision for s in script.walk_revisions())


@contextmanager
def engine_of(target: str | Engine) -> Iterator[Engine]:
    """``target`` itself, or an engine on the URL, disposed after."""
    if not isinstance(target, str):
        yield target
        return
    engine = create_catalog_engine(target)
    try:
        yield engine
    finally:
        engine.dispose()


def upgrade(target: str | Engine, revision: str = "head") -> tuple[str | None, str | None]:
    """Apply migrations up to ``revision``; returns (revision before, revision after).

    Raises
    ------
    CatalogError
        If a migration fails (the transaction is rolled back where the backend can).
    """
    with engine_of(target) as engine, translate_errors(engine.url):
        from alembic import command

        with engine.begin() as conn:
            _require_schema(conn, engine)
            before = _current(conn)
            command.upgrade(alembic_config(conn), revision)
            after = _current(conn)
        return before, after


def downgrade(target: str | Engine, revision: str) -> tuple[str | None, str | None]:
    """Revert migrations down to ``revision`` (``"base"`` drops every table).

    Raises
    ------
    CatalogError
        If a migration fails.
    """
    with engine_of(target) as engine, translate_errors(engine.url):
        from alembic import command

        with engine.begin() as conn:
            before = _current(conn)
            command.downgrade(alembic_config(conn), revision)
            after = _current(conn)
        return before, after


def current(target: str | Engine) -> str | None:
    """The catalog's revision, or None if it has never been migrated.

    Raises
    ------
    CatalogError
        If the database cannot be read.
    """
    if isinstance(target, str):
        url = normalize_url(target)
        path = url.database
        if (
            url.get_backend_name() == "sqlite"
            and path not in (None, "", ":memory:")
            and not os.path.exists(path)
        ):
            return None  # do not create an empty file just to look
    with engine_of(target) as engine, translate_errors(engine.url), engine.connect() as conn:
        return _current(conn)


def _current(conn: Connection) -> str | None:
    from alembic.migration import MigrationContext

    ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return ctx.get_current_revision()


def check(target: str | Engine) -> list[Any]:
    """Differences between the models and the database (empty when they agree).

    Uses Alembic's autogenerate comparison, with column types compared. A
    partitioned ``records`` (:mod:`.partitions`) is the models' table: its
    partitions and its plain index in place of the primary key are not drift.
    """
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from .models import Base

    with engine_of(target) as engine, translate_errors(engine.url), engine.connect() as conn:
        layout = _partitioned_layout(conn)
        ctx = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "render_as_batch": True,
                "version_table": VERSION_TABLE,
                "include_object": lambda obj, name, kind, reflected, other: (
                    not (reflected and other is None and name in layout)
                ),
            },
        )
        return list(compare_metadata(ctx, Base.metadata))


def _partitioned_layout(conn: Connection) -> frozenset[str]:
    """A partitioned ``records``' partitions and plain index: the layout, not drift (:mod:`.partitions`).

    The models declare the plain table (its primary key Alembic does not compare).
    """
    if conn.dialect.name != "postgresql":
        return frozenset()
    from .partitions import PLAIN_INDEX

    names = conn.exec_driver_sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass('records') AND c.relkind = 'r'"
    ).scalars()
    found = frozenset(names)
    return found | {PLAIN_INDEX} if found else found


def verify_schema(engine: Engine) -> str:
    """Check the catalog is at the revision this shardcat needs; return it.

    Raises
    ------
    SchemaVersionError
        If it is older (run ``shardcat catalog upgrade``), newer (upgrade
        shardcat) or not a shardcat catalog at all.
    """
    with translate_errors(engine.url), engine.connect() as conn:
        return _verify(conn, engine)


def _verify(conn: Connection, engine: Engine) -> str:
    where = display_url(engine.url)
    head = head_revision()
    rev = _current(conn)
    if rev == head:
        return rev
    if rev is None:
        _require_schema(conn, engine)
        tables = set(_sa.inspect(conn).get_table_names())
        detail = "has no schema revision" if tables else "is empty"
        raise SchemaVersionError(
            f"catalog {where} {detail}; create or upgrade its tables", hint=upgrade_hint(where)
        )
    if rev not in known_revisions():
        raise SchemaVersionError(
            f"catalog {where} is at schema revision {rev!r}, which this shardcat does not know "
            f"(its newest is {head!r}): it was upgraded by a newer shardcat; upgrade shardcat"
        )
    raise SchemaVersionError(
        f"catalog {where} is at schema revision {rev!r}, this shardcat needs {head!r}",
        hint=upgrade_hint(where, backup=True),
    )


def ensure_schema(engine: Engine, *, create: bool = True) -> str:
    """Verify the schema; a catalog with no tables at all is first created at head.

    Creation runs ``create_all``, partitions ``records`` on PostgreSQL if the
    ``record_partitions`` setting says so (:mod:`.partitions`), creates the views (:mod:`.views`) and
    stamps the head revision in one transaction (the Alembic cookbook's
    recipe); ``test_migrations.py`` checks it yields the same schema as
    running every migration.

    Raises
    ------
    SchemaVersionError
        See :func:`verify_schema`.
    """
    with translate_errors(engine.url):
        with engine.connect() as conn:
            if _stamped(conn) == HEAD_REVISION:
                return HEAD_REVISION
            empty = not _sa.inspect(conn).get_table_names()
        if create and empty:
            from .models import Base
            from .views import create_views

            with engine.execution_options(shardcat_write=True).begin() as conn:
                _require_schema(conn, engine)
                if conn.dialect.name == "postgresql":
                    # Many processes may open a new catalog at once (a Dask job's
                    # workers): one creates it, the others wait and find it made.
                    conn.execute(
                        _sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _CREATE_LOCK}
                    )
                if not _sa.inspect(conn).get_table_names():  # still empty under the write lock
                    Base.metadata.create_all(conn)
                    _partition_records(conn)
                    create_views(conn)
                    _stamp(conn, head_revision())
        return verify_schema(engine)


def _partition_records(conn: Connection) -> None:
    """A new catalog's ``records`` gets the ``record_partitions`` setting's partitions.

    The one layout of :mod:`.partitions` (migration 0017 and ``shardcat
    catalog partition`` call the same function), made from the empty table
    ``create_all`` made. PostgreSQL only; the setting is checked on SQLite too.
    """
    from .partitions import configured_partitions, set_partitions

    partitions = configured_partitions()
    if conn.dialect.name != "postgresql" or not partitions:
        return
    cur: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        set_partitions(cur, partitions, by="creating the catalog", again="create it again")
    finally:
        cur.close()


def _stamped(conn: Connection) -> str | None:
    """The one revision stamped in the version table; None if there is no table, or not one row.

    One query, no Alembic: the check every open makes. Anything else (no
    table, several heads) is left to :func:`verify_schema`, which says what to do.
    """
    try:
        rows = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").all()
    except _sa.exc.DBAPIError:
        conn.rollback()  # PostgreSQL: the failed statement ended the transaction
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def _require_schema(conn: Connection, engine: Engine) -> None:
    """On PostgreSQL, fail clearly when no schema of the search path exists.

    A URL may name a schema (``?options=-csearch_path%3Dmyschema``); shardcat
    creates tables, never schemas. Without this check PostgreSQL says only
    "no schema has been selected to create in", and the catalog looks empty.

    Raises
    ------
    SchemaVersionError
        No schema on the connection's search path exists.
    """
    if conn.dialect.name != "postgresql":
        return
    if conn.execute(_sa.text("SELECT current_schema()")).scalar() is not None:
        return
    path = conn.execute(_sa.text("SHOW search_path")).scalar()
    first = str(path).split(",")[0].strip().strip('"') or "myschema"
    raise SchemaVersionError(
        f"catalog {display_url(engine.url)}: no schema of its search path ({path}) exists; "
        f'shardcat creates tables, not schemas: create it once (CREATE SCHEMA "{first}"; as a '
        "user allowed to), then run `shardcat catalog upgrade`"
    )


_CREATE_LOCK = 0x73686172_64636174 & 0x7FFF_FFFF_FFFF_FFFF  # "shardcat"


def _stamp(conn: Connection, revision: str) -> None:
    from alembic import command

    command.stamp(alembic_config(conn), revision)
