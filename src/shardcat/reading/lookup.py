"""The lookup hot path: one SQL query, then one ranged read.

A thread's lookup: the statements and what an empty result or a failed
read means. The statements run on the thread's
:class:`~shardcat.catalog.connection.RawConnection`; the bytes come from the thread's
:class:`~shardcat.storage.SourceCache` (local shards stay open and are read
with ``os.pread``), and the row's shard kind (:mod:`.decode`) decodes and
checks them against the row: the active record codec's ``decode_indexed``
for native shards (:mod:`shardcat.format.recordcodec`: compiled, or the
Python reference), the CRC-checked payloads of a tar sample for tar shards.
"""

from __future__ import annotations

import copy
import json
import operator
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import xxhash

from .._forks import fork_generation
from .._ranges import LOCAL_MAX_GAP, MergedReads
from .._types import ByteRange, StorageOptions
from ..catalog import fence
from ..catalog.connection import RawConnection
from ..catalog.hashkeys import HASH
from ..catalog.history import Version
from ..catalog.kinds import RANGES_OF_FILE
from ..catalog.results import BatchResult, DescribedBatch, EntryInfo, Location
from ..catalog.session import nul_refused
from ..catalog.sqlite_file import SqliteFile
from ..errors import (
    DatasetNotFoundError,
    EntryNotFoundError,
    FormatError,
    InvalidKeyError,
    ShardNotFoundError,
    StorageError,
    VersionNotFoundError,
)
from ..format import Entry, Record, checksums, recordcodec
from ..format import sources as _sources
from ..format.checksums import signed_key_hash, signed_key_hashes
from ..format.footer import EntrySpec
from ..format.merged import merge_records as _merged
from ..format.records import BatchTable, decode_entry
from ..format.sources import FileSource
from ..format.spans import unpack_spans
from ..format.spec import Codec
from ..storage import SourceCache, is_local, local_path, redact
from ..storage.cache import DEFAULT_MAX_OPEN, ONE_PREAD
from . import statements
from .decode import RowAt, decode_record, row_spans
from .keyread import head_key_of, head_request, record_keys
from .misses import missing
from .point import PointLookup, open_point

if TYPE_CHECKING:
    import numpy as np
    from sqlalchemy import Engine

__all__ = ["LayoutCache", "Lookup"]


class LayoutCache:
    """Parsed ``layouts.signature`` values: ``[(name, content_type, codec), ...]``.

    Layouts never change once written, so the cache is shared by threads.
    """

    def __init__(self) -> None:
        self._parsed: dict[str, list[tuple[str, str, Codec]]] = {}

    def get(self, signature: str) -> list[tuple[str, str, Codec]]:
        parsed = self._parsed.get(signature)
        if parsed is None:
            parsed = [(str(n), str(t), Codec.parse(c)) for n, t, c in json.loads(signature)]
            self._parsed[signature] = parsed
        return parsed


_UNKNOWN: Any = object()
"""A shard id not (yet) in ``Lookup._shards``."""

# signed_key_hash without a Python frame: xxh64_digest is the hash big-endian.
_xxh64_digest = xxhash.xxh64_digest
_from_bytes = int.from_bytes


def _hash(key: str) -> tuple[int, str]:
    try:
        return signed_key_hash(key.encode("utf-8")), key
    except (UnicodeEncodeError, AttributeError) as e:
        raise InvalidKeyError(f"key {key!r} is not valid UTF-8 text") from e


