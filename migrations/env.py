"""Alembic environment for the shardcat catalog.

shardcat builds the Alembic Config in code and hands over an open
connection (``config.attributes["connection"]``); with a plain ``alembic``
command line the URL comes from ``sqlalchemy.url`` instead.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from shardcat.catalog.models import Base
from shardcat.catalog.session import create_catalog_engine

config = context.config
target_metadata = Base.metadata
VERSION_TABLE = config.get_main_option("version_table") or "alembic_version"


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite cannot ALTER most things: copy-and-move tables
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError(
            "set sqlalchemy.url, or run migrations through `shardcat catalog upgrade`"
        )
    engine = create_catalog_engine(url)
    try:
        with engine.begin() as conn:
            _configure(conn)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
