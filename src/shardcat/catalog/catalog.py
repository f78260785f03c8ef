"""The Catalog: datasets, shards, jobs and key lookups over one SQL database."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from sqlalchemy import delete, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .._types import StorageOptions
from ..errors import (
    CatalogError,
    DatasetExistsError,
)
from ..format import Record
from ..format.spec import FORMAT_VERSION
from ..storage import redact
from .lookup import LayoutCache, Lookup, fork_generation, unknown_dataset
from .maintenance import reindex_shards, verify_dataset
from .migrate import ensure_schema
from .models import Dataset, Job, Layout, LayoutEntry, Shard
from .models import Record as RecordRow
from .results import BatchResult, CatalogReport, DatasetInfo, Location, ShardRow
from .rows import dataset_info
from .session import (
    DEFAULT_BUSY_TIMEOUT,
    create_catalog_engine,
    default_url,
    display_url,
    unit_of_work,
)
from .writes import CatalogWrites

__all__ = ["Catalog"]

_NO_SYNC = {"synchronize_session": False}


class Catalog(CatalogWrites):
    """A SQL catalog of datasets, their shards and every record's location.

    Parameters
    ----------
    url:
        SQLAlchemy URL of the catalog database: ``sqlite:///shardcat.db``
        (the default, or ``$SHARDCAT_CATALOG``), ``sqlite://`` for memory,
        ``postgresql+psycopg://user@host/db``.
    storage_options:
        fsspec options used to read shards (credentials, endpoint, ...);
        never stored in the catalog.
    busy_timeout:
        SQLite: seconds to wait for another writer before CatalogLockedError.
    create:
        Create the tables when the database is empty (else SchemaVersionError).
    max_open_shards:
        Local shard files each thread keeps open for lookups.

    Raises
    ------
    SchemaVersionError
        If the catalog's schema is not the one this shardcat needs.
    CatalogError
        If the database cannot be opened.

    Examples
    --------
    >>> cat = Catalog("sqlite:///shardcat.db")  # doctest: +SKIP
    >>> cat.create_dataset("train", "s3://bucket/train/")  # doctest: +SKIP
    >>> cat.register_shard("train", writer.close())  # doctest: +SKIP
    >>> cat.get("train", "img/00412345")["jpg"].data  # doctest: +SKIP
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        storage_options: StorageOptions | None = None,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
        max_open_shards: int = 64,
    ) -> None:
        self._url = str(url or default_url())
        self.storage_options = dict(storage_options or {})
        self.busy_timeout = busy_timeout
        self.max_open_shards = max_open_shards
        self.engine = create_catalog_engine(self._url, busy_timeout=busy_timeout)
        try:
            self.revision = ensure_schema(self.engine, create=create)
        except BaseException:
            self.engine.dispose()
            raise
        self._local = threading.local()
        self._lookups: list[Lookup] = []
        self._lock = threading.Lock()
        self._layouts = LayoutCache()
        self._closed = False
        self._generation = fork_generation()

    @property
    def url(self) -> str:
        """The catalog URL with any password hidden."""
        return display_url(self._url)

    def __repr__(self) -> str:
        return f"Catalog({self.url!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Dask ships catalogs to workers: reconnect there instead of pickling connections.
        return (_reopen, (self._url, self.storage_options, self.busy_timeout, self.max_open_shards))

    # --- units of work ---------------------------------------------------

    def _after_fork(self) -> None:
        # A forked child (Dask's multiprocessing scheduler) must not use the
        # parent's connections: drop them without closing them under the parent.
        if self._generation != fork_generation():
            self._generation = fork_generation()
            self.engine.dispose(close=False)
            self._local = threading.local()
            self._lookups = []
            self._lock = threading.Lock()

    def _uow(self, *, write: bool = False) -> Any:
        if self._closed:
            raise CatalogError(f"catalog {self.url} is closed")
        self._after_fork()
        return unit_of_work(self.engine, write=write, busy_timeout=self.busy_timeout)

    def _lookup(self) -> Lookup:
        lookup: Lookup | None = getattr(self._local, "lookup", None)
        if lookup is None or lookup.generation != fork_generation():
            self._after_fork()
            if self._closed:
                raise CatalogError(f"catalog {self.url} is closed")
            lookup = Lookup(self.engine, self.storage_options, self._layouts, self.max_open_shards)
            self._local.lookup = lookup
            with self._lock:
                self._lookups.append(lookup)
        return lookup

    def _dataset(self, session: Session, name: str) -> Dataset:
        row = session.execute(select(Dataset).where(Dataset.name == name)).scalar_one_or_none()
        if row is None:
            raise unknown_dataset(
                name, list(session.execute(select(Dataset.name).order_by(Dataset.name)).scalars())
            )
        return row

    # --- datasets --------------------------------------------------------

    def create_dataset(
        self,
        name: str,
        root_url: str,
        properties: dict[str, Any] | None = None,
        *,
        exist_ok: bool = False,
    ) -> DatasetInfo:
        """Create a dataset (or return the existing one with ``exist_ok``).

        Raises
        ------
        DatasetExistsError
            If it exists and ``exist_ok`` is false.
        """
        if not name or len(name) > 255:
            raise ValueError("a dataset name is 1 to 255 characters")
        with self._uow(write=True) as s:
            existing = s.execute(select(Dataset).where(Dataset.name == name)).scalar_one_or_none()
            if existing is None:
                row = Dataset(
                    name=name,
                    root_url=redact(root_url),
                    format_major=FORMAT_VERSION[0],
                    format_minor=FORMAT_VERSION[1],
                    properties=dict(properties or {}),
                )
                try:
                    # Another process may create the same name at the same moment
                    # (PostgreSQL): the loser sees its row, as if it had come first.
                    with s.begin_nested():
                        s.add(row)
                        s.flush()
                except IntegrityError:  # the savepoint's rollback expunged the row
                    existing = s.execute(select(Dataset).where(Dataset.name == name)).scalar_one()
                else:
                    s.refresh(row)
                    return dataset_info(row)
            if exist_ok:
                return dataset_info(existing)
            raise DatasetExistsError(
                f"dataset {name!r} exists already (root {existing.root_url}); pick another name, "
                "pass exist_ok=True, or delete it first"
            )

    def dataset(self, name: str) -> DatasetInfo:
        """The dataset's row.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            return dataset_info(self._dataset(s, name))

    def datasets(self) -> list[DatasetInfo]:
        """Every dataset, by name."""
        with self._uow() as s:
            return [
                dataset_info(d) for d in s.execute(select(Dataset).order_by(Dataset.name)).scalars()
            ]

    def delete_dataset(self, name: str, *, missing_ok: bool = False) -> None:
        """Remove a dataset and all its rows from the catalog (shard files are not touched).

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset and ``missing_ok`` is false.
        """
        with self._uow(write=True) as s:
            row = s.execute(select(Dataset).where(Dataset.name == name)).scalar_one_or_none()
            if row is None:
                if missing_ok:
                    return
                self._dataset(s, name)
                return
            ds = row.id
            layouts = select(Layout.id).where(Layout.dataset_id == ds)
            for stmt in (
                delete(RecordRow).where(RecordRow.dataset_id == ds),
                delete(LayoutEntry).where(LayoutEntry.layout_id.in_(layouts)),
                delete(Layout).where(Layout.dataset_id == ds),
                delete(Shard).where(Shard.dataset_id == ds),
                delete(Job).where(Job.dataset_id == ds),
                delete(Dataset).where(Dataset.id == ds),
            ):
                s.execute(stmt, execution_options=_NO_SYNC)

    # --- lookups ---------------------------------------------------------

    def get(self, dataset: str, key: str, entries: Iterable[str] | None = None) -> Record:
        """The record with exactly this key: one SQL query, then one ranged read.

        Parameters
        ----------
        dataset:
            The dataset's name.
        key:
            The key (compared exactly: a hash collision never returns another record).
        entries:
            Read only these entries' bytes (the rest of the record is not read).

        Raises
        ------
        KeyNotFoundError
            If no committed record has this key.
        DatasetNotFoundError
            If there is no such dataset.
        ShardNotFoundError
            If the shard the catalog names is gone.
        ChecksumError, FormatError
            If the shard changed since it was registered.
        """
        return self._lookup().get(dataset, key, entries)

    def get_many(
        self, dataset: str, keys: Iterable[str], entries: Iterable[str] | None = None
    ) -> BatchResult:
        """Records for many keys, in input order: one query, then coalesced concurrent reads.

        Missing keys are reported in ``result.missing`` (``None`` in their
        places); call ``result.raise_for_missing()`` to make them an error.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        ShardNotFoundError, ChecksumError, FormatError
            As for :meth:`get`.
        """
        return self._lookup().get_many(dataset, keys, entries)

    def locate(self, dataset: str, key: str) -> Location:
        """Where the record is: shard URL, byte offset and length (one query, no read).

        Raises
        ------
        KeyNotFoundError, DatasetNotFoundError
            As for :meth:`get`.
        """
        return self._lookup().locate(dataset, key)

    # --- maintenance -----------------------------------------------------

    def reindex(
        self, dataset: str, urls: str | Iterable[str], *, workers: int = 8
    ) -> list[ShardRow]:
        """Rebuild the rows of these shards from their footers alone, committed in one transaction.

        Rows already registered under a URL are replaced (the shard keeps its job).

        Raises
        ------
        ShardNotFoundError, FormatError
            If a shard is missing or unreadable (nothing changes).
        DuplicateKeyError
            If the shards' keys collide with each other or with other committed shards.
        """
        return reindex_shards(self, dataset, urls, workers=workers)

    def verify(
        self,
        dataset: str,
        *,
        workers: int = 4,
        on_shard: Callable[[str, int], None] | None = None,
    ) -> CatalogReport:
        """Check every committed shard against the catalog, and every CRC; report each disagreement.

        ``on_shard(url, total)`` is called as each shard's check finishes
        (from worker threads), for progress bars.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        return verify_dataset(self, dataset, workers=workers, on_shard=on_shard)

    def analyze(self) -> None:
        """Refresh the database's planner statistics (after registering many records).

        PostgreSQL plans batch lookups from them; autovacuum refreshes them
        too, but only some time after a bulk load. Runs ``ANALYZE`` there and
        ``PRAGMA optimize`` on SQLite.
        """
        with self._uow(write=True) as s:
            if self.engine.dialect.name == "postgresql":
                s.execute(text("ANALYZE records"))
                s.execute(text("ANALYZE shards"))
            else:
                s.execute(text("PRAGMA optimize"))

    # --- lifetime --------------------------------------------------------

    def close(self) -> None:
        """Close lookup connections, open shard files and the engine (idempotent)."""
        if self._closed:
            return
        self._closed = True
        with self._lock:
            lookups, self._lookups = self._lookups, []
        for lookup in lookups:
            lookup.close()
        self._local = threading.local()
        self.engine.dispose()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _reopen(
    url: str, storage_options: dict[str, Any], busy_timeout: float, max_open: int
) -> Catalog:
    return Catalog(
        url, storage_options=storage_options, busy_timeout=busy_timeout, max_open_shards=max_open
    )
