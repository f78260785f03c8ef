"""The point lookup: the compiled one (``_cpoint.c``), its Python twin, or none.

``Catalog.get(dataset, key)`` of the latest version's whole record first
asks the lookup's point object (``Lookup.fast_get``); ``get_many`` of whole
records at the latest version asks it for the batch statement's rows. Every
lookup has one, with the same calls (:func:`open_point`), so callers never
ask which:

* the compiled ``Point`` (file-backed SQLite catalogs) does it in one C
  call: the key's hash, one step of the *same* prepared statement the
  Python path runs (so the statement alone decides visibility: committed
  shards, live records), the shard's cached URL and open descriptor, one
  ``pread``, and the record codec's ``decode_spanned``. A tar shard takes
  the same statement, cache and ``pread``, then the layout's entry names
  (cached per layout id; a :class:`TarFinisher` fills the cache) and calls
  the record codec's ``tar_record`` (``read_tar_record`` compiled, every
  CRC32C checked). It runs on a read-only connection of its own;
* :class:`~.pypoint.PyPoint`, its Python twin, where the compiled one would
  run (file-backed SQLite) in the Python mode (below): the same steps on
  the lookup's own connection, with the record codec's functions it is
  handed; the reference the compiled one is tested against;
* :class:`~.pypoint.NoPoint` everywhere else (PostgreSQL, in-memory
  SQLite, SQLite URI options, a compiled one that could not open): it
  declines every call at once, running nothing.

A key with column groups (one row per group, up to ``MAX_ROWS``) is
handled too: each row's record is read (one ``pread`` per group) and
decoded as a one-row key's, then merged in group order
(:class:`~shardcat.format.merged.MergedRecord`; the twin's
:func:`~.pypoint.merge_point`): one statement, one read per group.

A hash-only dataset (``keys="hash"``: no key text in the catalog,
docs/CATALOG.md "Hash-only datasets") that the lookup has found
(``Lookup.hash_datasets``) takes its own statement, bound as dataset and
key hash: every candidate row of the hash. Each candidate's record is read
the same way (cached shard, descriptor, one ``pread``), and decoded only if
its head names the asked key: a collision's other key is skipped, and the
one record that holds the key is the answer. None of them (a missing key),
more than ``MAX_ROWS`` candidates, two that hold the key (never in a
consistent catalog), or a candidate not handled is "not handled": the
Python path asks again.

The compiled one returns "not handled" (None) for: no row, a statement
that fails, a shard not cached yet, no open descriptor, a read that fails
or comes back short, a record the decoder or the finisher rejects, a
closed lookup, a forked child's copy; the Python path in :mod:`.lookup`
then answers (entries= and version= always go there), so its errors and
recovery stay the only ones. The twin declines in the same cases, but
once it has run the statement it hands the rows to that Python path
instead of returning None: the statement never runs twice in the Python
mode. ``tests/catalog/test_point_twin.py`` runs the two side by side on
the same lookup state.

SQLite's functions are looked up at run time in the library Python's own
``_sqlite3`` module uses: a second copy of SQLite in one process would
break its POSIX locks (sqlite.org/howtocorrupt.html, 2.2.1). Where they
cannot be found, the compiled path is off.

``SHARDCAT_POINT_LOOKUP`` chooses, when shardcat is imported:

``auto`` (default)
    The compiled path where it was built and SQLite's functions were found.
``compiled``
    The same, and importing shardcat fails where it is not available.
``python``
    The Python twin (on file-backed SQLite) and the Python path.

``SHARDCAT_RECORD_CODEC=python`` chooses the twin as well (with the
reference codec's functions). :func:`use` switches; lookups opened after a
switch follow it.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .. import config
from ..catalog import fence
from ..catalog.connection import RawConnection
from ..format import Record, implementations, recordcodec
from ..format.implementations import Name
from ..format.merged import MergedRecord
from ..format.spec import Codec
from ..storage.cache import ONE_PREAD
from .pypoint import NoPoint, PointLookup, PyPoint, Rest

__all__ = [
    "ENV_VAR",
    "NoPoint",
    "PointLookup",
    "PyPoint",
    "TarFinisher",
    "active",
    "available",
    "is_compiled",
    "load",
    "narrow_key_hashes",
    "open_point",
    "use",
]

ENV_VAR = config.env_var("point_lookup")

_log = logging.getLogger(__name__)

_compiled: Any
_missing: BaseException | None = None
try:
    _compiled = importlib.import_module(f"{__package__}._cpoint")
except ImportError as e:  # built without a compiler, or a source checkout not built
    _compiled = None
    _missing = e

_sqlite_version: int | None = None


def _sqlite_library() -> str | None:
    """The file of Python's ``_sqlite3`` module (loaded here: the lookup needs it anyway)."""
    try:
        import _sqlite3
    except ImportError:
        return None
    return getattr(_sqlite3, "__file__", None)


