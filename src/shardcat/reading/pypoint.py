"""The Python twin of the compiled point lookup (``_cpoint.c``): the same calls, in Python.

:func:`.point.open_point` gives every lookup a point lookup, so
``Catalog.get`` and ``get_many`` run the same calls in every mode and
never ask whether there is one: the compiled object where it applies
(file-backed SQLite, both compiled switches on); on file-backed SQLite in
the Python mode (``SHARDCAT_POINT_LOOKUP=python``, ``point.use("python")``
or the reference record codec) a :class:`PyPoint`, the reference the
compiled one is tested against; everywhere else (PostgreSQL, in-memory
SQLite, SQLite URLs with query options) a :class:`NoPoint` that declines
at once, so the Python path runs its statement once, as before.

A :class:`PyPoint` does what the compiled ``Point`` does, step by step: the
key's xxHash64, the lookup's own point statement (on the lookup's Python
connection, not a second one), the lookup's shard cache and open
descriptors, one ``pread``, then the decoder it is handed (native shards)
or the tar finisher's (tar samples). It declines in exactly the cases the
compiled code does (no row, a statement that fails, a shard not cached, no
open descriptor, a short or failed read, a record the decoder rejects, a
closed lookup or a forked child's copy). Where the statement has run, a
lookup's twin hands its rows to the lookup's Python path (``rest``), which
answers or raises its typed errors without running the statement again;
a twin without ``rest`` (the differential tests) returns None there, as
the compiled code does.

A hash-only dataset the lookup has found (``hash_datasets``) takes the
hash-only statement (``hash_sql``) and :meth:`PyPoint._hashed`, as the
compiled ``get_hashed``: each candidate's record read, its head's key
compared with the asked one, the one that holds it decoded. What it does
not handle returns None even with ``rest`` (whose rows are the keyed
statement's): the Python path runs its hash-only statement again, for a
miss, more than ``MAX_ROWS`` candidates or a failed read only.

Two more differences, neither visible in a result: its calls hold the
lookup's gate (the compiled code fences itself without one; a Python call
cannot mark itself atomically), and with no local shard open it returns
None without asking the catalog (no row could be read then; the Python
path runs the statement once).
"""

from __future__ import annotations

import json
import operator
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import xxhash

from .._forks import fork_generation
from ..catalog.connection import RawConnection
from ..errors import FormatError
from ..format import Record
from ..format import sources as _sources
from ..format.merged import MergedRecord
from ..format.records import key_span

__all__ = [
    "MAX_ROWS",
    "NoPoint",
    "PointLookup",
    "PyPoint",
    "Rest",
    "TarFinish",
    "merge_point",
]

_xxh64_digest = xxhash.xxh64_digest
_from_bytes = int.from_bytes


class TarFinish(Protocol):
    """What finishes a tar sample's record (:class:`.point.TarFinisher`)."""

    specs: dict[int, tuple[tuple[str, str], ...]]
    decode: Callable[..., Record | None]
    record: type[Record]

    def __call__(self, layout_id: int) -> tuple[tuple[str, str], ...] | None: ...


MAX_ROWS = 8
"""The most rows (a key's base and column groups) a point lookup merges itself (``_cpoint.c``'s)."""


def merge_point(
    groups: Mapping[int, int], key: str, records: list[Any], ids: list[int]
) -> Record | None:
    """A key's records of several rows, one per column group, merged in group order.

    ``groups`` is the lookup's shard cache of groups (shard id → group id,
    0 the base), filled with its shard cache: a point lookup reads only
    cached shards, so every id is there; one that is not is "not handled"
    (None), and the Python path reloads the cache. The twin's; the compiled
    ``get_merged`` orders the rows the same way (a stable sort by group)
    before reading them, then makes the same :class:`MergedRecord`.
    """
    try:
        order = list(map(groups.__getitem__, ids))
    except KeyError:
        return None
    if order != sorted(order):
        records = [rec for _, rec in sorted(zip(order, records), key=_FIRST)]
    return MergedRecord(key, tuple(records))


_FIRST = operator.itemgetter(0)


Rest = Callable[[str, str, int, list[Any]], Record]
"""The Python path from the point statement's rows on (``Lookup._from_rows``): ``(dataset, key, key hash, rows)``."""


class PointLookup(Protocol):
    """A lookup's point lookup: the compiled ``_cpoint.Point`` or a :class:`PyPoint`."""

    @property
    def closed(self) -> bool: ...

    @property
    def busy(self) -> int: ...

    def get(self, dataset: str, key: str, decode: Callable[..., Any]) -> Record | None:
        """The latest version's whole record, or None if not handled here."""

    def rows(self, dataset: str, hashes: list[int], hashed: bool = False, /) -> list[Any] | None:
        """The batch statement's rows for these key hashes (``hashed``: the statement whose
        rows end with their key hash), or None if not handled here."""

    def close(self) -> None: ...


