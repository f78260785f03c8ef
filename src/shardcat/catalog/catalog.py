"""The SQL catalog: datasets, shards, jobs and versions over one SQL database.

:class:`SqlCatalog` is a facade. It owns the engine and the units of work,
and each public method opens one unit of work and hands its session to a
module function that holds the SQL: ``datasets.py``, ``shards.py``,
``jobs.py``, ``maintenance.py``; the version methods (``log``, ``tag``,
``expire``, ...) come from the ``history.py`` mixin over ``versions.py``; the
methods that went internal, kept one release with a warning, from ``deprecated.py``.
Reading records (``get``, ``get_many``, ``locate``, ``verify``) is the read
layer's: the public :class:`shardcat.Catalog` (:mod:`shardcat.reading`)
adds it to this class.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from .._forks import fork_generation
from .._lazy import lazy_module
from .._types import OnDuplicate
from ..errors import CatalogClosedError
from . import fence, sqlite_file
from .changes import changes_of, note_options, options_of
from .deprecated import DeprecatedMethods
from .hashkeys import KEY_READER, KeyReader, check_key_mode, needs_key_order
from .history import Version, VersionsApi, with_retries
from .migrate import HEAD_REVISION, ensure_schema
from .results import (
    DatasetInfo,
    EntryKind,
    JobInfo,
    ShardRow,
)

# The modules behind everything (the ORM models, tar scanning) load on first
# use: opening a catalog and looking a key up needs none of them.
if TYPE_CHECKING:
    import sqlalchemy as _sa
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

    from . import datasets as _datasets
    from . import fields as _fields
    from . import jobs as _jobs
    from . import keys as _keys
    from . import manifests as _manifests
    from . import register as _register
    from . import selection as _selection
    from . import shards as _shards
    from . import statistics as _statistics
    from . import versions as _versions
    from .fields import CarriedValues
    from .groups import GroupWrite
    from .kinds import Summary
    from .manifests import DatasetHistory
    from .selection import FilterLimits, Selection
else:
    _datasets = lazy_module("shardcat.catalog.datasets")
    _fields = lazy_module("shardcat.catalog.fields")
    _jobs = lazy_module("shardcat.catalog.jobs")
    _keys = lazy_module("shardcat.catalog.keys")
    _manifests = lazy_module("shardcat.catalog.manifests")
    _register = lazy_module("shardcat.catalog.register")
    _selection = lazy_module("shardcat.catalog.selection")
    _shards = lazy_module("shardcat.catalog.shards")
    _versions = lazy_module("shardcat.catalog.versions")
    _statistics = lazy_module("shardcat.catalog.statistics")
    _sa = lazy_module("sqlalchemy")
from .session import (
    DEFAULT_BUSY_TIMEOUT,
    absolute_sqlite_url,
    create_catalog_engine,
    default_url,
    display_url,
    unit_of_work,
)

__all__ = ["SqlCatalog"]

_C = TypeVar("_C", bound="SqlCatalog")  # typing.Self is Python 3.11+


class SqlCatalog(VersionsApi, DeprecatedMethods):
    """The SQL side of a catalog: datasets, their shards, jobs, versions and every record's location.

    Use :class:`shardcat.Catalog`, which adds reading records to it; this
    class reads no shard file.

    Parameters
    ----------
    url:
        SQLAlchemy URL of the catalog database: ``sqlite:///shardcat.db``
        (the default, or ``$SHARDCAT_CATALOG``), ``sqlite://`` for memory,
        ``postgresql+psycopg://user@host/db``. A relative SQLite path is
        resolved against the working folder now, so that Dask workers open
        the same file.
    busy_timeout:
        SQLite: seconds to wait for another writer before CatalogLockedError.
    create:
        Create the tables when the database is empty (else SchemaVersionError).

    Raises
    ------
    SchemaVersionError
        If the catalog's schema is not the one this shardcat needs.
    CatalogError
        If the database cannot be opened.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
        create: bool = True,
    ) -> None:
        # Absolute now: workers and later processes must open this same file.
        self._url = absolute_sqlite_url(str(url or default_url()))
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._closed = False
        self._generation = fork_generation()
        self._engine: Engine | None = None
        path = sqlite_file.file_path(self._url)
        self._file = None if path is None else sqlite_file.SqliteFile(self._url, path, busy_timeout)
        if path is not None:
            sqlite_file.mmap_size()  # a bad setting is reported now, not at the first lookup
        with fence.shared():
            # A SQLite file at head needs no engine to be opened: one row read
            # through sqlite3 (SQLAlchemy loads with the first unit of work).
            if (
                path is not None
                and sqlite_file.stamped_revision(path, busy_timeout) == HEAD_REVISION
            ):
                self.revision = HEAD_REVISION
                return
            try:
                self.revision = ensure_schema(self.engine, create=create)
            except BaseException:
                self.engine.dispose()
                raise

    @property
    def engine(self) -> Engine:
        """The catalog's SQLAlchemy engine, made on first use."""
        engine = self._engine
        if engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = create_catalog_engine(self._url, busy_timeout=self.busy_timeout)
                engine = self._engine
        return engine

    @property
    def sqlite_file(self) -> sqlite_file.SqliteFile | None:
        """The catalog's SQLite file, for connections of its own (lookups); None on other databases."""
        return self._file

    @property
    def url(self) -> str:
        """The catalog URL with any password hidden."""
        return display_url(self._url)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    # --- units of work ---------------------------------------------------

    def _after_fork(self) -> None:
        # A forked child (Dask's multiprocessing scheduler) must not use the
        # parent's connections: drop them without closing them under the parent.
        if self._generation != fork_generation():
            self._generation = fork_generation()
            self._lock = threading.Lock()
            if self._engine is not None:
                self._engine.dispose(close=False)
            self._forget_parent()

    def _forget_parent(self) -> None:
        """In a forked child: drop what else the parent's threads opened (subclasses)."""

    def _closed_error(self) -> CatalogClosedError:
        return CatalogClosedError(
            f"catalog {self.url} is closed: open a new Catalog on it to keep using it"
        )

    @contextmanager
    def _uow(self, *, write: bool = False) -> Iterator[Session]:
        if self._closed:
            raise self._closed_error()
        self._after_fork()
        # A fork waits for the unit of work, whose SQLite calls hold process-wide mutexes.
        history = None
        with (
            fence.shared(),
            unit_of_work(self.engine, write=write, busy_timeout=self.busy_timeout) as s,
        ):
            s.info[KEY_READER] = self._key_reader()
            yield s
            changed = changes_of(s) if write else None
            if changed:
                # Made in the transaction (what it committed, exactly), written after it.
                history = _manifests.build_changes(s, changed, self._keeps_history)
        if history:
            self._write_history(history, options_of(s))

    def _key_reader(self) -> KeyReader | None:
        """What reads hash-only datasets' keys from their shards (the read layer's; None here)."""
        return None

    def _keeps_history(self, root: str) -> bool:
        """Whether commits write manifests beside this dataset root (the read layer decides)."""
        return False

    def _write_history(
        self, history: list[DatasetHistory], storage_options: dict[str, Any] | None
    ) -> None:
        """After a commit that changed datasets' histories (the read layer writes their files)."""

    # --- datasets --------------------------------------------------------

    def create_dataset(
        self,
        name: str,
        root_url: str,
        properties: dict[str, Any] | None = None,
        *,
        exist_ok: bool = False,
        keys: str = "text",
    ) -> DatasetInfo:
        """Create a dataset (or return the existing one with ``exist_ok``).

        ``keys``: ``"text"`` (the default) keeps each key's text and hash in the
        catalog, the text in key order; ``"unsorted"`` keeps both but no index in
        key order (docs/CATALOG.md, "Unsorted datasets"): 28-65 bytes a key less, no
        listing of keys (``keys``, ``--prefix``); ``"hash"`` keeps only the hash, and
        every lookup compares the key its shard record holds (docs/CATALOG.md,
        "Hash-only datasets"): fewer bytes still, no ``where=`` on keys either.
        Native shards only.

        Raises
        ------
        DatasetExistsError
            If it exists and ``exist_ok`` is false (or exists with another ``keys``).
        ValueError
            ``keys`` is none of ``"text"``, ``"unsorted"``, ``"hash"``.
        """
        check_key_mode(keys)
        with self._uow(write=True) as s:
            return _datasets.create_dataset(
                s, name, root_url, properties, exist_ok=exist_ok, key_mode=keys
            )

    def info(self, name: str) -> DatasetInfo:
        """The dataset's row: id, root URL, format and current version, properties.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            return _datasets.describe_dataset(s, name)

    def datasets(self) -> list[DatasetInfo]:
        """Every dataset, by name."""
        with self._uow() as s:
            return _datasets.list_datasets(s)

    def entry_kinds(self, dataset: str, *, version: Version = None) -> list[EntryKind]:
        """The dataset's kinds of entry (name, content type, codec) and the committed records holding each.

        One query over the layout tables, not the records' bytes. ``version``:
        the records that kept version (number or tag) sees; default the latest.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        VersionNotFoundError
            If there is no such kept version or tag.
        """
        with self._uow() as s:
            number = None
            if version is not None:
                ds = _datasets.find_dataset(s, dataset)
                number = _versions.resolve_version(s, ds, version)
            return _datasets.entry_kinds(s, dataset, number)

    def keys(
        self,
        dataset: str,
        *,
        prefix: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        version: int | str | None = None,
    ) -> Iterator[str]:
        """The dataset's committed keys in byte (UTF-8) order, streamed as they are read.

        A range scan of the key index: ``prefix`` costs a seek, not a scan of
        the dataset. Consume the iterator (or close it) to release its
        connection.

        Parameters
        ----------
        prefix:
            Only keys starting with this string.
        limit:
            At most this many keys (None or 0: all).
        after:
            Only keys after this one in the same order: the last key of the
            previous page, to page through a range with the index (no ``OFFSET``).
        version:
            The keys a kept version reads (a number or a tag); None: the latest.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset (raised at once, before iterating).
        VersionNotFoundError
            If there is no such kept version or tag (raised at once).
        KeyOrderUnavailableError
            The dataset keeps no key-order index (``keys="unsorted"``; raised at once), or
            no key text (``keys="hash"``: its subclass ``KeyTextUnavailableError``).
        """
        with self._uow() as s:
            ds = _datasets.find_dataset(s, dataset)
            needs_key_order(ds.name, ds.key_mode, "listing keys (keys, --prefix)")
            number = None if version is None else _versions.resolve_version(s, ds, version)
            dataset_id = ds.id
        return _keys.iter_keys(
            self.engine, dataset_id, prefix or None, limit or None, after, number
        )

    def select(
        self,
        dataset: str,
        where: str,
        params: Mapping[str, Any] | None = None,
        *,
        version: Version = None,
        limits: FilterLimits | None = None,
    ) -> Selection:
        """The committed records for which the SQL filter ``where`` holds, grouped by shard.

        ``where`` is one boolean SQL expression over the columns ``key``,
        ``byte_offset``, ``byte_length``, ``shard_url``, ``shard_number``,
        ``job_id``, ``shard_id`` and the dataset's declared fields, with
        ``:name`` placeholders bound from ``params``. It is parsed, checked
        against an allow-list of operators and functions and written back
        before it runs (docs/TRAINING.md), read-only, with a timeout, and
        bounded in rows and bytes (``limits``, by default from
        ``$SHARDCAT_WHERE_TIMEOUT``, ``$SHARDCAT_WHERE_MAX_ROWS`` and
        ``$SHARDCAT_WHERE_MAX_BYTES``; on PostgreSQL as ``$SHARDCAT_SQL_ROLE``
        if set). One query; no shard is read. ``version``: among the records
        that kept version (number or tag) sees; default the latest.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        VersionNotFoundError
            If there is no such kept version or tag.
        QueryRefusedError
            If ``where`` is not one such expression; the message says what
            was refused and why.
        QueryLimitError
            If it chooses more records or bytes than ``limits`` allow.
        QueryTimeoutError
            If it runs longer than ``limits.timeout``.
        QueryError
            If the database rejects it (a type mismatch, a function it lacks).
        """
        with self._uow() as s:
            target = _selection.selection_target(s, dataset, version)
        # On a connection of its own, out of the unit of work: a fork waits for it all the same.
        with fence.shared():
            return _selection.run_selection(self.engine, target, where, params, limits)

    def declare_fields(self, dataset: str, fields: Mapping[str, type]) -> dict[str, str]:
        """Declare scalar per-sample fields (name → int, float, bool or str); returns all, name → kind.

        Each becomes a column of ``where=`` filters (:meth:`select`) once its
        values are stored (:meth:`store_fields`, or
        :func:`shardcat.readers.index_fields` from a JSON entry).

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        CatalogError
            A name that is not a lower-case identifier or a built-in column,
            or a field declared before with another kind.
        """
        with self._uow(write=True) as s:
            return _fields.declare_fields(s, dataset, fields)

    def fields(self, dataset: str) -> dict[str, str]:
        """The dataset's declared fields: name → kind (``number`` or ``text``).

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            return _fields.declared_fields(s, _datasets.find_dataset(s, dataset).id)

    def store_fields(
        self, dataset: str, shard_id: int, values: Iterable[tuple[int, Mapping[str, Any]]]
    ) -> int:
        """Replace the declared fields' values of one shard's records, in one transaction.

        ``values`` are ``(byte_offset, {field: value})`` pairs; returns the
        values stored (``None`` values are not stored).

        Raises
        ------
        CatalogError
            The shard is not the dataset's, a field is not declared, or a
            value does not fit its field's kind.
        """
        with self._uow(write=True) as s:
            return _fields.store_field_values(s, dataset, shard_id, values)

    def delete_dataset(self, name: str, *, missing_ok: bool = False) -> None:
        """Remove a dataset and all its rows from the catalog (shard files are not touched).

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset and ``missing_ok`` is false.
        """
        with self._uow(write=True) as s:
            _datasets.delete_dataset(s, name, missing_ok=missing_ok)

    # --- shards ----------------------------------------------------------

    def shards(self, dataset: str, state: str | None = "committed") -> list[ShardRow]:
        """The dataset's shards in one state (``None``: all), by shard number then URL.

        ``"committed"`` lists the latest version's shards; a committed shard
        only older kept versions read (``removed_version`` set) is listed
        with ``state=None``.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            return _shards.list_shards(s, dataset, state)

    def shard_urls(
        self,
        *,
        states: Collection[str] | None = None,
        dataset: str | None = None,
        url: str | None = None,
    ) -> set[str]:
        """URLs of shard rows of every dataset (or one), in these states (default: any).

        One query; what gc and delete consult before removing a file.

        Raises
        ------
        DatasetNotFoundError
            If ``dataset`` is given and there is no such dataset.
        """
        with self._uow() as s:
            return _shards.shard_urls(s, states=states, dataset=dataset, url=url)

    def register_shard(
        self,
        dataset: str,
        info: Summary,
        *,
        job: int | JobInfo | None = None,
        state: str | None = None,
    ) -> ShardRow:
        """Register a shard and all its records in one transaction, in bulk.

        Without ``job`` the shard is committed at once (visible to lookups on
        return). With ``job`` it is staged: invisible until
        :meth:`commit_job`; registering the same URL again in that job (a
        retried task) replaces the earlier rows.

        Parameters
        ----------
        dataset:
            The dataset's name.
        info:
            The shard's summary: what ``ShardWriter.close()`` returns or
            ``ShardReader(url).info`` rebuilds, or a tar's
            :func:`~shardcat.format.tar.scan_tar` (registered in place, kind
            ``tar``). Its ``path`` is stored without credentials.
        job:
            A job from :meth:`begin_job`.
        state:
            ``"committed"`` (default without a job) or ``"staged"`` (with one).

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        DuplicateKeyError
            If a key of the shard is already committed in the dataset, or the
            shard's URL is (nothing is registered).
        CommitConflictError
            If the job is not open.
        CatalogLockedError
            If another writer holds the SQLite catalog past the busy timeout.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        state = _shards.registration_state(job_id, state)
        prep = _register.prepare_shard(
            info
        )  # numpy work on the footer: before taking the write lock
        out: list[ShardRow] = []

        def attempt() -> None:
            with self._uow(write=True) as s:
                out.append(
                    _shards.register_shard(
                        s, dataset, prep, job_id=job_id, state=state, catalog=self.url
                    )
                )

        with_retries(attempt)
        if state == "committed":
            _statistics.refresh_after_growth(self.engine, out[-1].record_count)
        return out[-1]

    def register_shards(self, dataset: str, infos: Iterable[Summary]) -> list[ShardRow]:
        """Register many shards and all their records in one transaction, as one version.

        What a loop of :meth:`register_shard` calls does, committed together:
        every shard is visible on return, or none is (a taken URL or a
        repeated key fails the whole call). Cheaper than the loop for a
        dataset written in one go (e.g. the shards a
        :class:`~shardcat.RollingShardWriter` returns): one transaction and
        one version instead of one per shard, the layouts looked up once,
        and the keys checked unique across the shards in memory, so the
        duplicate-key query runs only if the dataset has committed shards.

        Returns the shards' rows, in the order of ``infos``.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        DuplicateKeyError
            If a key repeats within or across the shards, or is already
            committed in the dataset, or a shard's URL is already registered
            or given twice (nothing is registered).
        CatalogLockedError
            If another writer holds the SQLite catalog past the busy timeout.
        """
        # Numpy work on the footers before taking the write lock, as register_shard does.
        preps = [_register.prepare_shard(info) for info in infos]
        if not preps:
            return []
        _register.check_unique_across(preps)
        out: list[list[ShardRow]] = []

        def attempt() -> None:
            with self._uow(write=True) as s:
                out[:] = [_shards.register_shards(s, dataset, preps, catalog=self.url)]

        with_retries(attempt)
        _statistics.refresh_after_growth(self.engine, sum(p.record_count for p in preps))
        return out[-1]

    def remove_shard(self, dataset: str, url: str) -> ShardRow:
        """Take a committed shard out of the dataset (state ``deleted``; the file is not touched).

        Raises
        ------
        ShardNotFoundError
            If no committed shard of the dataset has this URL.
        """
        with self._uow(write=True) as s:
            return _shards.remove_shard(s, dataset, url)

    # --- jobs ------------------------------------------------------------

    def begin_job(
        self,
        dataset: str,
        *,
        description: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> JobInfo:
        """Open a job: shards registered with ``job=`` stay staged until :meth:`commit_job`.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow(write=True) as s:
            return _jobs.begin_job(s, dataset, description=description, properties=properties)

    def job(self, job: int | JobInfo) -> JobInfo:
        """A job's row, with its shard and record counts.

        Raises
        ------
        JobNotFoundError
            If there is no such job.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        with self._uow() as s:
            return _jobs.job_summary(s, job_id, catalog=self.url)

    def jobs(self, dataset: str, state: str | None = None) -> list[JobInfo]:
        """The dataset's jobs (in one state, or all), oldest first, with their counts.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            return _jobs.list_jobs(s, dataset, state)

    def commit_job(
        self,
        job: int | JobInfo,
        *,
        expected_version: int | None = None,
        replace: bool = False,
        shards: Collection[str] | None = None,
        require_empty: bool = False,
        on_duplicate: OnDuplicate = "error",
        operation: str | None = None,
        message: str | None = None,
        hidden: Mapping[str, Collection[int]] | None = None,
        rewrite: bool = False,
        storage_options: Mapping[str, Any] | None = None,
        group: GroupWrite | None = None,
        groups: Mapping[str, Collection[str]] | None = None,
        fold: Collection[int] | None = None,
        carried: CarriedValues | None = None,
    ) -> JobInfo:
        """Make every staged shard of the job visible, together, in one transaction.

        Committing a committed job again returns it unchanged (a retried
        barrier task is harmless).

        Parameters
        ----------
        job:
            The job (or its id).
        expected_version:
            Commit only if the dataset is still at this version.
        replace:
            Overwrite: in the same transaction, every shard committed before
            becomes ``deleted`` (its records go), so the dataset is exactly
            this job's shards.
        shards:
            The manifest: URLs of exactly the shards to commit, as the job's
            successful tasks reported them. Other staged shards of the job
            (left by killed or lost attempts) are retired instead.
        require_empty:
            Commit only if the dataset has no committed shard yet.
        on_duplicate:
            A key of the job already live in the dataset: ``"error"``
            (DuplicateKeyError), ``"replace"`` (the new version points at the
            job's record) or ``"skip"`` (the live record stays).
        operation, message:
            Recorded in the new version's row (:meth:`log`).
        hidden:
            Staged shard URL -> byte offsets of its records the new version
            does not serve (added and removed in it, like skipped ones): how
            a copy keeps hidden the records its source's versions deleted or
            replaced. They take no part in the duplicate check.
        rewrite:
            The job's records are copies of records live at the version the
            job began at (compaction). Decided in the commit's transaction:
            a copy replaces the record it copies only if that key's live
            record is still one that was live then; copies of keys another
            commit deleted, replaced or rewrote meanwhile are added and
            removed in the new version, so nothing deleted comes back.
            Takes the place of ``on_duplicate``.
        storage_options:
            fsspec options of the dataset's folder, where the new version's
            manifest is written (docs/LIFECYCLE.md §8), when they are not
            the catalog's (a job given its own).
        group:
            The job's records are entries of this column group of existing
            samples (``add_entries``, docs/GROUPS.md); its mode takes the
            place of ``on_duplicate``.
        groups:
            Group name -> URLs of the job's staged shards holding that
            group's records, in the groups' order (a copy or reindex of a
            dataset with groups, docs/GROUPS.md): they become those groups'
            records, and a group the dataset lacks is created.
        carried:
            A copy's (``copy_dataset``): the source's declared fields and the values its
            latest version reads, by staged shard URL; declared and stored as set at the
            new version, which its manifest lists.
        fold:
            With ``rewrite``: ids of the column groups whose entries the
            job's copies carry merged into the base (``compact(fold_groups=)``,
            docs/GROUPS.md §6): their records are removed and the groups
            dropped in the new version, refused (KeyConflictError) if another
            commit changed them, or the base records of their keys, meanwhile.

        The commit is a conditional update of the dataset's version, read
        under the dataset row's lock (concurrent commits queue for it); a
        commit that still finds the version moved is retried, as a whole, up
        to ``COMMIT_ATTEMPTS`` times. Jobs on disjoint keys all land.

        On PostgreSQL, a commit that grows the records table by over 20 %
        (and 50,000 records) then runs ``ANALYZE`` (outside its transaction),
        so that lookups are planned for the table's new size.

        Raises
        ------
        DuplicateKeyError
            If a key repeats within the job or exists among committed records;
            nothing becomes visible and the job stays open (abort it).
        KeyConflictError
            ``on_duplicate`` replace/skip and another commit changed some of
            the job's keys after it began (the error names them).
        CommitConflictError
            If the job was aborted, the dataset moved past ``expected_version``,
            or a shard of the manifest is not staged.
        DatasetExistsError
            ``require_empty`` and another job committed records first.
        JobNotFoundError
            If there is no such job.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        committed: list[bool] = []

        def attempt() -> None:
            with self._uow(write=True) as s:
                note_options(s, storage_options)
                committed[:] = [
                    _jobs.commit_job(
                        s,
                        job_id,
                        catalog=self.url,
                        expected_version=expected_version,
                        replace=replace,
                        shards=shards,
                        require_empty=require_empty,
                        on_duplicate=on_duplicate,
                        operation=operation,
                        message=message,
                        hidden=hidden,
                        rewrite=rewrite,
                        group=group,
                        groups=groups,
                        fold=fold,
                        carried=carried,
                    )
                ]

        with_retries(attempt)
        info = self.job(job_id)
        if committed == [True]:
            _statistics.refresh_after_growth(self.engine, info.record_count)
        return info

    def abort_job(self, job: int | JobInfo) -> JobInfo:
        """Discard the job: its staged shards become ``deleted``, their records go.

        Raises
        ------
        CommitConflictError
            If the job is already committed.
        JobNotFoundError
            If there is no such job.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        with self._uow(write=True) as s:
            _jobs.abort_job(s, job_id, catalog=self.url)
        return self.job(job_id)

    def analyze(self) -> None:
        """Refresh the database's planner statistics (after registering many records).

        PostgreSQL plans batch lookups from them; autovacuum refreshes them
        too, but only some time after a bulk load. Runs ``ANALYZE`` there and
        ``PRAGMA optimize`` on SQLite. On a hash-partitioned ``records``
        (:mod:`.partitions`) ``ANALYZE records`` samples the parent, whose
        statistics autovacuum never gathers, and analyzes every partition.
        """
        with self._uow(write=True) as s:
            if self.engine.dialect.name == "postgresql":
                s.execute(_sa.text("ANALYZE records"))
                s.execute(_sa.text("ANALYZE shards"))
            else:
                s.execute(_sa.text("PRAGMA optimize"))

    def close(self) -> None:
        """Close the engine (idempotent, any thread); every later call raises CatalogClosedError."""
        self._after_fork()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._dispose()

    def _dispose(self) -> None:
        if self._engine is None:
            return
        with fence.shared():
            self._engine.dispose()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