def load(library: str | None = "_sqlite3") -> bool:
    """Look SQLite's functions up in ``library``, a loaded shared object; True if all were found.

    The default is the file of Python's ``_sqlite3`` module, whose SQLite
    is the one every other connection of the process uses; None searches
    the whole process. Tests pass a library without SQLite to check that
    the fast path turns itself off. Lookups opened afterwards follow.
    """
    global _sqlite_version, _missing
    if _compiled is None:
        return False
    path = _sqlite_library() if library == "_sqlite3" else library
    _sqlite_version = _compiled.bind(path)
    if _sqlite_version is None:
        _missing = ImportError(f"SQLite's functions were not found in {path or 'the process'}")
    return _sqlite_version is not None


def available() -> bool:
    """Whether the compiled point lookup was built and found SQLite's functions."""
    return _compiled is not None and _sqlite_version is not None


COMPONENT = "point lookup"

# Nothing is rebound: open_point asks which side is active when a lookup opens.
implementations.register(
    implementations.Component(
        COMPONENT, ENV_VAR, globals(), {}, {}, built=available, missing=lambda: _missing
    )
)


def is_compiled(point: object) -> bool:
    """Whether ``point`` (a lookup's, from :func:`open_point`) is the compiled one."""
    return _compiled is not None and isinstance(point, _compiled.Point)


def narrow_key_hashes(mask: int) -> int:
    """Keep only ``mask``'s bits of a key's hash in compiled lookups; returns the previous mask.

    The test hook :func:`shardcat.testing.collisions.colliding_key_hashes`
    narrows Python's key hash, and through this the compiled lookup's, which
    hashes keys itself: keys written inside the block collide there too. A
    no-op returning ``mask`` where the compiled lookup was not built.
    """
    if _compiled is None:
        return mask
    return int(_compiled.narrow_key_hashes(mask))


def active() -> Name:
    """``"compiled"`` if new lookups take the compiled path, else ``"python"``."""
    return implementations.active(COMPONENT)


def use(name: str) -> Name:
    """Switch the point lookup of lookups opened from now on; returns the previous choice.

    Raises
    ------
    CodecUnavailableError
        ``"compiled"`` was asked for but it is not available.
    ValueError
        An unknown name.
    """
    return implementations.use(COMPONENT, name)


def open_point(
    raw: RawConnection,
    gate: threading.RLock,
    sql: str,
    shards: dict[int, tuple[str, int] | None],
    fds: Mapping[str, int],
    touch: Callable[[str], None],
    unpack: Callable[..., Any],
    texts: dict[Any, Any],
    tars: dict[int, str],
    parse: Callable[[str], list[tuple[str, str, Codec]]],
    batch_sql: str | None = None,
    rest: Rest | None = None,
    groups: dict[int, int] | None = None,
    hash_sql: str | None = None,
    hash_datasets: set[str] | None = None,
    hash_batch_sql: str | None = None,
) -> PointLookup:
    """The point lookup for a lookup's state: compiled, its Python twin, or one that declines.

    ``sql`` is the lookup's own statement (bound as dataset, key hash,
    key; it selects shard id, offset, length, spans and layout id);
    ``shards``, ``fds`` and ``touch`` are the lookup's shard cache, its
    source cache's open descriptors and LRU mark, read in place; ``tars``
    maps a tar shard's id to its URL, and ``parse`` (``LayoutCache.get``)
    gives a layout's entries to the :class:`TarFinisher` of tar samples. The object's
    ``get(dataset, key, decode)`` returns a record or None. ``batch_sql`` is the
    lookup's batch statement of whole records at the latest version (bound as
    dataset and a JSON array of key hashes, an array on PostgreSQL): the object's
    ``rows(dataset, hashes)`` returns its rows as the Python driver would, or None.
    ``gate`` is the lookup's, held by each call of the Python twin; ``rest``
    its Python path from the point statement's rows on, to which the twin
    hands what it does not handle once it has run the statement. ``groups``
    is the lookup's shard id → column group cache (filled with ``shards``):
    with it, a key with column groups (up to ``MAX_ROWS`` rows) is handled,
    each row read and decoded as a one-row key's, in group order, and merged
    (:class:`~shardcat.format.merged.MergedRecord`); without it such keys are
    not handled. ``hash_sql`` (bound as dataset and key hash; the same five
    columns as ``sql``) is the hash-only candidates' statement, taken for the
    datasets in ``hash_datasets`` (the lookup's set, read in place); without
    them hash-only datasets are not handled. ``hash_batch_sql`` is the batch
    statement whose rows end with their key hash (a hash-only dataset's batch):
    ``rows(dataset, hashes, True)`` runs it.

    The twin serves where the compiled one would (a file-backed SQLite
    catalog) in the Python mode, as its reference; elsewhere (PostgreSQL,
    in-memory SQLite, URI options, or a compiled one that could not open)
    a :class:`NoPoint` declines every call without running anything.
    """
    if raw.file is None:
        # URI options (mode=, immutable=, vfs=...): only the Python driver applies them.
        return NoPoint()
    finish = TarFinisher(raw.query, raw.placeholder, parse, recordcodec.tar_record)
    # The state both take, in the compiled Point's order after its own arguments.
    state = (shards, fds, touch, unpack, texts, ONE_PREAD, tars, finish, batch_sql)
    if active() == "compiled" and recordcodec.active() == "compiled":
        compiled = _open_compiled(raw, sql, state, groups, hash_sql, hash_datasets, hash_batch_sql)
        return NoPoint() if compiled is None else compiled
    return PyPoint(
        raw,
        gate,
        sql,
        *state,
        rest,
        groups,
        hash_sql=hash_sql,
        hash_datasets=hash_datasets,
        hash_batch_sql=hash_batch_sql,
    )


