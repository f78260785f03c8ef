"""The public :class:`Catalog`: the SQL catalog, plus reading records by key.

It adds to :class:`~shardcat.catalog.catalog.SqlCatalog` what needs the
shard files: the per-thread lookups (:mod:`.lookup`: one SQL query, then
one ranged read; the point lookup of :mod:`.point`, compiled or not), rebuilding
rows from footers (``reindex``) and checking files against the catalog
(``verify``, :mod:`.checks`), and what another process needs to open the
same catalog (:class:`CatalogHandle`). Its lookups close with it, with
their thread, and are dropped (never closed) in a forked child.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._forks import fork_generation
from .._lazy import lazy_module
from .._types import StorageOptions
from ..catalog import fence
from ..catalog.catalog import SqlCatalog
from ..catalog.history import Version
from ..catalog.results import (
    BatchResult,
    CatalogReport,
    DatasetSummary,
    DescribedBatch,
    EntryInfo,
    Location,
    Problem,
    ShardRow,
)
from ..catalog.session import DEFAULT_BUSY_TIMEOUT, display_url
from ..format import Record, recordcodec
from ..storage import expand_braces, resolve_max_open, resolve_remote_max_gap
from . import listing
from .dataset import Dataset
from .keyread import KeyReaderOf
from .lookup import LayoutCache, Lookup

# What reindex and verify need (the ORM models, the shard reader) loads on
# first use: opening a catalog and looking a key up needs none of it.
if TYPE_CHECKING:
    from ..catalog import maintenance as _maintenance
    from ..catalog.hashkeys import KeyReader
    from ..catalog.manifests import DatasetHistory
    from . import checks as _checks
    from . import history as _history
    from .history import HistoryRebuild, HistoryWrite
else:
    _maintenance = lazy_module("shardcat.catalog.maintenance")
    _checks = lazy_module("shardcat.reading.checks")
    _history = lazy_module("shardcat.reading.history")

__all__ = ["Catalog", "CatalogHandle", "shards_to_verify", "verify_shards"]


@dataclass(frozen=True, slots=True)
class CatalogHandle:
    """What another process needs to open the same catalog: small and picklable.

    Dask tasks get one instead of a :class:`Catalog` (whose engine and
    connections cannot travel) and open it once per worker process. It
    carries the URL with its password, since workers must connect, and the
    storage options: neither is ever shown (``repr`` hides them).

    Examples
    --------
    >>> handle = cat.handle()  # doctest: +SKIP
    >>> with handle.open() as worker_cat:  # doctest: +SKIP
    ...     worker_cat.register_shard("train", info, job=job_id)
    """

    url: str = field(repr=False)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False, hash=False)
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT
    max_open_shards: int | None = None
    remote_max_gap: int | None = None

    def open(self) -> Catalog:
        """A new :class:`Catalog` on this URL, with these options.

        Raises
        ------
        SchemaVersionError, CatalogError
            As :class:`Catalog` does.
        """
        return Catalog(
            self.url,
            storage_options=self.storage_options,
            busy_timeout=self.busy_timeout,
            max_open_shards=self.max_open_shards,
            remote_max_gap=self.remote_max_gap,
        )

    def __repr__(self) -> str:
        return f"CatalogHandle({display_url(self.url)!r})"


class Catalog(SqlCatalog):
    """A SQL catalog of datasets, their shards and every record's location.

    Parameters
    ----------
    url:
        SQLAlchemy URL of the catalog database: ``sqlite:///shardcat.db``
        (the default, or ``$SHARDCAT_CATALOG``), ``sqlite://`` for memory,
        ``postgresql+psycopg://user@host/db``. A relative SQLite path is
        resolved against the working folder now, so that Dask workers open
        the same file. ``shardcat.write`` refuses ``sqlite://`` (its workers
        cannot see this process's memory).
    storage_options:
        fsspec options used to read shards (credentials, endpoint, ...);
        never stored in the catalog.
    busy_timeout:
        SQLite: seconds to wait for another writer before CatalogLockedError.
    create:
        Create the tables when the database is empty (else SchemaVersionError).
    max_open_shards:
        Local shard files each thread keeps open for lookups (a lookup in a
        file not open pays an ``open``): a count, or ``"auto"``; by default
        the ``max_open_shards`` setting (``$SHARDCAT_MAX_OPEN_SHARDS``,
        ``auto``: half the process's open-file limit, within 64-4096); the
        threads' lookups share half that limit whatever this says.
    remote_max_gap:
        Batch lookups (``get_many``) on object stores read through gaps of
        up to this many bytes between wanted records rather than send another
        request: bytes or a size such as ``"256KiB"``, 0 for no gaps. By
        default ``$SHARDCAT_REMOTE_MAX_GAP``, else ``auto``: derived per store
        from its measured latency and bandwidth (what one request costs in
        transfer, shared by the requests in flight), and the gaps a batch reads
        through add at most 0.75 x its records' bytes (the cost model and
        measurements: ``docs/CATALOG.md``, batch lookups; ``storage/gap.py``).
        Local shards merge gaps of up to 8 KiB.

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
        max_open_shards: int | str | None = None,
        remote_max_gap: int | str | None = None,
    ) -> None:
        self.storage_options = dict(storage_options or {})
        # Resolved now: a bad value fails here, and workers get the same numbers.
        self.max_open_shards = resolve_max_open(max_open_shards)
        self.remote_max_gap = resolve_remote_max_gap(remote_max_gap)
        super().__init__(url, busy_timeout=busy_timeout, create=create)
        self._local = threading.local()
        # Every thread's lookup, to close with the catalog (a thread's own goes when it ends).
        self._lookups: set[Lookup] = set()
        self._layouts = LayoutCache()

    def _key_reader(self) -> KeyReader:
        # docstring inherited
        return KeyReaderOf(self.storage_options)

    @classmethod
    @contextmanager
    def opened(cls, catalog: Catalog | str | None, **options: Any) -> Iterator[Catalog]:
        """``catalog`` itself if it is a Catalog, else one opened on that URL and closed at exit.

        What every function taking "a Catalog or its URL" enters: it closes
        only what it opened, so a caller's Catalog stays open and usable.

        Parameters
        ----------
        catalog:
            A :class:`Catalog` (yielded as it is, never closed), or its URL
            (None: the default catalog, as for ``Catalog()``).
        **options:
            Passed to :class:`Catalog` when a URL is opened (``storage_options``,
            ``create``, ...); ignored for a Catalog.

        Raises
        ------
        SchemaVersionError, CatalogError
            As :class:`Catalog` does, when a URL is opened.

        Examples
        --------
        >>> with Catalog.opened(catalog_or_url) as cat:  # doctest: +SKIP
        ...     cat.datasets()
        """
        if isinstance(catalog, Catalog):
            yield catalog
            return
        with cls(None if catalog is None else str(catalog), **options) as cat:
            yield cat

    def handle(self) -> CatalogHandle:
        """What a worker process needs to open this catalog (URL with password, options).

        Pass it to Dask tasks instead of the Catalog; never log its ``url``.
        """
        return CatalogHandle(
            self._url,
            dict(self.storage_options),
            self.busy_timeout,
            self.max_open_shards,
            self.remote_max_gap,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Dask ships catalogs to workers: reconnect there instead of pickling connections.
        return (_reopen, (self.handle(),))

    def dataset(self, name: str) -> Dataset:
        """A handle on the dataset: its reads, queries and versions with the name bound.

        As pyiceberg's ``load_table``: the name is checked now (one query).
        The dataset's row is :meth:`info`.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        return Dataset(self, self.info(name))

    def _forget_parent(self) -> None:
        # A forked child's lookups are its own: the parent's stay the parent's to close.
        self._local = threading.local()
        self._lookups = set()

    def _lookup(self) -> Lookup:
        lookup: Lookup | None = getattr(self._local, "lookup", None)
        if lookup is None or lookup.generation != fork_generation():
            self._after_fork()
            if self._closed:
                raise self._closed_error()
            with fence.shared():
                lookup = Lookup(
                    self.sqlite_file or self.engine,
                    self.storage_options,
                    self._layouts,
                    self.max_open_shards,
                    # Resolved when the catalog opened: None is "auto", not "the setting".
                    "auto" if self.remote_max_gap is None else self.remote_max_gap,
                )
                fence.register(lookup)
            with self._lock:
                closed = self._closed
                if not closed:
                    self._lookups.add(lookup)
            if closed:  # closed while it opened: close() did not see it
                with lookup.gate:
                    lookup.close()
                raise self._closed_error()
            self._local.lookup = lookup
            # The lookup (connection, files, batch buffers) goes when the thread does.
            self._local.end = _ThreadEnd(lookup, self._lookups)
        return lookup

    # --- lookups ---------------------------------------------------------

    def get(
        self,
        dataset: str,
        key: str,
        entries: Iterable[str] | None = None,
        *,
        version: Version = None,
    ) -> Record:
        """The record with exactly this key: one SQL query, then one ranged read.

        Parameters
        ----------
        dataset:
            The dataset's name.
        key:
            The key (compared exactly: a hash collision never returns another record).
        entries:
            Read only these entries' bytes (the rest of the record is not read).
        version:
            A kept version's number or a tag (default: the latest version).

        Raises
        ------
        KeyNotFoundError
            If no committed record has this key (at that version).
        VersionNotFoundError
            If the dataset has no such kept version or tag.
        DatasetNotFoundError
            If there is no such dataset.
        ShardNotFoundError
            If the shard the catalog names is gone.
        ChecksumError, FormatError
            If the shard changed since it was registered.
        """
        # _lookup()'s fast case inline: one frame less on the point lookup's path.
        lookup: Lookup | None = getattr(self._local, "lookup", None)
        if lookup is None or lookup.generation != fork_generation():
            lookup = self._lookup()
        if entries is None and version is None and dataset not in lookup.folder_datasets:
            # The point lookup (point.py): compiled, its Python twin (which
            # hands the rows it fetched to the Python path: a missing key
            # raises here), or none; None: not handled there, or closed. The
            # compiled one fences itself (_cpoint.c, "Lifetimes"), the twin
            # takes the gate: none here. It never reads a folder's files:
            # a folder dataset's lookups skip it (Lookup.folder_datasets).
            # A hash-only dataset's it reads by its candidates' statement.
            record = lookup.fast_get(dataset, key, recordcodec.decode_spanned)
            if record is not None:
                return record
        # Held for the call: close() and a fork wait for it (Lookup.gate).
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return lookup.get(dataset, key, entries, version)

    def count(self, dataset: str, *, prefix: str | None = None) -> int:
        """How many keys the dataset's latest version has (starting with ``prefix``), from the key index.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        KeyOrderUnavailableError
            ``prefix`` and a dataset without a key-order index (``keys="unsorted"``; its
            subclass ``KeyTextUnavailableError`` for ``keys="hash"``).
        """
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return listing.count_keys(lookup.raw, dataset, prefix or None)

    def dataset_summaries(self) -> list[DatasetSummary]:
        """Every dataset, by name, with the shards, records and bytes its latest version reads (one query)."""
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return listing.dataset_summaries(lookup.raw)

    def get_many(
        self,
        dataset: str,
        keys: Iterable[str],
        entries: Iterable[str] | None = None,
        *,
        version: Version = None,
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
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return lookup.get_many(dataset, keys, entries, version)

    def locate(self, dataset: str, key: str, *, version: Version = None) -> Location:
        """Where the record is: shard URL, byte offset and length (one query, no read).

        Raises
        ------
        KeyNotFoundError, DatasetNotFoundError
            As for :meth:`get`.
        """
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return lookup.locate(dataset, key, version)

    def describe(self, dataset: str, key: str, *, version: Version = None) -> list[EntryInfo]:
        """The record's entries, in record order, from its catalog row: one query, no read.

        Each :class:`~shardcat.catalog.EntryInfo` has the entry's name,
        content type, codec, and the size and CRC32C of its stored bytes (its
        bytes, when not compressed): what a listing of a sample needs
        without reading a large entry.

        Raises
        ------
        KeyNotFoundError, VersionNotFoundError, DatasetNotFoundError
            As for :meth:`get`.
        """
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return lookup.describe(dataset, key, version)

    def describe_many(
        self,
        dataset: str,
        keys: Iterable[str],
        *,
        want: Callable[[EntryInfo], bool] = lambda info: False,
        version: Version = None,
    ) -> DescribedBatch:
        """Many samples described from their catalog rows, reading only the entries ``want`` picks.

        One query for every key, then the picked entries' bytes in one
        coalesced batch of reads, each checked: a page of samples lists its
        videos without reading them, and reads its captions. A record whose
        read bytes do not match its row is that key's error
        (:attr:`~shardcat.catalog.results.DescribedBatch.errors`), not the
        batch's.

        Raises
        ------
        DatasetNotFoundError, VersionNotFoundError
            As for :meth:`get_many`.
        InvalidKeyError
            If a key is not a valid key.
        StorageError, ShardNotFoundError
            If the store fails the batch's reads.
        """
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return lookup.describe_many(dataset, keys, want, version)

    def read_part(
        self,
        dataset: str,
        key: str,
        entry: str,
        start: int,
        end: int,
        *,
        version: Version = None,
    ) -> memoryview:
        """Bytes ``[start, end)`` of one uncompressed entry: one query, one ranged read of them alone.

        For a part of a large entry (a window of a video, a slice of an array
        that an HTTP ``Range`` asks for), which :meth:`get` would read whole.
        The CRC32C covers the whole entry, so a part is **not checked**:
        read the entry with :meth:`get` when its bytes must be proven.

        Raises
        ------
        KeyNotFoundError, VersionNotFoundError, DatasetNotFoundError
            As for :meth:`get`.
        EntryNotFoundError
            If the record has no such entry.
        ValueError
            If the entry is compressed (its stored bytes are not its bytes:
            read it whole), or ``[start, end)`` is not within it.
        StorageError, ShardNotFoundError
            If the shard cannot be read.
        """
        lookup = self._lookup()
        with lookup.gate:
            if lookup.closed:
                raise self._closed_error()
            return lookup.read_part(dataset, key, entry, start, end, version)

    # --- maintenance -----------------------------------------------------

    def reindex(
        self, dataset: str, urls: str | Iterable[str], *, workers: int = 8, kind: str = "native"
    ) -> list[ShardRow]:
        """Rebuild the rows of these shards from their footers alone, committed in one transaction.

        Rows already registered under a URL are replaced (the shard keeps its job).
        ``kind="tar"``: the URLs are WebDataset tars, scanned again (after a
        tar changed, or to register tars without a Dask cluster).

        Raises
        ------
        ShardNotFoundError, FormatError
            If a shard is missing or unreadable (nothing changes).
        DuplicateKeyError
            If the shards' keys collide with each other or with other committed shards.
        """
        url_list = expand_braces(urls) if isinstance(urls, str) else list(urls)
        preps = _checks.prepare_from_footers(url_list, self.storage_options, workers, kind)
        with self._uow(write=True) as s:
            return _maintenance.reindex_shards(s, dataset, preps)

    def verify(
        self,
        dataset: str,
        *,
        workers: int = 4,
        on_shard: Callable[[str, int], None] | None = None,
        version: Version = None,
        history: bool = True,
        quick: bool = False,
    ) -> CatalogReport:
        """Check every committed shard against the catalog, and every CRC; report each disagreement.

        Without ``version`` every committed shard is checked (every file a
        kept version reads); with it, the shards that version reads.

        ``history``: also compare the version manifests in the dataset's
        folder (``_versions/``) with the catalog: a manifest that is missing,
        altered or says otherwise is a problem (``history-*``), which
        :meth:`write_history` fixes when the catalog is the one to trust.

        ``quick``: read no record, for catalogs whose full check takes hours:
        each shard's size and, for a native shard, its header and trailer (two
        ranged reads of 64 bytes) are compared with its catalog row, and its
        rows' count and the bytes they span (one aggregate query over the
        dataset's rows) with its record count and where its footer starts
        (docs/CATALOG.md §9). A changed payload byte or a row that differs from
        the footer with the count unchanged takes the full check.

        ``on_shard(url, total)`` is called as each shard's check finishes
        (from worker threads), for progress bars.

        Every shard is read in this process, and every footer is kept until
        the comparison: for a dataset too large for one process,
        :func:`shardcat.orchestration.verify` makes the same check (the
        same report) as a Dask job, each task comparing a few shards.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        if quick:
            report = self._verify_ends(dataset, workers, on_shard, version)
        else:
            with self._uow() as s:
                rows = _maintenance.committed_shards(s, dataset, version)
                samples = _named_samples(s, rows)
            # The files are read outside any transaction: that takes as long as the data.
            checks = _checks.check_files(
                rows, self.storage_options, workers=workers, on_shard=on_shard, samples=samples
            )
            with self._uow() as s:
                report = _maintenance.compare_with_catalog(s, dataset, rows, checks)
        if history:
            report.problems.extend(
                _history.check_history(self, dataset, self.info(dataset).root_url)
            )
        return report

    def _verify_ends(
        self,
        dataset: str,
        workers: int,
        on_shard: Callable[[str, int], None] | None,
        version: Version,
    ) -> CatalogReport:
        from ..catalog.quickcheck import compare_ends
        from .ends import read_ends

        dataset_id = self.info(dataset).id
        with self._uow() as s:
            rows = _maintenance.committed_shards(s, dataset, version)
        checks = read_ends(rows, self.storage_options, workers=workers, on_shard=on_shard)
        with self._uow() as s:
            return compare_ends(s, dataset, dataset_id, rows, checks)

    # --- history in the dataset's folder ------------------------------------

    def _keeps_history(self, root: str) -> bool:
        return _history.keeps_history(root)

    def _write_history(
        self, history: list[DatasetHistory], storage_options: dict[str, Any] | None
    ) -> None:
        _history.publish(self, history, storage_options or self.storage_options)

    def write_history(
        self, dataset: str, *, storage_options: StorageOptions | None = None
    ) -> HistoryWrite:
        """Write the version manifests (and tags file) the dataset's folder lacks, from the catalog.

        For datasets made before manifests were kept, or after a commit could
        not write its manifest (a HistoryWarning said so, or its client was
        killed first: ``gc`` runs this too). Files already there are never
        replaced; the tags file is brought up to date. ``storage_options``:
        the folder's, if not the catalog's.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        StorageError
            The store refused a write (run it again).
        """
        return _history.write_history(
            self, dataset, self.info(dataset).root_url, storage_options or self.storage_options
        )

    def rebuild_history(
        self, dataset: str, root: str, *, workers: int = 8, history_of: str | None = None
    ) -> HistoryRebuild:
        """Rebuild an empty dataset's versions, tags and rows from the manifests and shards under ``root``.

        Disaster recovery for versioned datasets: every kept version reads
        what it read, deleted and replaced keys stay hidden, tags come back.
        Shards only expired versions read are not registered; shard files no
        manifest names (left by failed jobs) are listed, not registered.
        ``history_of``: the dataset whose history to take when ``root`` holds
        several (default: ``dataset``'s, or the only one there).

        Raises
        ------
        ManifestError
            A manifest is altered, missing from the sequence, or disagrees
            with a shard's file (nothing is committed).
        DatasetExistsError
            The dataset has shards already.
        ShardNotFoundError, FormatError
            A shard some kept version reads is missing or unreadable.
        """
        return _history.rebuild_history(self, dataset, root, workers, history_of)

    # --- lifetime --------------------------------------------------------

    def close(self) -> None:
        """Close lookup connections, open shard files and the engine (idempotent, any thread).

        Lookups in flight on other threads finish first (their connections
        and files are closed after, never under them); every later call, on
        any thread, raises :class:`~shardcat.errors.CatalogClosedError`.
        """
        self._after_fork()  # a forked child closes its own lookups, never its parent's
        with self._lock:
            if self._closed:
                return
            self._closed = True
            lookups, self._lookups = list(self._lookups), set()
        for lookup in lookups:
            # One gate at a time: a fork (which takes them all) never waits on this thread.
            with lookup.gate:
                lookup.close()
        self._local = threading.local()
        self._dispose()


