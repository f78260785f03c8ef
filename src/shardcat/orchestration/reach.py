"""Can this process and the workers reach the catalog and the store? Refuse a job up front when not.

The store: :func:`refuse_unreachable_stores` lists each folder a job reads or
writes, first from this process (before a cluster starts), then from every
Dask worker process (before anything is scheduled), so that a missing
bucket, or credentials the workers lack, is one line before any work rather
than a failure of the first task after it built a shard.

The catalog:

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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CatalogError, ShardcatError, StorageCredentialsError
from ..storage.preflight import check_folder

if TYPE_CHECKING:
    from distributed import Client

    from ..reading import Catalog

__all__ = ["on_workers", "refuse_in_memory", "refuse_unreachable", "refuse_unreachable_stores"]


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


def on_workers(error: StorageCredentialsError) -> StorageCredentialsError:
    """A credentials error a worker met: the advice is about the workers, not this process.

    The client may have the credentials (its environment, its profile) and
    the workers not: storage options travel with each task, the environment
    does not.
    """
    return StorageCredentialsError(
        f"on the Dask workers: {error.message}; the workers need the credentials too, not "
        "only this process: pass them as storage options (-S key=... -S secret=..., "
        "storage_options=), which travel with each task, or set them in the workers' "
        "environment",
        path=error.path,
    )


def refuse_unreachable_stores(
    folders: Mapping[str, Mapping[str, Any] | None], client: Client | None = None
) -> None:
    """Refuse a job whose folders' stores cannot be listed: here, or (given ``client``) on its workers.

    ``folders`` maps each folder the job reads or writes to its storage
    options. Call it without a client before a cluster starts, then with
    the job's client before scheduling. Workers in this process (a threaded
    local cluster) are not asked again.

    Raises
    ------
    StorageError
        What :func:`~shardcat.storage.preflight.check_folder` raises; a
        credentials error a worker met says it is the workers'.
    """
    asked = {url: dict(options or {}) for url, options in folders.items()}
    if client is None:
        for url, options in asked.items():
            check_folder(url, options)
        return
    workers = client.scheduler_info().get("workers", {})
    if not asked or all(address.startswith("inproc://") for address in workers):
        return
    answers = client.run(_check_on_worker, asked)
    for answer in answers.values():
        if isinstance(answer, StorageCredentialsError):
            raise on_workers(answer) from answer
        if isinstance(answer, BaseException):
            raise answer


def _check_on_worker(folders: dict[str, dict[str, Any]]) -> ShardcatError | None:
    """Run on a worker: its error as a value (Dask would print a raised one in the worker's log)."""
    try:
        for url, options in folders.items():
            check_folder(url, options)
    except ShardcatError as e:
        return e
    return None
