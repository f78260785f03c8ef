"""A PostgreSQL schema of one's own, for tests and benchmarks that share one server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def postgres_schema(server: str, prefix: str = "t") -> Iterator[str]:
    """Yield a catalog URL on ``server`` whose tables live in a fresh schema, dropped afterwards.

    The schema is chosen through libpq's ``options=-csearch_path=...``, so every
    connection the catalog opens (pools, Dask workers, subprocesses) lands in it.
    """
    import sqlalchemy as sa

    schema = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = sa.create_engine(server)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in server else "?"
        try:
            yield f"{server}{sep}options=-csearch_path%3D{schema}"
        finally:
            with admin.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
    finally:
        admin.dispose()