class Lookup:
    """One thread's lookup state: a raw connection and a cache of open shards.

    Parameters
    ----------
    source:
        The catalog's SQLite file, or its engine: a connection of its own comes from it.
    storage_options:
        fsspec options for reading shards.
    layouts:
        Shared cache of parsed layouts.
    max_open:
        Shards kept open (local files stay open between lookups).
    remote_max_gap:
        Gap merged by batch reads of remote shards (see :class:`~shardcat.storage.SourceCache`).
    """

    def __init__(
        self,
        source: Engine | SqliteFile,
        storage_options: StorageOptions | None,
        layouts: LayoutCache,
        max_open: int = DEFAULT_MAX_OPEN,
        remote_max_gap: int | str | None = None,
    ) -> None:
        self.gate = threading.RLock()
        """Held by every call on this lookup (its thread's) and by :meth:`close` from any thread.

        Its connections, statements and open files are used without the GIL
        (SQLite steps, ``pread``): closing them under a call in flight was a
        use after free. Its Python twin point lookup (:attr:`fast_get`)
        holds it too; the compiled one fences itself instead (its ``busy``; a lock
        per lookup would cost ~7 % of its instructions), and :meth:`close`
        waits for it as well.
        Re-entrant: a signal handler or finalizer of the same thread may close
        the lookup between two statements of a call."""
        self.closed = False
        self.raw = RawConnection(source)
        self._query = self.raw.query  # bound once: no extra frame on the hot path
        self.dialect = self.raw.dialect
        self.layouts = layouts
        self.generation = fork_generation()
        p = self._p = self.raw.placeholder
        self._point = statements.point_sql(p)
        self._record = statements.record_sql(p)
        self._record_by_shard = statements.point_sql(
            p, statements.COMMITTED, statements.RECORD_BY_SHARD_SELECT
        )
        # A hash-only dataset's candidates for the point lookup (bound as dataset, key hash).
        self._record_by_shard_hash = statements.point_sql(
            p, statements.COMMITTED, statements.RECORD_BY_SHARD_SELECT, keyed=False
        )
        self._shards_sql = statements.SHARDS.format(p=p)
        # Shard id -> (url, alignment) of native shards (None: another kind),
        # and the URL of each tar shard among the others (the compiled path's).
        self._shards: dict[int, tuple[str, int] | None] = {}
        self._tars: dict[int, str] = {}
        # The URLs of the native shards cached: a hash-only dataset's rows name URLs, not ids.
        self._shard_urls: set[str] = set()
        # Shard id -> its column group (0: the base), which orders a key's rows when merged.
        self._groups: dict[int, int] = {}
        # The URL of each folder group among the others, and layouts' signatures by id:
        # a folder's whole-record lookup reads its files from the point statement's row.
        self._folders: dict[int, str] = {}
        self._local_folders: dict[str, str | None] = {}  # _local_folder's
        # A layout's entry specs and their (name, content type) pairs, by signature.
        self._specs: dict[str, tuple[list[EntrySpec], tuple[tuple[str, str], ...]]] = {}
        self.hash_datasets: set[str] = set()
        """Datasets found hash-only (``keys="hash"``): their rows have no key text, so the point
        lookup takes their hash-only statement (point.py, read in place) and :meth:`get` its
        Python twin (:meth:`_get_record`). Only an order of statements: when neither finds the
        key, :meth:`_rows_of` still asks for key text (a dataset made again under the name)."""
        self.folder_datasets: set[str] = set()
        """Datasets whose latest whole-record lookup read a folder's files: the point lookup
        declines such rows after running its statement, so :meth:`Catalog.get` comes straight
        here for them (one statement, not two). A native or tar record takes a dataset out."""
        self._signatures: dict[int, str] = {}
        self._signature_sql = f"SELECT signature FROM layouts WHERE id = {p}"
        # The batch statement for records' layout when this thread connected (a catalog
        # partitioned since is still read right, by the other statement).
        self._partitioned = self.raw.partitioned
        self._batch = statements.batch_sql(self.dialect, partitioned=self._partitioned)
        self._batch_entries = statements.batch_sql(
            self.dialect, entries=True, partitioned=self._partitioned
        )
        self._versioned: dict[tuple[str, int], str] = {}
        self._sources = SourceCache(storage_options, max_open, remote_max_gap=remote_max_gap)
        self._files: SourceCache | None = None  # folders' files kept open (_folder_files)
        self._remote_max_gap = remote_max_gap
        self._fds = self._sources.local_fds
        self._touch = self._sources.touch
        self._texts: dict[Any, Any] = {}  # the record codec's memo of entry names and types
        self._read_pool: list[bytes] = []  # local batches' buffers, lent again (_POOL_BUFFERS)
        # The point lookup (point.py): the same statement, cache and
        # descriptors, in one C call where it is compiled, else its Python
        # twin (file-backed SQLite, Python mode), else one that declines.
        self._point_lookup: PointLookup = open_point(
            self.raw,
            self.gate,
            self._record_by_shard,
            self._shards,
            self._fds,
            self._touch,
            unpack_spans,
            self._texts,
            self._tars,
            layouts.get,
            self._batch,
            self._from_rows,  # a cycle until close() (PyPoint.close drops it)
            self._groups,  # a key's rows merged in group order
            # A hash-only dataset's candidates, each record's key compared (read in place).
            self._record_by_shard_hash,
            self.hash_datasets,
            self._sql("batch_hashed", None)[0],  # a hash-only dataset's batch rows
        )
        self.fast_get: Callable[[str, str, Callable[..., Any]], Record | None] = (
            self._point_lookup.get
        )
        """``get(dataset, key, decode)``: the latest whole record, or None if not handled (then :meth:`get`)."""

    # --- SQL ---------------------------------------------------------------

    def _sql(self, kind: str, version: Version) -> tuple[str, tuple[Any, ...]]:
        """The statement for a lookup at ``version`` and its extra parameters.

        ``kind``: ``point``, ``record``, their hash-only candidates (``point_hash``,
        ``record_hash``: any version), ``batch`` or ``batch_entries``, or one of those two
        with ``_hashed`` (rows end with their key hash: a hash-only dataset's batch).
        """
        visible, extra = statements.visible_at(self._p, version)
        cache_key = (kind, len(extra))
        sql = self._versioned.get(cache_key)
        if sql is None:
            if kind == "point_hash":
                sql = statements.point_sql(self._p, visible, keyed=False)
            elif kind == "record_hash":
                sql = statements.record_sql(self._p, visible, keyed=False)
            elif kind == "point":
                sql = statements.point_sql(self._p, visible)
            elif kind == "record":
                sql = statements.record_sql(self._p, visible)
            else:
                sql = statements.batch_sql(
                    self.dialect,
                    visible,
                    entries=kind.startswith("batch_entries"),
                    partitioned=self._partitioned,
                    hashes=kind.endswith("_hashed"),
                )
            self._versioned[cache_key] = sql
        return sql, extra

    def _missing(self, dataset: str, key: str | None, version: Version = None) -> Exception:
        """The error for an empty result (:func:`.misses.missing`)."""
        return missing(self._query, self._p, self._point, dataset, key, version)

    # --- hash-only datasets (docs/CATALOG.md, "Hash-only datasets") ----------

    def _rows_of(
        self, kind: str, dataset: str, key: str, version: Version, sql: str, params: Any
    ) -> list[Any]:
        """The ``kind`` statement's rows of ``key`` (``sql``, ``params``), or its missing error.

        A dataset this lookup knows to be hash-only asks the hash-only twin first
        (and the statement after it: a dataset made again under the name may have text).
        """
        if dataset in self.hash_datasets:
            rows = self._hash_only(kind, dataset, key, version)
            if not rows and self.raw.binds(key):
                rows = self._query(sql, params)
            if not rows:
                raise self._missing(dataset, key, version)
            return rows
        rows = self._query(sql, params) if self.raw.binds(key) else []
        return rows or self._empty(kind, dataset, key, version)

    def _empty(self, kind: str, dataset: str, key: str, version: Version) -> list[Any]:
        """After a statement matching key text found nothing: a hash-only dataset's rows, or raise.

        The dataset's row is read once, for both questions: its key mode (``hash``: the
        twin statement's candidates, :meth:`_hash_only`) and, when nothing is found,
        the missing error's (:func:`.misses.missing`): a miss in a dataset with key
        text sends no statement more than it did before hash-only datasets.
        """
        found = self._query(f"SELECT id, key_mode FROM datasets WHERE name = {self._p}", (dataset,))
        if found and found[0][1] == HASH:
            rows = self._hash_only(kind, dataset, key, version)
            if rows:
                return rows
        elif found and not self.raw.binds(key):  # no row with key text can hold it
            raise nul_refused(self.raw.url)
        raise missing(self._query, self._p, self._point, dataset, key, version, found=found)

    def _hash_only(self, kind: str, dataset: str, key: str, version: Version) -> list[Any]:
        """A hash-only dataset's rows of ``key``: its hash's candidates whose record holds ``key``.

        Where a statement that matches key text found nothing. ``kind``: ``point``
        or ``record`` (rows of that statement: URL first, offset and length third
        and fourth). Each candidate's key is read from its record's head: two keys
        of one hash (a collision) are two candidates, and only the key's own is kept.
        Empty for a dataset with key text (its rows are never NULL): one index probe.
        """
        h = checksums.signed_key_hash(key.encode("utf-8"))  # the one definition (tests force it)
        sql, extra = self._sql(f"{kind}_hash", version)
        rows = self._query(sql, (dataset, h, *extra))
        if not rows:
            return rows
        self.hash_datasets.add(dataset)
        if version is None and not self._shard_urls.issuperset(row[0] for row in rows):
            # The point lookup reads cached shards only: this dataset's, loaded (again).
            self._shard_of(dataset, -1)
        places = [(row[0], int(row[2]), int(row[3])) for row in rows]
        try:
            keys = record_keys(self._sources, places)
        except (OSError, FormatError) as e:
            raise self._read_failed(e, getattr(e, "path", None) or places[0][0], dataset) from e
        kept = [row for row, held in zip(rows, keys) if held == key]
        if len(kept) > 1:
            kept.sort(key=_GROUP)
        return kept

    def _with_keys(self, dataset: str, rows: list[Any]) -> list[Any]:
        """A batch's rows with each hash-only row's key (NULL in the catalog) read from its record.

        Batch rows: URL, offset, length first, key fifth. Rows with key text pass as they are.
        """
        at = [i for i, row in enumerate(rows) if row[4] is None]
        if not at:
            return rows
        self.hash_datasets.add(dataset)
        places = [(rows[i][0], int(rows[i][1]), int(rows[i][2])) for i in at]
        try:
            keys = record_keys(self._sources, places)
        except (ShardNotFoundError, StorageError, FormatError) as e:
            raise self._read_failed(e, getattr(e, "path", None) or places[0][0], dataset) from e
        out = list(rows)
        for i, key in zip(at, keys):
            row = rows[i]
            out[i] = (*row[:4], key, *row[5:])
        return out

    # --- point lookups -----------------------------------------------------

    def locate(self, dataset: str, key: str, version: Version = None) -> Location:
        h, key = _hash(key)
        base, *groups = self._point_rows(dataset, key, h, version)
        return Location(
            base[0],
            int(base[2]),
            int(base[3]),
            tuple(Location(row[0], int(row[2]), int(row[3])) for row in groups),
        )

    def get(
        self,
        dataset: str,
        key: str,
        entries: Iterable[str] | None = None,
        version: Version = None,
    ) -> Record:
        # The hot path: one statement, one pread, one compiled decode,
        # and as few Python frames around them as the checks allow (_hash inline).
        # Catalog.get tries fast_get (the point lookup) first; a None from it comes here.
        try:
            h = _from_bytes(_xxh64_digest(key.encode("utf-8")), "big", signed=True)
        except (UnicodeEncodeError, AttributeError):
            _hash(key)  # raises InvalidKeyError naming the key
            raise
        if entries is not None:
            return self._get_entries(dataset, key, h, frozenset(entries), version)
        if version is not None or dataset in self.hash_datasets:
            return self._get_record(dataset, key, h, version)
        # RawConnection.query without its frame: the driver's execute, and
        # only where that raised, its recovery (reconnect, or the error).
        sql, params = self._record_by_shard, (dataset, h, key)
        try:
            rows = self.raw.execute(sql, params).fetchall()
        except Exception as e:
            if not self.raw.binds(key):
                # A key PostgreSQL cannot bind: a hash-only dataset's is found by its hash
                # alone (as where the statement finds no row); with key text, the error.
                return self._records_of(
                    dataset, key, self._empty("record", dataset, key, None), None
                )
            rows = self.raw.recover(e, sql, params)
        return self._from_rows(dataset, key, h, rows)

    def _from_rows(self, dataset: str, key: str, h: int, rows: list[Any]) -> Record:
        """The latest whole record of ``key`` from the point statement's ``rows`` (:meth:`get`).

        Also the Python twin's ``rest`` (pypoint.py): what it does not
        handle once it has run the statement comes here with its rows.
        """
        if not rows:  # a missing key, or a hash-only dataset's (no key text to match)
            return self._records_of(dataset, key, self._empty("record", dataset, key, None), None)
        if len(rows) > 1:  # column groups: each row's record, merged in group order
            groups = self._groups
            if any(row[0] not in groups for row in rows):
                self._shard_of(dataset, rows[0][0])  # a group's shard committed since: reload
            rows.sort(key=lambda row: groups.get(row[0], 0))
            return _merged(key, [self._from_rows(dataset, key, h, [row]) for row in rows])
        # One row (no groups): read here, no further Python frame on the hot path.
        row = rows[0]
        shard_id, offset, length, spans, _ = row
        shard = self._shards.get(shard_id, _UNKNOWN)
        if shard is _UNKNOWN:
            shard = self._shard_of(dataset, shard_id)
        if shard is None:  # another kind: a folder's from its files, a tar's by its decoder
            folder = self._folders.get(shard_id)
            if folder is not None:
                self.folder_datasets.add(dataset)
                return self._folder_record(dataset, key, folder, offset, length, spans, row[4])
            self.folder_datasets.discard(dataset)
            return self._get_record(dataset, key, h, None, shard_id)
        self.folder_datasets.discard(dataset)
        url, alignment = shard
        try:
            # SourceCache.read's one-pread case without its frame (a local
            # file kept open that still has its name); anything else, or a
            # failure, goes through read() itself.
            fd = self._fds.get(url)
            data = None
            if fd is not None and 0 < length <= ONE_PREAD:
                try:
                    data = _sources.pread_linked(fd, length, offset)
                except OSError:
                    data = None
            if data is None or len(data) != length:
                data = self._sources.read(url, offset, offset + length)
            else:
                self._touch(url)
            return recordcodec.decode_spanned(
                data, key, length, url, offset, alignment, spans, unpack_spans, self._texts
            )
        except (OSError, FormatError) as e:
            # A failed read is reported as it is, unless the cached URL is a
            # moved shard's old place: then the lookup asks again with the
            # statement that names the URL (one more query, on errors only).
            self._shards.pop(shard_id, None)
            if self._shard_of(dataset, shard_id) == shard:
                raise self._read_failed(e, url, dataset) from e
            return self._get_record(dataset, key, h, None)

    def _folder_record(
        self, dataset: str, key: str, url: str, offset: int, length: int, spans: bytes, layout: int
    ) -> Record:
        """A folder group's whole record from the point statement's row: one read per file."""
        signature = self._signatures.get(layout)
        if signature is None:
            (row,) = self._query(self._signature_sql, (layout,))
            signature = self._signatures[layout] = row[0]
        try:
            local = self._local_folders.get(url, _UNKNOWN)
            if local is _UNKNOWN:
                local = self._local_folder(url)
            if local is not None:  # the common case, without the general path's layers
                from .folder import read_local_record

                cached = self._specs.get(signature)
                if cached is None:
                    specs = [EntrySpec(*spec) for spec in self.layouts.get(signature)]
                    pairs = tuple((spec.name, spec.content_type) for spec in specs)
                    cached = self._specs[signature] = (specs, pairs)
                return read_local_record(
                    url, local, key, cached[0], bytes(spans), offset, cached[1]
                )
            data = self._read_range("files", url, key, offset, 0, length, spans, signature)
            return self._decode_folder(data, key, length, url, offset, spans, signature)
        except (OSError, FormatError) as e:
            raise self._read_failed(e, _failed_at(e, url, "files"), dataset, folder=True) from e

    def _local_folder(self, url: str) -> str | None:
        """The path of a local folder group's folder (None: remote), cached by the group's URL."""
        from ..format.folder import folder_of

        folder = folder_of(url)
        local = local_path(folder) if is_local(folder) else None
        self._local_folders[url] = local
        return local

    def _decode_folder(
        self, data: bytes, key: str, length: int, url: str, offset: int, spans: Any, signature: str
    ) -> Record:
        """A folder group's record from its files' bytes end to end, every file checked."""
        return decode_record(
            "files",
            memoryview(data),
            self._row_at(key, length, url, offset, 1, spans, signature),
        )

    def _row_at(
        self, key: str, length: int, url: str, offset: int, alignment: int, spans: Any, sig: str
    ) -> RowAt:
        """A row as its kind's decoder takes it (the layout looked up only if the kind reads it)."""
        layout = partial(self.layouts.get, sig)
        return RowAt(key, length, url, offset, alignment, bytes(spans), layout, self._texts)

    def _shard_of(self, dataset: str, shard_id: int) -> tuple[str, int] | None:
        """``(url, alignment)`` of a native shard (None for other kinds or a purged one).

        Loads (again) the cache of every shard of ``dataset``: one statement.
        """
        for sid, url, alignment, kind, group in self._query(self._shards_sql, (dataset,)):
            self._shards[sid] = (url, int(alignment)) if kind == "native" else None
            if kind == "native":
                self._shard_urls.add(url)
            if group is None:  # not committed: its group is not known yet (statements.SHARDS)
                self._groups.pop(sid, None)
            else:
                self._groups[sid] = int(group)
            if kind in RANGES_OF_FILE:  # a tar sample's, an MDS or LitData sample's range
                self._tars[sid] = url
            elif kind == "files":
                self._folders[sid] = url
        return self._shards.get(shard_id)

    def _get_record(
        self, dataset: str, key: str, h: int, version: Version, tar_id: int | None = None
    ) -> Record:
        """A whole record through the statement that names its shard's URL, kind and layout.

        ``tar_id``: the id of the tar shard the row is in, whose URL the
        compiled path caches: a moved tar's new URL replaces its old one.
        """
        if version is None:
            sql, params = self._record, (dataset, h, key)
        else:
            sql, extra = self._sql("record", version)
            params = (dataset, h, key, *extra)
        rows = self._rows_of("record", dataset, key, version, sql, params)
        return self._records_of(dataset, key, rows, tar_id)

    def _records_of(self, dataset: str, key: str, rows: list[Any], tar_id: int | None) -> Record:
        """The whole record of the record statement's ``rows`` (one per column group)."""
        if len(rows) > 1:  # column groups: each row's record, merged in group order
            rows.sort(key=_GROUP)
            return _merged(key, [self._record_of(dataset, key, row, tar_id) for row in rows])
        return self._record_of(dataset, key, rows[0], tar_id)

    def _record_of(self, dataset: str, key: str, row: Any, tar_id: int | None) -> Record:
        """The whole record of one row of the record statement (:meth:`_get_record`)."""
        url, alignment, offset, length, spans, kind, signature, _ = row
        if tar_id is not None and kind in RANGES_OF_FILE and self._tars.get(tar_id) != url:
            self._tars[tar_id] = url
        try:
            data = self._read_range(kind, url, key, offset, 0, length, spans, signature)
            if kind is None:  # native: decode.decode_native, without its frame or the dispatch
                return recordcodec.decode_spanned(
                    data, key, length, url, offset, alignment, spans, unpack_spans, self._texts
                )
            return decode_record(
                kind,
                memoryview(data),
                self._row_at(key, length, url, offset, alignment, spans, signature),
            )
        except (OSError, FormatError) as e:
            raise self._read_failed(
                e, _failed_at(e, url, kind), dataset, folder=kind == "files"
            ) from e

    def _read_range(
        self,
        kind: str | None,
        url: str,
        key: str,
        offset: int,
        lo: int,
        hi: int,
        spans: bytes,
        signature: str,
    ) -> bytes:
        """Bytes ``[lo, hi)`` of a record: from its shard, or a folder's from its files."""
        if kind == "files":
            names = [name for name, _, _ in self.layouts.get(signature)]
            from .folder import read_folder_record  # folders load on first use

            return read_folder_record(self._folder_files(), url, key, names, bytes(spans), lo, hi)
        return self._sources.read(url, offset + lo, offset + hi)

    def _folder_files(self) -> SourceCache:
        """The cache of folders' files this lookup keeps open: its own, so they never close a shard."""
        files = self._files
        if files is None:
            from .folder import FILES_OPEN

            files = self._files = SourceCache(
                self._sources.storage_options, FILES_OPEN, remote_max_gap=self._remote_max_gap
            )
        return files

    def _point_rows(self, dataset: str, key: str, h: int, version: Version) -> list[Any]:
        """The key's rows (the point statement's columns) at ``version``, base first, or its missing error.

        One row per column group the version sees (docs/GROUPS.md), in group order.
        """
        if version is None:
            sql, params = self._point, (dataset, h, key)
        else:
            sql, extra = self._sql("point", version)
            params = (dataset, h, key, *extra)
        rows = self._rows_of("point", dataset, key, version, sql, params)
        if len(rows) > 1:
            rows.sort(key=_GROUP)
        return rows

    def _get_entries(
        self, dataset: str, key: str, h: int, names: frozenset[str], version: Version
    ) -> Record:
        rows = self._point_rows(dataset, key, h, version)
        record = Record(key, {}, offset=rows[0][2], length=rows[0][3])
        if len(rows) == 1:
            self._row_entries(dataset, key, rows[0], names, record)
            return record
        # Each name from the last group that has it (docs/GROUPS.md): only those rows are read.
        left, plan = set(names), []
        for row in reversed(rows):
            url, _, offset, _, spans, _, signature, _ = row
            mine = {
                w[0] for w in self._wanted(url, offset, bytes(spans), signature, frozenset(left))
            }
            left -= mine
            plan.append((row, frozenset(mine)))
        for row, mine in reversed(plan):
            if mine:
                self._row_entries(dataset, key, row, mine, record)
        return record

    def _row_entries(
        self, dataset: str, key: str, row: Any, names: frozenset[str], record: Record
    ) -> None:
        """The asked-for entries of one row, in one ranged read, put into ``record``."""
        url, _, offset, _, spans, kind, signature, _ = row
        wanted = self._wanted(url, offset, bytes(spans), signature, names)
        if not wanted:
            return
        lo = min(w[3] for w in wanted)
        hi = max(w[3] + w[4] for w in wanted)
        try:
            data = memoryview(self._read_range(kind, url, key, offset, lo, hi, spans, signature))
            for w in wanted:
                record.entries[w[0]] = _wanted_entry(
                    data[w[3] - lo : w[3] - lo + w[4]], w, url, offset
                )
        except (OSError, FormatError) as e:
            raise self._read_failed(
                e, _failed_at(e, url, kind), dataset, folder=kind == "files"
            ) from e

    def read_part(
        self, dataset: str, key: str, name: str, start: int, end: int, version: Version = None
    ) -> memoryview:
        """Bytes ``[start, end)`` of an uncompressed entry, read alone: :meth:`Catalog.read_part`."""
        rows = self._point_rows(dataset, key, _hash(key)[0], version)
        # The last group that has the entry holds the one read (docs/GROUPS.md).
        for row in reversed(rows):
            url, _, offset, _, spans, kind, signature, _ = row
            wanted = self._wanted(url, offset, bytes(spans), signature, frozenset((name,)))
            if wanted:
                break
        else:
            names = tuple(info.name for info in self._describe_rows(rows))
            raise EntryNotFoundError(name, key=key, names=names)
        _, _, codec, e_off, size, _ = wanted[0]
        if codec.label != "none":
            raise ValueError(f"entry {name!r} is compressed ({codec.label}): read it whole")
        if not 0 <= start <= end <= size:
            raise ValueError(f"bytes [{start}, {end}) are not within the entry's {size} bytes")
        if start == end:
            return memoryview(b"")
        try:
            lo, hi = e_off + start, e_off + end
            return memoryview(self._read_range(kind, url, key, offset, lo, hi, spans, signature))
        except (OSError, FormatError) as e:
            raise self._read_failed(
                e, _failed_at(e, url, kind), dataset, folder=kind == "files"
            ) from e

    def describe(self, dataset: str, key: str, version: Version = None) -> list[EntryInfo]:
        """The record's entries from its catalog row (one query, no read): :meth:`Catalog.describe`."""
        return self._describe_rows(self._point_rows(dataset, key, _hash(key)[0], version))

    def _describe_rows(self, rows: list[Any]) -> list[EntryInfo]:
        """The entries of a key's rows in group order; a later group's entry replaces an earlier one."""
        out: dict[str, EntryInfo] = {}
        for row in rows:
            url, _, offset, _, spans, _, signature, _ = row
            for name, ctype, codec, _, size, crc in self._wanted(
                url, offset, bytes(spans), signature, None
            ):
                out[name] = EntryInfo(name, ctype, codec.label, size, crc)
        return list(out.values())

    def _wanted(
        self, url: str, offset: int, spans: bytes, signature: str, names: frozenset[str] | None
    ) -> list[tuple[str, str, Codec, int, int, int]]:
        layout = self.layouts.get(signature)
        located = row_spans(spans, len(layout), url, "rebuild it with reindex", offset)
        return [
            (name, ctype, codec, e_off, size, crc)
            for (name, ctype, codec), (e_off, size, crc) in zip(layout, located)
            if names is None or name in names
        ]

    # --- batches -----------------------------------------------------------

    def get_many(
        self,
        dataset: str,
        keys: Iterable[str],
        entries: Iterable[str] | None = None,
        version: Version = None,
    ) -> BatchResult:
        asked = list(keys)
        unique = dict.fromkeys(asked)
        try:
            hashes = signed_key_hashes(map(str.encode, unique))
        except (UnicodeEncodeError, TypeError):
            for k in unique:
                _hash(k)  # raises InvalidKeyError naming the key
            raise
        names = None if entries is None else frozenset(entries)
        rows, hashed = self._hashed_rows(dataset, hashes, names, version)
        if not rows and (hashes or not asked):
            err = self._missing(dataset, None, version)
            if isinstance(err, DatasetNotFoundError | VersionNotFoundError):
                raise err
        if hashed and rows:
            return self._many_hashed(dataset, asked, unique, hashes, rows, names)
        if names is None:
            return self._many_records(dataset, asked, unique, rows)
        found = _rows_by_key(rows, unique)
        missing = [k for k in unique if k not in found]
        del rows
        records = self._read_batch(dataset, found, names)
        return BatchResult(asked, [records.get(k) for k in asked], missing)

    def _hashed_rows(
        self, dataset: str, hashes: list[int], names: frozenset[str] | None, version: Version
    ) -> tuple[list[Any], bool]:
        """A batch's rows, and whether they are a hash-only dataset's, each ending with its hash.

        A hash-only dataset's rows come with their key hash, so that each row's key can be
        the asked key of its hash, checked by the read that follows (one round of reads,
        not the heads' and then the records'). The batch that meets such a dataset finds
        NULL keys and sends its statement once more: one statement, once per lookup.
        """
        hashed = dataset in self.hash_datasets
        rows = self._batch_rows(dataset, hashes, names, version, hashed)
        if not hashed and rows and rows[0][4] is None:
            self.hash_datasets.add(dataset)
            return self._batch_rows(dataset, hashes, names, version, True), True
        return rows, hashed

    def _batch_rows(
        self,
        dataset: str,
        hashes: list[int],
        names: frozenset[str] | None,
        version: Version,
        hashed: bool,
    ) -> list[Any]:
        """The batch statement's rows for ``hashes`` (``hashed``: each ending with its key hash)."""
        if not hashes:
            return []
        if names is None and version is None:
            # The same statement, through the point lookup (point.py: rows()); None: not handled there.
            rows = self._point_lookup.rows(dataset, hashes, hashed)
            if rows is not None:
                return rows
        kind = ("batch" if names is None else "batch_entries") + ("_hashed" if hashed else "")
        sql, extra = (self._batch, ()) if names is None else (self._batch_entries, ())
        if version is not None or hashed:
            sql, extra = self._sql(kind, version)
        param: Any = hashes if self.dialect == "postgresql" else json.dumps(hashes)
        return self._query(sql, (dataset, param, *extra))

    def _many_records(
        self, dataset: str, asked: list[str], unique: dict[str, Any], rows: list[Any]
    ) -> BatchResult:
        """Whole records of the batch's rows, each with its key (its own or read)."""
        # The rows become the batch decoder's table in one compiled pass
        # (collisions and repeated keys dropped there).
        batch = recordcodec.batch_table(rows, unique)
        if len(batch.keys) < len(rows):  # a key's several rows: column groups (or collisions)
            return self._many_grouped(dataset, asked, unique, rows)
        # 10,000 tuples fewer for the cyclic GC to walk while the reads run.
        del rows
        missing = [k for k in unique if k not in batch.seen]
        records = self._read_records(dataset, batch)
        return BatchResult(asked, [records.get(k) for k in asked], missing)

    def _many_hashed(
        self,
        dataset: str,
        asked: list[str],
        unique: dict[str, Any],
        hashes: list[int],
        rows: list[Any],
        names: frozenset[str] | None,
    ) -> BatchResult:
        """A hash-only dataset's batch in one round of reads, not two.

        A row whose hash is the only row's of that hash and one asked key's takes that key
        without reading it. Whole records (``names`` None): the record's decoder compares
        the key the record holds with it. Some entries: the row's head is read in the batch
        of the entries' reads and compared before any entry is decoded. A row of another
        key (a collision with a key not asked) or a changed shard fails that check, and the
        batch is then answered by reading every row's key first (the path of
        :meth:`_with_keys`, which drops collisions and reports damage). Only rows of an
        ambiguous hash (two rows, or two asked keys) have their keys read up front.
        """
        assumed, check = _assumed_keys(unique, hashes, rows)
        if names is None:
            try:
                keyed = self._with_keys(dataset, assumed)
                return self._many_records(dataset, asked, unique, keyed)
            except FormatError:  # another key than the one assumed, or a damaged record
                return self._many_records(dataset, asked, unique, self._with_keys(dataset, rows))
        try:
            found = _rows_by_key(self._with_keys(dataset, assumed), unique)
            records = self._read_batch(dataset, found, names, check)
        except _NotTheKey:
            found = _rows_by_key(self._with_keys(dataset, rows), unique)
            records = self._read_batch(dataset, found, names)
        missing = [k for k in unique if k not in found]
        return BatchResult(asked, [records.get(k) for k in asked], missing)

    def _many_grouped(
        self, dataset: str, asked: list[str], unique: dict[str, Any], rows: list[Any]
    ) -> BatchResult:
        """Whole records of keys with column groups: each group's rows read as a batch, merged.

        At most one ranged read per group of a key (merged with its neighbours'
        as any batch is); the base's rows come first, the groups' in group order.
        """
        by_group: dict[int, list[Any]] = {}
        for row in rows:
            by_group.setdefault(row[statements.BATCH_GROUP], []).append(row)
        del rows
        parts: dict[str, list[Record]] = {}
        for group in sorted(by_group):
            batch = recordcodec.batch_table(by_group[group], unique)
            for key, record in self._read_records(dataset, batch).items():
                parts.setdefault(key, []).append(record)
        records = {k: p[0] if len(p) == 1 else _merged(k, p) for k, p in parts.items()}
        missing = [k for k in unique if k not in records]
        return BatchResult(asked, [records.get(k) for k in asked], missing)

    def describe_many(
        self,
        dataset: str,
        keys: Iterable[str],
        want: Callable[[EntryInfo], bool],
        version: Version = None,
    ) -> DescribedBatch:
        """:meth:`Catalog.describe_many`: one query; the entries ``want`` picks read, each checked."""
        asked = list(dict.fromkeys(keys))
        try:
            hashes = signed_key_hashes(map(str.encode, asked))
        except (UnicodeEncodeError, TypeError):
            for k in asked:
                _hash(k)  # raises InvalidKeyError naming the key
            raise
        rows, hashed = self._hashed_rows(dataset, hashes, frozenset(), version)
        if not rows and hashes:
            err = self._missing(dataset, None, version)
            if isinstance(err, DatasetNotFoundError | VersionNotFoundError):
                raise err
        if hashed and rows:
            assumed, check = _assumed_keys(dict.fromkeys(asked), hashes, rows)
            try:
                return self._described(
                    dataset, asked, self._with_keys(dataset, assumed), want, check
                )
            except _NotTheKey:
                rows = self._with_keys(dataset, rows)  # every key read from its record
        return self._described(dataset, asked, rows, want)

    def _described(
        self,
        dataset: str,
        asked: list[str],
        rows: list[Any],
        want: Callable[[EntryInfo], bool],
        check: frozenset[tuple[str, int]] = frozenset(),
    ) -> DescribedBatch:
        """:meth:`describe_many` of rows that each have their key (``check``: assumed ones)."""
        found = _rows_by_key(rows, dict.fromkeys(asked))
        described: dict[str, list[EntryInfo]] = {}
        plan = []
        for key, key_rows in found.items():
            everies = [
                self._wanted(row[0], row[1], bytes(row[3]), row[7], None) for row in key_rows
            ]
            # A later group's entry of a name is the one described and read (docs/GROUPS.md).
            holder = {w[0]: i for i, every in enumerate(everies) for w in every}
            infos: dict[str, EntryInfo] = {}
            for i, (row, every) in enumerate(zip(key_rows, everies)):
                chosen = []
                for w in every:
                    info = EntryInfo(w[0], w[1], w[2].label, w[4], w[5])
                    infos[w[0]] = info
                    if holder[w[0]] == i and want(info):
                        chosen.append(w)
                plan.append((key, row, chosen))
            described[key] = list(infos.values())
        # A record whose bytes do not match its row is its key's error, not the batch's.
        records, errors = self._read_plan(dataset, plan, isolate=True, check=check)
        return DescribedBatch(described, records, errors, [k for k in asked if k not in found])

    def _read_batch(
        self,
        dataset: str,
        found: dict[str, list[Any]],
        names: frozenset[str],
        check: frozenset[tuple[str, int]] = frozenset(),
    ) -> dict[str, Record]:
        plan = []
        for key, key_rows in found.items():
            for row in key_rows:  # base first, then each group (only those holding a name are read)
                url, offset = row[:2]
                plan.append((key, row, self._wanted(url, offset, bytes(row[3]), row[7], names)))
        records, _ = self._read_plan(dataset, plan, isolate=False, check=check)
        return records

    def _read_plan(
        self,
        dataset: str,
        plan: list[tuple[str, Any, list[Any]]],
        *,
        isolate: bool,
        check: frozenset[tuple[str, int]] = frozenset(),
    ) -> tuple[dict[str, Record], dict[str, Exception]]:
        """Each planned record's chosen entries, read in one coalesced batch and checked.

        ``plan``: ``(key, row, chosen entries)`` per record. A record whose bytes
        do not match its row raises, or with ``isolate`` is that key's error.
        ``check``: the ``(url, offset)`` of rows whose key was assumed (a hash-only
        dataset's): their heads are read in the same batch and must name the key, or
        :class:`_NotTheKey` is raised before any entry is decoded.
        """
        requests = [_entry_request(key, row, w) for key, row, chosen in plan for w in chosen]
        heads = [(key, row[:3]) for key, row, _ in plan if (row[0], row[1]) in check]
        in_folder = any(row[6] == "files" for _, row, _ in plan)
        try:
            views = self._sources.read_batch(requests + [head_request(*at) for _, at in heads])
        except (ShardNotFoundError, StorageError) as e:
            raise self._read_failed(e, e.path, dataset, folder=in_folder) from e
        for (key, at), head in zip(heads, views[len(requests) :]):
            try:
                held = head_key_of(self._sources, head, at)
            except FormatError:
                raise _NotTheKey from None  # read again the two-round way, which reports it
            except (ShardNotFoundError, StorageError) as e:
                raise self._read_failed(e, e.path, dataset) from e
            if held != key:
                raise _NotTheKey
        records: dict[str, Record] = {}
        errors: dict[str, Exception] = {}
        at = 0
        for key, row, chosen in plan:
            url, offset, length = row[:3]
            try:
                # A key's rows come base first: its record takes the base's place; the
                # groups' rows add their entries to it.
                record = records.get(key)
                if record is None:
                    record = Record(key, {}, offset=offset, length=length)
                for j, w in enumerate(chosen):
                    view = views[at + j]
                    if row[6] == "files" and len(view) != w[4]:
                        from .folder import check_read

                        check_read(view, requests[at + j][0], 0, w[4])
                    record.entries[w[0]] = _wanted_entry(view, w, url, offset)
                if key not in errors:
                    records[key] = record
            except FormatError as e:
                records.pop(key, None)
                if not isolate:
                    raise self._read_failed(
                        e, _failed_at(e, url, row[6]), dataset, folder=row[6] == "files"
                    ) from e
                errors[key] = self._read_failed(
                    e, _failed_at(e, url, row[6]), dataset, folder=row[6] == "files"
                )
            at += len(chosen)
        return records, errors

    def _read_records(self, dataset: str, batch: BatchTable) -> dict[str, Record]:
        """Whole records: sorted and merged reads of the batch's table, one decoder call."""
        import numpy as np

        if not batch.keys:
            return {}
        table = batch.table[np.lexsort((batch.table["offset"], batch.table["shard"]))]
        urls, alignments, keys, spans = batch.urls, batch.alignments, batch.keys, batch.spans
        other = {row: (kind, signature) for row, kind, signature in batch.others}
        # A folder's records are read from their files, not from a range of their shard.
        folder = [row for row, (kind, _) in other.items() if kind == "files"]
        found: dict[int, Record] = {}
        if folder:
            mine = np.isin(table["row"], folder)
            found = self._read_folder_rows(dataset, batch, table[mine], other)
            table = table[~mine]
            for row in folder:
                del other[row]
            if not len(table):
                return {keys[row]: record for row, record in found.items()}
        blobs = self._read_packed(urls, table)
        if blobs is None:
            blobs = self._read_merged(dataset, urls, table)
        # Native records in one call of the record codec's batch decoder; rows of
        # other kinds (tar samples indexed in place) one by one, by their kind.
        native = np.ones(len(keys), dtype=bool)
        native[list(other)] = False
        native = native[table["row"]]
        try:
            records = recordcodec.decode_batch(
                blobs,
                table[native] if other else table,
                keys,
                spans,
                urls,
                alignments,
                unpack_spans,
                self._texts,
            )
        except FormatError as e:
            raise self._read_failed(e, e.path, dataset) from e
        for blob, shard, row, _, at, length, offset in table[~native].tolist():
            url = urls[shard]
            kind, signature = other[row]
            try:
                records[row] = decode_record(
                    kind,
                    blobs[blob][at : at + length],
                    self._row_at(
                        keys[row], length, url, offset, alignments[shard], spans[row], signature
                    ),
                )
            except FormatError as e:
                raise self._read_failed(e, url, dataset) from e
        for row, record in found.items():
            records[row] = record
        return dict(zip(keys, records))  # type: ignore[arg-type]  # every row has a record

    def _read_folder_rows(
        self, dataset: str, batch: BatchTable, table: np.ndarray, other: dict[int, Any]
    ) -> dict[int, Record]:
        """Whole records of folders indexed in place: all their files in one batch of reads."""
        from .folder import Requests, folder_requests, join_reads, read_requests

        rows = table.tolist()
        plans = []
        requests: Requests = []
        for _, shard, row, _, _, length, offset in rows:
            url, key, signature = batch.urls[shard], batch.keys[row], other[row][1]
            names = [name for name, _, _ in self.layouts.get(signature)]
            wanted = folder_requests(url, key, names, bytes(batch.spans[row]), 0, length)
            plans.append((row, url, key, length, offset, signature, len(requests), len(wanted)))
            requests.extend(wanted)
        try:
            views = read_requests(requests, self._folder_files())
        except (ShardNotFoundError, StorageError) as e:
            raise self._read_failed(e, e.path, dataset, folder=True) from e
        out: dict[int, Record] = {}
        for row, url, key, length, offset, signature, at, n in plans:
            try:
                data = join_reads(requests[at : at + n], views[at : at + n])
                spans = batch.spans[row]
                out[row] = self._decode_folder(data, key, length, url, offset, spans, signature)
            except FormatError as e:
                raise self._read_failed(e, e.path or url, dataset, folder=True) from e
        return out

    def _read_packed(self, urls: list[str], table: np.ndarray) -> list[memoryview] | None:
        """Every record of ``table`` read into packed buffers, if all its shards are local files.

        The local batch path: one compiled call reads the records
        of each file with as few ``preadv`` as gaps of up to 8 KiB allow,
        straight into ~1 MiB buffers that hold the records alone (no bytes
        object per read, no join), and sets each row's ``blob`` and ``at``.
        None where a shard is not a local file or a read failed or came back
        short: :meth:`_read_merged` then reads (and reports) as before.
        """
        if len(urls) > self._sources.max_open:
            return None  # opening the last would close the first: _read_merged reads file by file
        fds: list[int] = []
        try:
            with ExitStack() as held:
                for url in urls:
                    src = self._sources.source(url)  # reopened here if deleted or replaced
                    if not isinstance(src, FileSource) or src.pread_fd is None:
                        return None
                    # Open until the compiled reads end (they run without the GIL).
                    fds.append(held.enter_context(src.held()))
                buffers = recordcodec.read_packed(
                    fds, table, LOCAL_MAX_GAP, _JOIN_BYTES, self._read_pool, _POOL_BUFFERS
                )
        except OSError:
            return None
        if buffers is None:
            return None
        return [b if isinstance(b, memoryview) else memoryview(b) for b in buffers]

    def _read_merged(self, dataset: str, urls: list[str], table: np.ndarray) -> list[memoryview]:
        """Every record of ``table`` through merged reads of any store; sets ``blob`` and ``at``."""
        import numpy as np

        start = table["offset"].astype(np.int64)
        try:
            reads, merged = self._sources.read_sorted(
                urls, table["shard"], start, start + table["length"].astype(np.int64)
            )
        except (ShardNotFoundError, StorageError) as e:
            raise self._read_failed(e, e.path, dataset) from e
        lengths = table["length"].astype(np.int64)
        compact = _compacted(reads, merged, start, lengths)
        if compact is not None:
            blobs, table["blob"], table["at"] = compact
            return blobs
        blobs, base, which = _joined(reads, merged)
        table["blob"] = which[merged.read]
        table["at"] = base[merged.read] + start - merged.start[merged.read]
        return blobs

    # --- errors ------------------------------------------------------------

    def _read_failed(
        self, e: BaseException, url: str | None, dataset: str, *, folder: bool = False
    ) -> Exception:
        """A read error, restated: which shard (or, ``folder``, which file), what it means, what to do."""
        if url is not None:
            self._sources.forget(url)  # reopened on next use
        shown = redact(url) if url else "a shard"
        fix = (
            f"run `shardcat verify` on dataset {dataset!r} to list the affected shards, then restore them "
            "or rebuild their rows with `shardcat reindex` (Catalog.verify / Catalog.reindex)"
        )
        if folder:
            fix = (
                f"restore the file, or index the folder again (`shardcat index-files`) for a new "
                f"version of dataset {dataset!r} that reads it as it is now"
            )
        if isinstance(e, FormatError):
            return type(e)(
                f"{e.detail}; the shard no longer matches the catalog (changed since it was registered): {fix}",
                path=e.path or shown,
                offset=e.offset,
            )
        if isinstance(e, StorageError) and type(e) is not StorageError:
            # Already says what to do (no credentials, unreachable, no bucket,
            # denied): the same error, as a new object the caller chains to it.
            return copy.copy(e)
        if isinstance(e, FileNotFoundError):
            what = "file of a folder indexed in place" if folder else "shard"
            return ShardNotFoundError(
                f"{shown}: the catalog names this {what} but it does not exist (deleted or moved?): {fix}",
                path=shown,
            )
        # The store's own error, not the storage layer's restatement of it (which names the file).
        cause = e.__cause__ if isinstance(e, StorageError) and e.__cause__ is not None else e
        said = next((line.strip() for line in str(cause).splitlines() if line.strip()), "")
        return StorageError(f"{shown}: reading the shard failed: {said}", path=shown)

    def close(self) -> None:
        """Close its connections and files (idempotent); call with :attr:`gate` held."""
        if self.closed:
            return
        self.closed = True
        point = self._point_lookup
        point.close()  # new calls are not handled; a compiled one in flight closes it
        # A compiled call in flight on the lookup's thread (it takes no gate) still
        # reads the files and may query the connection closed below: wait for it.
        me = threading.get_ident()
        fence.wait_for_compiled(lambda: point.busy not in (0, me))
        self._sources.close()
        if self._files is not None:
            self._files.close()
        self._read_pool.clear()
        self.raw.close()