def _open_compiled(
    raw: RawConnection,
    sql: str,
    state: tuple[Any, ...],
    groups: dict[int, int] | None,
    hash_sql: str | None,
    hash_datasets: set[str] | None,
    hash_batch_sql: str | None,
) -> PointLookup | None:
    """The compiled ``Point`` for a file-backed SQLite lookup's state, or None if it cannot open."""
    conn = raw.conn
    try:
        rows = conn.execute("PRAGMA database_list").fetchall()
        file = next((row[2] for row in rows if row[1] == "main"), "")
        if not file:  # in memory or temporary: another connection cannot see it
            return None
        # The same busy timeout, page cache and memory map as the lookup's Python connection.
        (busy_ms,) = conn.execute("PRAGMA busy_timeout").fetchone()
        (cache_size,) = conn.execute("PRAGMA cache_size").fetchone()
        (mmap_size,) = conn.execute("PRAGMA mmap_size").fetchone()
        return _compiled.Point(  # type: ignore[no-any-return]
            file,
            sql,
            int(busy_ms),
            int(cache_size),
            *state,
            *_merging(groups),
            hash_sql=hash_sql,
            hash_datasets=hash_datasets,
            mmap_size=int(mmap_size),
            hash_batch_sql=hash_batch_sql,
        )
    except Exception as e:
        # Cannot open or prepare (or a file name SQLite cannot hand back as
        # text): the Python path serves this lookup, as it would without C.
        _log.debug("compiled point lookup off for %s: %s", raw.url, e)
        return None


def _merging(groups: dict[int, int] | None) -> tuple[Any, Any]:
    """The compiled Point's ``merge`` and ``groups``: both, or neither (keys with groups declined)."""
    return (None, None) if groups is None else (MergedRecord, groups)


class TarFinisher:
    """What the point lookup (compiled or twin) needs to finish a tar sample's record.

    The point lookup calls the record codec's ``tar_record``
    (:attr:`decode`: ``read_tar_record`` compiled or its reference, every
    payload's CRC32C checked, the same :class:`~shardcat.format.Record`
    (:attr:`record`) and entries) itself, with the layout's
    ``(name, content_type)`` pairs from :attr:`specs`, which it fills by
    calling this object on a miss: one query per layout and thread (a
    layout never changes for an id). None, or any error, tells the point
    lookup "not handled": the Python path then asks again and raises the
    typed error from ``read_tar_record`` itself. Not a method of the lookup:
    the point lookup holds it, and a bound method would make a reference
    cycle of the two. ``query`` is the lookup's ``RawConnection.query``,
    ``parse`` its shared ``LayoutCache.get``.
    """

    __slots__ = ("_parse", "_query", "_sql", "decode", "record", "specs")

    def __init__(
        self,
        query: Callable[[str, tuple[Any, ...]], list[Any]],
        placeholder: str,
        parse: Callable[[str], list[tuple[str, str, Codec]]],
        decode: Callable[..., Record | None],
    ) -> None:
        self._query = query
        self._sql = f"SELECT signature FROM layouts WHERE id = {placeholder}"
        self._parse = parse
        self.specs: dict[int, tuple[tuple[str, str], ...]] = {}
        """Layout id → its entries' ``(name, content_type)``, in the tar sample's order."""
        self.decode = decode
        self.record = Record

    def __call__(self, layout_id: int) -> tuple[tuple[str, str], ...] | None:
        """The entries of layout ``layout_id``, read and cached; None if it is gone."""
        rows = self._query(self._sql, (layout_id,))
        if not rows:  # gone since the row was read: the Python path asks again
            return None
        specs = tuple((name, ctype) for name, ctype, _ in self._parse(rows[0][0]))
        self.specs[layout_id] = specs
        return specs


load()
use(implementations.configured(COMPONENT))
if _compiled is not None:
    # A fork turns new compiled calls away and waits for those in flight (fence.py).
    fence.register_compiled(_compiled.hold, _compiled.inflight)
