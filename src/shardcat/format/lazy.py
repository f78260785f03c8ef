"""Records whose entries are made on first use: what the compiled codec returns.

The compiled decoder checks a record completely (every CRC, the layout) and
then returns a :class:`LazyRecord`: the key, where the record lies in the
shared read buffer (no view of its own) and its :class:`Layout` (entry names, content types and codecs, shared by every record
that has the same ones). An entry object is built only when it is asked for,
as a view of the record's bytes, so a reader that touches one entry of a
record, or only keys, pays for no other. Its public behaviour is
:class:`~shardcat.format.Record`'s.

A new record is left out of Python's cyclic garbage collector (it can be in
no reference cycle: ``ccodec/decode.c``, ``decode_one``, says why), so batches and
streams of records do not make each collection walk them all; it goes back
under the collector before it refers to anything a caller can change.

The uncompressed entries such a record makes are :class:`_SpanEntry` objects,
also outside the collector, and so is the list that caches them: a batch of
10,000 records whose entries were read adds no object for the collector to
walk but the memoryviews asked for (``Entry.view``; ``Entry.data`` and
``len`` make none). Setting an attribute of one puts it, its record and that
list back under the collector first (``ccodec/lazy.c``, "sealed entries").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from ..errors import SampleDecodeError
from .entries import KEY, Entry, Record, _CompressedEntry, _StoredEntry
from .spec import ENTRY_DESC_STRUCT, RECORD_HEAD_STRUCT, Codec

__all__ = ["Layout", "LazyRecord", "make_layout"]

_HEAD = RECORD_HEAD_STRUCT.size
_DESC = ENTRY_DESC_STRUCT.size
_unpack_span = ENTRY_DESC_STRUCT.unpack_from
_NONE = Codec.NONE
# Only the compiled codec makes LazyRecords: where this module is imported, it exists.
_ccodec: Any = importlib.import_module(f"{__package__}._ccodec")
_compiled_entry: Callable[[LazyRecord, str], Entry | None] = _ccodec.entry
_track: Callable[[LazyRecord], None] = _ccodec.track
_unseal: Callable[[_SpanEntry], None] = _ccodec.unseal
_set = object.__setattr__


class _SpanEntry(_StoredEntry):
    """An uncompressed entry of a record outside the cyclic GC: where its bytes lie, no view yet.

    Made by the compiled codec only, with ``_source`` (the record's read
    buffer, shared by its entries) and ``_i`` (the entry's descriptor); its
    ``view`` (made on first use, then kept), ``data`` and ``len`` read the
    bytes there. Behaves as :class:`~shardcat.format.entries._StoredEntry`.
    """

    __slots__ = ("_i", "_source")

    def __setattr__(self, name: str, value: Any) -> None:
        # Back under the cyclic GC first, with its record: the value may refer to either.
        _unseal(self)
        _set(self, name, value)


def _view_slot(slot: Any) -> property:
    """``slot`` (``_raw`` or ``_stored``), read as a _StoredEntry's: the view, made if not yet."""

    def get(self: _SpanEntry) -> Any:
        try:
            return slot.__get__(self, _SpanEntry)
        except AttributeError:  # no view made yet
            return self.view

    return property(get, slot.__set__, slot.__delete__)


# For the Python code that reads them (Entry's own fallbacks, verify, tests);
# the compiled accessors read the slots themselves.
for _name in ("_raw", "_stored"):
    setattr(_SpanEntry, _name, _view_slot(Entry.__dict__[_name]))


class Layout(NamedTuple):
    """What the records of a dataset share: their entries' names, types and codecs.

    The compiled codec reads the first three fields by position.
    """

    sig: bytes
    """Each descriptor's name length, type length and codec (5 bytes), then the entry strings."""
    names: frozenset[str] | None
    """The entries a reader asked for (None: all)."""
    keep: bytes
    """Per descriptor, 1 if ``names`` keeps it (its CRC is checked, it is an entry)."""
    specs: tuple[tuple[str, str, Codec], ...]
    """Per descriptor: (name, content type, codec)."""
    order: tuple[str, ...]
    """The record's entry names, in write order."""
    where: dict[str, int]
    """Name → descriptor. A repeated name is the last descriptor, at the first one's place, as a dict fills."""


def make_layout(
    sig: bytes, specs: tuple[tuple[str, str, Codec], ...], names: frozenset[str] | None
) -> Layout:
    """The layout of records with these descriptors, for a reader that keeps ``names``."""
    keep = bytes(names is None or s[0] in names for s in specs)
    where: dict[str, int] = {}
    for i, (name, _, _) in enumerate(specs):
        if keep[i]:
            where[name] = i
    return Layout(sig, names, keep, specs, tuple(where), where)


class LazyRecord(Record):
    """A checked record whose entries are views of its bytes, made on first use."""

    __slots__ = ("_at", "_buf", "_entries", "_layout", "_path", "_some", "_source")

    # Instances are made by the compiled codec, which sets every slot.
    _at: int
    """Where the record starts in ``_buf``."""
    _buf: memoryview
    """The read buffer the record lies in, shared by the records read from it."""
    _entries: dict[str, Entry] | None
    _layout: Layout
    _path: str | None
    _some: list[Entry | None] | None
    """The entries made so far, one place per descriptor (``rec[n] is rec[n]``)."""
    _source: object
    """What the record's :class:`_SpanEntry` objects read their bytes from; None before
    the first; False for a record of a stream or a point lookup (its entries are ordinary,
    tracked ones: such records are used one at a time)."""

    def __setattr__(self, name: str, value: Any) -> None:
        # Back under the cyclic GC first: the value may refer to this record.
        _track(self)
        _set(self, name, value)

    def _entry(self, name: str) -> Entry:
        # The compiled codec makes uncompressed entries; compressed ones are made here.
        entry = _compiled_entry(self, name)
        if entry is not None:
            return entry
        i = self._layout.where[name]
        some = self._some
        if some is None:
            some = self._some = [None] * len(self._layout.specs)
        entry = some[i]
        if entry is None:
            at = self._at
            p_off, size = _unpack_span(self._buf, at + _HEAD + _DESC * i)[:2]
            payload = self._buf[at + p_off : at + p_off + size]
            _, ctype, codec = self._layout.specs[i]
            if codec is _NONE:
                entry = _StoredEntry(payload, ctype, codec)
            else:
                entry = _CompressedEntry(
                    payload, ctype, codec, name, self._path, self.offset + p_off
                )
            # The list may have been made outside the cyclic GC (for sealed
            # entries); it is about to hold an entry that callers can change.
            _track(self)
            some[i] = entry
        return entry

    @property
    def entries(self) -> dict[str, Entry]:
        """Every entry, in write order (built on first use; the same dict afterwards)."""
        full = self._entries
        if full is None:
            full = self._entries = {name: self._entry(name) for name in self._layout.order}
        return full

    @entries.setter
    def entries(self, value: dict[str, Entry]) -> None:
        self._entries = value

    def decode(self, *, writable: bool = False) -> dict[str, Any]:
        # docstring inherited
        if self._entries is not None:
            return super().decode(writable=writable)
        # Entry by entry: building ``entries`` (a dict callers may change)
        # would put the record back under the cyclic GC.
        out: dict[str, Any] = {KEY: self.key}
        try:
            for name in self._layout.order:
                out[name] = self[name].decode(writable=writable)
        except SampleDecodeError as e:
            raise self._decode_error(e, name) from e.__cause__
        return out

    # The entry called ``name``: ``self._entries[name]`` once they were all
    # built, else ``_entry(name)``; in C, as it runs once per entry read.
    # recordcodec's ``_setup`` replaces it with the same function as a method
    # descriptor of this class (called with no bound method or argument tuple).
    __getitem__ = _ccodec.record_getitem

    def __contains__(self, name: object) -> bool:
        if self._entries is not None:
            return name in self._entries
        return name in self._layout.where

    def __iter__(self) -> Iterator[str]:
        if self._entries is not None:
            return iter(self._entries)
        return iter(self._layout.order)

    def _names(self) -> tuple[str, ...]:
        # The layout's own tuple, shared by the records of that layout.
        if self._entries is not None:
            return tuple(self._entries)
        return self._layout.order

    def __len__(self) -> int:
        if self._entries is not None:
            return len(self._entries)
        return len(self._layout.order)