_GROUP = operator.itemgetter(statements.GROUP)
_BATCH_GROUP = operator.itemgetter(statements.BATCH_GROUP)


class _NotTheKey(Exception):
    """A row's record holds another key than the one a hash-only batch assumed for it."""


def _assumed_keys(
    unique: dict[str, Any], hashes: list[int], rows: list[Any]
) -> tuple[list[Any], frozenset[tuple[str, int]]]:
    """A hash-only batch's rows, each alone on its hash given the asked key of that hash.

    ``rows`` end with their key hash (``batch_sql(..., hashes=True)``). A hash two rows
    share, or two asked keys, gives no key (the row's is read from its record). Returns
    the rows and the ``(url, offset)`` of those given one: a read must check those.
    """
    by_hash: dict[int, str | None] = {}
    for asked, h in zip(unique, hashes):
        by_hash[h] = None if h in by_hash else asked
    rows_of = Counter(row[statements.BATCH_KEY_HASH] for row in rows)
    out, given = [], []
    for row in rows:
        h = row[statements.BATCH_KEY_HASH]
        key = by_hash.get(h) if row[4] is None and rows_of[h] == 1 else None
        if key is None:
            out.append(row)
        else:
            out.append((*row[:4], key, *row[5:]))
            given.append((row[0], row[1]))
    return out, frozenset(given)


