"""Can the workers reach the catalog? Refuse a job up front when they cannot.

Partition tasks stage their shards in the catalog themselves (see
``tasks.py``), so every worker opens the catalog's URL. That works for a
server database (PostgreSQL) from anywhere, and for a SQLite file from
workers on the client's machine: ``Catalog`` resolves a relative SQLite path
against the client's working folder, so a worker started elsewhere opens
the same file. It cannot work for an in-memory SQLite database (each
process would open a new, empty one) nor for a SQLite file on another
machine (and SQLite must not be shared over a network filesystem: its locks
are not reliable there). Rather than register from the client for SQLite,
which would give up the staging protocol's guarantees for late and retried
tasks, such jobs are refused before anything is written.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING

from ..errors import CatalogError

if TYPE_CHECKING:
    from distributed import Client

    from ..reading import Catalog

__all__ = ["refuse_in_memory", "refuse_unreachable"]


def _sqlite_database(cat: Catalog) -> str | None:
    """The SQLite database of a catalog (``""`` for memory), or ``None`` for a server."""
    url = cat.engine.url
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database or ""
    if db in ("", ":memory:") or "mode=memory" in db or url.query.get("mode") == "memory":
        return ""
    return str(db)


def _this_host() -> str:
    """The client's host name (a function of its own so that a test can move the client)."""
    return socket.gethostname()


def refuse_in_memory(cat: Catalog) -> None:
    """Refuse an in-memory catalog: a worker cannot open this process's memory.

    Raises
    ------
    CatalogError
        The catalog is an in-memory SQLite database.
    """
    if _sqlite_database(cat) == "":
        raise CatalogError(
            f"catalog {cat.url} is an in-memory SQLite database: the Dask workers that write "
            "and stage the shards would each open a new, empty one. Use a file "
            "(Catalog('sqlite:///catalog.db')) or PostgreSQL for shardcat.write"
        )


def refuse_unreachable(cat: Catalog, client: Client) -> None:
    """Refuse a SQLite file catalog when a worker runs on another machine.

    Raises
    ------
    CatalogError
        A worker's host name is not the client's.
    """
    if not _sqlite_database(cat):
        return
    here = _this_host()
    hosts = client.run(socket.gethostname)  # one call per worker
    elsewhere = sorted({h for h in hosts.values() if h != here})
    if elsewhere:
        raise CatalogError(
            f"catalog {cat.url} is a SQLite file on this machine ({here}), but Dask workers run "
            f"on {', '.join(elsewhere[:5])}: they cannot open it (and SQLite must not be shared "
            "over a network filesystem). Use a PostgreSQL catalog "
            "(--catalog postgresql+psycopg://user@host/db), see docs/CLUSTER.md"
        )