class PyPoint:
    """The compiled ``Point``'s twin, over a lookup's connection, caches and gate.

    Parameters are the compiled ``Point``'s (``point.open_point`` documents
    them), with the lookup's :class:`RawConnection` in place of a file to
    open, and the lookup's ``gate``, held by each call. ``rest``, the
    lookup's own Python path from the statement's rows on, takes what the
    twin does not handle once it has run the statement (so it never runs
    twice); without it (the differential tests) such calls return None, as
    the compiled code's do.
    """

    __slots__ = (
        "_batch_sql",
        "_fds",
        "_finish",
        "_gate",
        "_generation",
        "_groups",
        "_hash_batch_sql",
        "_hash_datasets",
        "_hash_sql",
        "_one_pread",
        "_postgres",
        "_raw",
        "_rest",
        "_shards",
        "_sql",
        "_tars",
        "_texts",
        "_touch",
        "_unpack",
        "closed",
    )

    busy = 0
    """Always 0 to a thread that holds the gate (:meth:`.lookup.Lookup.close`): each call holds it."""

    def __init__(
        self,
        raw: RawConnection,
        gate: threading.RLock,
        sql: str,
        shards: dict[int, tuple[str, int] | None],
        fds: Mapping[str, int],
        touch: Callable[[str], None],
        unpack: Callable[..., Any],
        texts: dict[Any, Any],
        one_pread: int,
        tars: dict[int, str],
        finish: TarFinish,
        batch_sql: str | None = None,
        rest: Rest | None = None,
        groups: Mapping[int, int] | None = None,
        *,
        hash_sql: str | None = None,
        hash_datasets: set[str] | None = None,
        hash_batch_sql: str | None = None,
    ) -> None:
        if (hash_sql is None) != (hash_datasets is None):
            raise TypeError("hash_sql and hash_datasets (a set) are given together, or neither")
        self._raw = raw
        self._gate = gate
        self._sql = sql
        self._shards = shards
        self._fds = fds
        self._touch = touch
        self._unpack = unpack
        self._texts = texts
        self._one_pread = one_pread
        self._tars = tars
        self._finish = finish
        self._batch_sql = batch_sql
        self._rest = rest
        self._groups = groups
        self._hash_sql = hash_sql
        self._hash_datasets = hash_datasets
        self._hash_batch_sql = hash_batch_sql
        self._postgres = raw.dialect == "postgresql"
        self._generation = fork_generation()
        self.closed = False
        """Whether :meth:`close` has run: every call is then not handled."""

    def get(self, dataset: str, key: str, decode: Callable[..., Any]) -> Record | None:
        """The latest version's whole record of ``key``, or None if not handled here.

        ``decode`` is the record codec's ``decode_spanned``, called as
        :meth:`.lookup.Lookup.get` calls it. With ``rest``, once the
        statement has run, what is not handled here is its answer (a record,
        or the typed error: a missing key's included), not None.
        """
        if type(dataset) is not str:
            return None
        try:
            h = _from_bytes(_xxh64_digest(key.encode("utf-8")), "big", signed=True)
        except (UnicodeEncodeError, AttributeError):  # not UTF-8 text: the Python path names it
            return None
        fds = self._fds
        if not fds:  # no local shard open: no row could be read here
            return None
        with self._gate:
            if self.closed or self._generation != fork_generation():
                return None
            hashed = self._hash_datasets
            if hashed is not None and dataset in hashed:
                return self._hashed(dataset, key, h, decode)
            params = (dataset, h, key)
            try:
                rows = self._raw.execute(self._sql, params).fetchall()
            except Exception as e:  # the Python path asks again, and recovers or reports
                if self._rest is None:
                    return None
                rows = self._raw.recover(e, self._sql, params)
            n = len(rows)
            record: Record | None
            if n == 1:
                record = self._one(key, rows[0], decode)
            elif 1 < n <= MAX_ROWS and self._groups is not None:
                # A key with column groups: each row's record as one row's, then merged.
                records = []
                for row in rows:
                    part = self._one(key, row, decode)
                    if part is None:
                        return self._declined(dataset, key, h, rows)
                    records.append(part)
                record = merge_point(self._groups, key, records, [row[0] for row in rows])
            else:  # none, or more rows than the compiled code merges
                record = None
            if record is None:
                return self._declined(dataset, key, h, rows)
            return record

    def _hashed(self, dataset: str, key: str, h: int, decode: Callable[..., Any]) -> Record | None:
        """A hash-only dataset's record of ``key`` (the compiled ``get_hashed``), or None.

        The hash-only statement's candidates (up to ``MAX_ROWS``), each read
        by :meth:`_one` with the asked key's bytes to compare first: a record
        that holds another key (a collision) is skipped; the one that holds
        ``key`` is the answer. None of them, two (never in a consistent
        catalog: one live record per key, and no column groups in a hash-only
        dataset), or a candidate not handled: None, and the Python path asks again.
        """
        sql = self._hash_sql
        if sql is None:  # given with hash_datasets, always: for the type checker
            return None
        try:
            rows = self._raw.execute(sql, (dataset, h)).fetchall()
        except Exception:  # the Python path asks again, and recovers or reports
            return None
        if not 0 < len(rows) <= MAX_ROWS:
            return None
        asked = key.encode("utf-8")
        match = None
        for row in rows:
            record = self._one(key, row, decode, asked)
            if record is _OTHER_KEY:
                continue
            if record is None or match is not None:
                return None
            match = record
        return match

    def _one(
        self, key: str, row: Any, decode: Callable[..., Any], asked: bytes | None = None
    ) -> Any:
        """One row's record (the compiled ``get_found``): its shard, one ``pread``, the decoder; or None.

        ``asked`` (a hash-only candidate's: the key's UTF-8 bytes): only a
        native record whose head names it is decoded; one that names another
        key is :data:`_OTHER_KEY`; a tar sample's is not handled.
        """
        # The statement's columns are NOT NULL integers and a blob (the
        # schema): the compiled code's checks of their types are its own.
        shard_id, offset, length, spans, layout = row
        if not 0 < length <= self._one_pread or offset < 0:
            return None
        shard = self._shards.get(shard_id, _UNCACHED)
        tar = shard is None
        if tar:  # another kind: a tar's URL, or not handled
            if asked is not None:  # hash-only datasets hold native shards only
                return None
            url = self._tars.get(shard_id)
            if url is None:
                return None
        elif shard is _UNCACHED:
            return None
        else:
            url, alignment = shard
        fd = self._fds.get(url)
        if fd is None:  # not open (yet), or closed
            return None
        # pread_linked: a descriptor whose file has no name left is not read.
        try:
            data = _sources.pread_linked(fd, length, offset)
        except OSError:
            data = None
        if data is None or len(data) != length:
            return None
        if asked is not None:
            names = _names_key(data, asked)
            if names is not True:
                return _OTHER_KEY if names is False else None
        self._touch(url)
        try:
            if not tar:
                return decode(
                    data,
                    key,
                    length,
                    url,
                    offset,
                    alignment,
                    spans,
                    self._unpack,
                    self._texts,
                )
            finish = self._finish
            specs = finish.specs.get(layout)
            if specs is None:
                specs = finish(layout)  # None: the layout is gone
            if specs is not None:
                return finish.decode(data, key, specs, spans, offset, finish.record)
        except Exception:
            # A record that does not match the catalog: the Python path
            # asks again (with the rows) and reports it.
            pass
        return None

    def _declined(self, dataset: str, key: str, h: int, rows: list[Any]) -> Record | None:
        """After the statement ran: the Python path's answer from its ``rows`` (``rest``), or None."""
        rest = self._rest
        return None if rest is None else rest(dataset, key, h, rows)

    def rows(self, dataset: str, hashes: list[int], hashed: bool = False, /) -> list[Any] | None:
        """The batch statement's rows for ``hashes`` (signed xxHash64 values), or None if not handled.

        ``hashed``: the statement whose rows end with their key hash (``hash_batch_sql``, a
        hash-only dataset's batch). The rows are the driver's, as the Python path would fetch them.
        """
        sql = self._hash_batch_sql if hashed else self._batch_sql
        if sql is None or type(dataset) is not str or type(hashes) is not list:
            return None
        param: Any = hashes if self._postgres else json.dumps(hashes)
        with self._gate:
            if self.closed or self._generation != fork_generation():
                return None
            try:
                return self._raw.execute(sql, (dataset, param)).fetchall()  # type: ignore[no-any-return]
            except Exception:  # the Python path asks again, and recovers or reports
                return None

    def close(self) -> None:
        """Turn every later call away (idempotent); the lookup closes the connection and files."""
        self.closed = True
        self._rest = None  # a bound method of the lookup: no cycle left once closed