_JOIN_BYTES = 1 << 20
"""The batch path joins its reads into buffers of about this size."""

_POOL_BUFFERS = 64
"""Buffers of ``_JOIN_BYTES`` a lookup keeps for its next local batch (64 MiB at most).

A batch read into new memory faults in every page of it, about half of
the read's time for 10,000 keys of 2-8 KiB on a 2-core VM;
buffers no record refers to any more are written again instead
(``_ccodec.read_packed``)."""


def _rows_by_key(rows: list[Any], wanted: dict[str, Any]) -> dict[str, list[Any]]:
    """A batch's rows of the keys asked for, per key, in group order (one row without groups)."""
    found: dict[str, list[Any]] = {}
    several = False
    for row in rows:
        key = row[4]
        if key not in wanted:  # equal hashes, other key: a collision, never a match
            continue
        had = found.get(key)
        if had is None:
            found[key] = [row]
        else:
            had.append(row)
            several = True
    if several:
        for key_rows in found.values():
            key_rows.sort(key=_BATCH_GROUP)
    return found


def _failed_at(e: BaseException, url: str, kind: str | None) -> str:
    """What a failed read names: the shard, or the file of a folder's entry that failed."""
    path = getattr(e, "path", None) if kind == "files" else None
    return path or url


def _entry_request(key: str, row: Any, w: Any) -> tuple[str, ByteRange]:
    """The one read of an entry (a batch row's): a range of its shard, or a folder's file."""
    url, offset = row[0], row[1]
    if row[6] == "files":
        from ..format.folder import entry_path, folder_of

        # One byte past the indexed size: a file that grew since says so (_read_plan).
        return entry_path(folder_of(url), key, w[0]), ByteRange(0, w[4] + 1)
    return url, ByteRange(offset + w[3], offset + w[3] + w[4])