class _ThreadEnd:
    """Kept in a thread's local state only: closes its lookup once that state goes with the thread.

    A thread's lookup holds a connection, up to ``max_open_shards`` open
    files and up to 64 MiB of read buffers (``lookup._POOL_BUFFERS``); a
    service that runs each request on a new thread must not keep one of
    each per thread it ever had.
    """

    __slots__ = ("__weakref__",)

    def __init__(self, lookup: Lookup, listed: set[Lookup]) -> None:
        # Not at exit: a daemon thread may still be looking up then.
        weakref.finalize(self, _end_of_thread, lookup, listed).atexit = False


def _end_of_thread(lookup: Lookup, listed: set[Lookup]) -> None:
    """Close a lookup whose thread ended (the finalizer of :class:`_ThreadEnd`)."""
    if lookup.closed or lookup.generation != fork_generation():
        return  # closed with the catalog; or a forked child's copy, its parent's to close
    # Never waits: a finalizer runs on any thread, maybe under a lock (a fork
    # holds every gate). Not taken: the lookup stays listed for close().
    if lookup.gate.acquire(blocking=False):
        try:
            lookup.close()
        finally:
            lookup.gate.release()
        listed.discard(lookup)


def shards_to_verify(cat: Catalog, dataset: str, version: Version = None) -> list[int]:
    """The ids of the shards :meth:`Catalog.verify` checks, in the order it reports them.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    with cat._uow() as s:
        return [r.id for r in _maintenance.committed_shards(s, dataset, version)]


def verify_shards(
    cat: Catalog, shard_ids: list[int], storage_options: StorageOptions | None = None
) -> list[tuple[list[Problem], int, int]]:
    """Verify these shards only: per shard, its problems, records and bytes checked.

    What a task of the verify job (:mod:`shardcat.orchestration.verify`) runs on
    a worker: its shards' files read again, then each compared with that
    shard's catalog rows alone (:func:`~shardcat.catalog.maintenance.compare_shard`,
    as :meth:`Catalog.verify` does). A shard whose row is gone meanwhile (gc) is
    left out.
    """
    opts = cat.storage_options if storage_options is None else dict(storage_options)
    with cat._uow() as s:
        rows = _maintenance.shards_by_id(s, shard_ids)
        samples = _named_samples(s, rows)
    # The files are read outside any transaction, as in Catalog.verify.
    checks = _checks.check_files(rows, opts, workers=1, samples=samples)
    with cat._uow() as s:
        return [_maintenance.compare_shard(s, r, c) for r, c in zip(rows, checks)]


def _named_samples(s: Any, rows: list[Any]) -> dict[int, Any]:
    """The records of the shards whose files the catalog names (folder groups), per shard id."""
    named = [r.id for r in rows if r.kind in _checks.NAMED_BY_CATALOG]
    return _maintenance.named_samples(s, named) if named else {}


def _reopen(handle: CatalogHandle) -> Catalog:
    return handle.open()