class NoPoint:
    """The point lookup where neither the compiled one nor the twin runs: it declines at once.

    PostgreSQL, in-memory SQLite and SQLite URLs with query options, and a
    file-backed SQLite catalog whose compiled lookup could not be opened:
    :meth:`get` and :meth:`rows` return None ("not handled") without
    running anything, so the Python path runs its statement once, as it
    did before there was a twin, and callers still never ask for None.
    """

    __slots__ = ("closed",)

    busy = 0
    """Never in a call: it has none to wait for."""

    def __init__(self) -> None:
        self.closed = False

    def get(self, dataset: str, key: str, decode: Callable[..., Any]) -> Record | None:
        """Not handled here: always None."""
        return None

    def rows(self, dataset: str, hashes: list[int], hashed: bool = False, /) -> list[Any] | None:
        """Not handled here: always None."""
        return None

    def close(self) -> None:
        self.closed = True


_UNCACHED: Any = object()
"""A shard id not (yet) in the shard cache."""

_OTHER_KEY: Any = object()
"""A hash-only candidate whose record holds another key of the same hash (a collision)."""


def _names_key(data: bytes, asked: bytes) -> bool | None:
    """Whether the record ``data`` (read whole) names the key ``asked`` in its head (``head_names_key``).

    None: not a record head, or a key running past ``data`` (the decoder's to
    report: not handled); False: another key.
    """
    try:
        start, end = key_span(data, path=None, offset=0)
    except FormatError:  # not a record head (too short, or another tag)
        return None
    if end > len(data):
        return None
    return data[start:end] == asked