def _joined(
    blobs: list[bytes | memoryview], merged: MergedReads
) -> tuple[list[memoryview], np.ndarray, np.ndarray]:
    """The reads of a batch joined into buffers of about 1 MiB: (buffers, base, which).

    Read ``i`` lies at ``base[i]`` in ``buffers[which[i]]``. The records keep
    their buffer; a few joined buffers instead of a memoryview (and its
    managed buffer) per read leave no GC-tracked object per record behind,
    and copying the bytes once costs less than the collections those objects
    cause. Reads that came back short (a file ends early) are kept as they
    are, so a record that overruns one is still found truncated.
    """
    import numpy as np

    n = len(blobs)
    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=n)
    if n < 2 or not np.array_equal(sizes, merged.end - merged.start):
        views = [memoryview(b) for b in blobs]
        return views, np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)
    out, which, base = _join_groups(blobs, sizes)
    return out, base, which


def _join_groups(
    parts: Sequence[bytes | memoryview], sizes: np.ndarray
) -> tuple[list[memoryview], np.ndarray, np.ndarray]:
    """``parts`` (of ``sizes`` bytes) joined in order into buffers of about ``_JOIN_BYTES``.

    Returns ``(buffers, which, base)``: part ``i`` lies at ``base[i]`` in
    ``buffers[which[i]]``.
    """
    import numpy as np

    n = len(parts)
    at = np.cumsum(sizes) - sizes  # where each part lands if all were joined
    group = at // _JOIN_BYTES
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = group[1:] != group[:-1]
    firsts = np.flatnonzero(new)
    which = np.cumsum(new) - 1
    base = at - at[firsts][which]
    bounds = [*firsts.tolist(), n]
    return [memoryview(b"".join(parts[a:b])) for a, b in pairwise(bounds)], which, base


def _compacted(
    blobs: list[bytes | memoryview], merged: MergedReads, start: np.ndarray, length: np.ndarray
) -> tuple[list[memoryview], np.ndarray, np.ndarray] | None:
    """Each record's bytes cut from reads mostly of gaps, joined into buffers of ~1 MiB.

    Returns ``(buffers, blob, at)`` (record ``i`` at ``at[i]`` in
    ``buffers[blob[i]]``), or None where the reads are mostly records (where
    :func:`_joined` copies about as much, with no slice per record) or one
    came back short. Remote batches may read through gaps of up to a MiB
    (an explicit :func:`~shardcat.storage.resolve_remote_max_gap`): records
    keeping those reads would hold ~20 times their own size (200 KB read per
    10 KB record at 1,000 keys of 40,000) for as long as any of them lives,
    and joining them would copy every gap once more.
    """
    import numpy as np

    sizes = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
    wanted = int(length.sum())
    if int(sizes.sum()) <= 2 * wanted or not np.array_equal(sizes, merged.end - merged.start):
        return None
    views = [memoryview(b) for b in blobs]
    offsets = (start - merged.start[merged.read]).tolist()
    ends = (start - merged.start[merged.read] + length).tolist()
    pieces = [views[r][a:b] for r, a, b in zip(merged.read.tolist(), offsets, ends)]
    return _join_groups(pieces, length)


def _wanted_entry(
    view: memoryview, wanted: tuple[str, str, Codec, int, int, int], url: str, offset: int
) -> Entry:
    """One asked-for entry of the record at ``offset``, from the bytes of its payload, checked."""
    name, ctype, codec, e_off, size, crc = wanted
    return decode_entry(
        view,
        name=name,
        content_type=ctype,
        codec=codec,
        size=size,
        crc=crc,
        path=url,
        offset=offset + e_off,
    )
