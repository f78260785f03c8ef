"""Records of the compiled codec stay out of the cyclic GC until they can be in a cycle.

A LazyRecord made by the compiled decoder is not tracked by the cyclic
garbage collector (batches and streams would otherwise make each older
collection walk every record); it must be tracked again before it refers to
anything a caller can change, or a cycle through it would never be freed.
"""

from __future__ import annotations

import copy
import gc
import sys
import weakref
from typing import Any

import crc32c as crc32c_package
import pytest

from shardcat import config
from shardcat.format import recordcodec, records
from shardcat.format.codecs import compress
from shardcat.format.entries import Entry, _StoredEntry
from shardcat.format.records import PreparedEntry
from shardcat.format.spec import Codec

if "compiled" not in recordcodec.available() and config.get("record_codec") == "python":
    pytest.skip("the compiled record codec is not built", allow_module_level=True)
from shardcat.format import _ccodec as ccodec
from shardcat.format.lazy import _SpanEntry

ALIGN = 64
OCTET = "application/octet-stream"


def _record_bytes(key: bytes, payloads: list[tuple[bytes, bytes]]) -> bytes:
    entries = [
        PreparedEntry(n, b"application/octet-stream", Codec.NONE, p, crc32c_package.crc32c(p))
        for n, p in payloads
    ]
    return b"".join(bytes(p) for p in records.encode_record(key, 0, entries, ALIGN).parts)


def _decoded(**kwargs: object) -> object:
    data = _record_bytes(b"k", [(b"a", b"AAAA"), (b"b", b"BB")])
    return ccodec.decode_record(memoryview(data), path="s", offset=0, alignment=ALIGN, **kwargs)


class _Holder:
    """Something a caller can make refer to a record (and a record to it)."""

    rec: object = None


def _collected_when_dropped(make_cycle: object) -> bool:
    holder = _Holder()
    ref = weakref.ref(holder)
    rec = _decoded()
    holder.rec = rec
    make_cycle(rec, holder)  # type: ignore[operator]
    del rec, holder
    gc.collect()
    return ref() is None


def _has_slot(entry: object, name: str) -> bool:
    """Whether the slot ``name`` of an entry holds a value (read past _SpanEntry's property)."""
    try:
        Entry.__dict__[name].__get__(entry, type(entry))
    except AttributeError:
        return False
    return True


def test_a_record_and_its_entries_stay_untracked_until_something_is_set() -> None:
    rec: Any = _decoded()
    assert not gc.is_tracked(rec)
    assert list(rec) == ["a", "b"] and rec.key == "k"
    assert not gc.is_tracked(rec)  # names and key build nothing
    b = rec["b"]
    assert type(b) is _SpanEntry and b is rec["b"]
    # The entry, the record and the list that caches it: all outside the GC.
    assert not any(gc.is_tracked(x) for x in (rec, b, rec._some))
    assert (b.data, len(b), b.content_type, b.codec) == (b"BB", 2, OCTET, Codec.NONE)
    assert not _has_slot(b, "_raw")  # data and len made no view
    view = b.view
    assert bytes(view) == b"BB" and b.view is view and b._stored is view
    assert gc.is_tracked(view)  # a memoryview must stay tracked (its dealloc untracks it)
    assert not any(gc.is_tracked(x) for x in (rec, b, rec._some))
    assert rec.decode() == {"__key__": "k", "a": b"AAAA", "b": b"BB"}
    assert not gc.is_tracked(rec)  # decode builds no entries dict
    b.content_type = "text/plain"  # anything set goes back under the GC first
    assert all(gc.is_tracked(x) for x in (rec, b, rec._some))
    assert not gc.is_tracked(rec["a"])  # made before, nothing set: it refers to no cycle
    again: Any = _decoded()
    again.key = "k"  # tracked from here: the entries it makes are tracked ones
    assert type(again["a"]) is _StoredEntry and gc.is_tracked(again["a"])


@pytest.mark.parametrize(
    "how", ["entries", "attribute", "cached entry", "entry with a view", "entry, record dropped"]
)
def test_a_cycle_through_a_record_is_collected(how: str) -> None:
    def make_cycle(rec: Any, holder: _Holder) -> None:
        if how == "entries":
            rec.entries["a"].content_type = holder
        elif how == "attribute":
            rec.key = holder
        elif how == "cached entry":
            rec["b"].content_type = holder
        elif how == "entry with a view":
            rec["a"]
            assert bytes(rec["b"].view) == b"BB"
            rec["b"].codec = holder
        else:  # the entry outlives its record, then refers to itself
            entry = rec["b"]
            holder.rec = entry
            del rec
            gc.collect()
            entry.content_type = holder

    assert _collected_when_dropped(make_cycle)


def test_streamed_records_make_ordinary_entries() -> None:
    # A stream drops each record before the next: no source per record there.
    rec: Any = _many(3)[1]
    assert not gc.is_tracked(rec)
    entry = rec["x"]
    assert type(entry) is _StoredEntry and rec._source is False
    assert gc.is_tracked(entry) and gc.is_tracked(rec) and gc.is_tracked(rec._some)


def test_a_cycle_through_a_copy_sharing_the_entry_list_is_collected() -> None:
    rec: Any = _decoded()
    entry = rec["b"]
    twin = copy.copy(rec)  # shares the record's (untracked) entry list
    assert twin._some is rec._some and twin["b"] is entry
    del rec
    gc.collect()
    assert gc.is_tracked(twin._some)  # tracked when the record that made it died
    holder = _Holder()
    ref = weakref.ref(holder)
    holder.rec = twin
    entry.content_type = holder
    del twin, holder, entry
    gc.collect()
    assert ref() is None


def test_an_entry_a_copy_makes_in_the_shared_list_is_collected_in_a_cycle() -> None:
    rec: Any = _decoded()
    rec["b"]  # the list exists (untracked) and the copy shares it
    twin = copy.copy(rec)
    holder = _Holder()
    ref = weakref.ref(holder)
    holder.rec = rec  # set on the holder: nothing tells the record
    twin["a"].content_type = holder  # made by the (tracked) copy, into the shared list
    assert all(gc.is_tracked(x) for x in (rec, twin, rec._some))  # the original too
    del rec, twin, holder
    gc.collect()
    assert ref() is None


def test_a_compressed_entry_puts_its_record_back_under_the_gc() -> None:
    payload = b"z" * 500
    frame = compress(payload, Codec.ZSTD)
    entries = [
        PreparedEntry(b"a", OCTET.encode(), Codec.NONE, b"AA", crc32c_package.crc32c(b"AA")),
        PreparedEntry(b"z", OCTET.encode(), Codec.ZSTD, frame, crc32c_package.crc32c(frame)),
    ]
    data = b"".join(bytes(p) for p in records.encode_record(b"k", 0, entries, ALIGN).parts)
    rec: Any = ccodec.decode_record(memoryview(data), path="s", offset=0, alignment=ALIGN)
    assert rec["a"].data == b"AA" and not gc.is_tracked(rec)
    assert rec["z"].data == payload  # made in Python, tracked: so is what holds it
    assert all(gc.is_tracked(x) for x in (rec, rec._some, rec["z"]))
    holder = _Holder()
    ref = weakref.ref(holder)
    holder.rec = rec
    rec["z"].content_type = holder
    del rec, holder
    gc.collect()
    assert ref() is None


def test_entries_outlive_their_record_and_hold_its_buffer() -> None:
    from shardcat.format.lazy import LazyRecord

    data = _record_bytes(b"k", [(b"a", b"AAAA"), (b"b", b"BB")])
    alone = sys.getrefcount(data)
    rec: Any = ccodec.decode_record(memoryview(data), path="s", offset=0, alignment=ALIGN)
    a, b = rec["a"], rec["b"]
    records_alive = sys.getrefcount(LazyRecord)
    del rec
    assert sys.getrefcount(LazyRecord) == records_alive - 1  # the record is gone
    assert sys.getrefcount(data) > alone  # its buffer is not: the entries hold it
    _many(300)  # the record's memory is reused meanwhile
    assert (a.data, bytes(b.view), len(a)) == (b"AAAA", b"BB", 4)
    b.content_type = "t/t"  # its record is gone: only the entry is tracked again
    assert gc.is_tracked(b) and not gc.is_tracked(a)
    del a, b
    assert sys.getrefcount(data) == alone  # nothing leaked a reference to the buffer


def test_records_with_names_that_are_not_str_stay_tracked() -> None:
    assert not gc.is_tracked(_decoded(names=frozenset({"a"})))
    assert gc.is_tracked(_decoded(names=frozenset({"a", ("not", "a", "str")})))


def test_stream_records_alone_match_the_pairs() -> None:
    blobs = [_record_bytes(k, [(b"x", k * 50)]) for k in (b"a", b"b", b"c")]
    view = memoryview(b"".join(blobs))
    args = (view, 0, len(view), 64, -1, ALIGN, 0, None, {}, False, "s")
    pairs, used = ccodec.decode_run(*args)
    alone, used_alone = ccodec.decode_records(*args)
    assert used == used_alone == len(view)
    assert not any(gc.is_tracked(r) for r in alone)
    assert [r for _, r in pairs] == alone
    assert [bytes(v) for v, _ in pairs] == blobs
    step = len(blobs[0])
    assert [(r.offset, r.index) for r in alone] == [(64, 0), (64 + step, 1), (64 + 2 * step, 2)]


# --- the free list of records ------------------------------------------------


def _many(n: int) -> list[object]:
    blobs = [_record_bytes(f"k{i}".encode(), [(b"x", bytes([i % 256]) * 40)]) for i in range(n)]
    view = memoryview(b"".join(blobs))
    records_, used = ccodec.decode_records(
        view, 0, len(view), 64, -1, ALIGN, 0, None, {}, False, "s"
    )
    assert used == len(view)
    return records_  # type: ignore[no-any-return]


def test_freed_records_are_reused_whole_and_the_type_reference_balances() -> None:
    from shardcat.format.lazy import LazyRecord

    before = sys.getrefcount(LazyRecord)
    for _ in range(3):  # more than the free list holds, freed and made again
        recs = _many(200)
        assert sys.getrefcount(LazyRecord) == before + 200
        for i, rec in enumerate(recs):
            assert (rec.key, rec.index, bytes(rec["x"].view)) == (  # type: ignore[attr-defined, index]
                f"k{i}",
                i,
                bytes([i % 256]) * 40,
            )
        entries = [rec["x"] for rec in recs]  # type: ignore[index]
        del recs, rec
        assert sys.getrefcount(LazyRecord) == before
        # Entries outlive their records, whose memory is reused meanwhile.
        newer = _many(100)
        assert [bytes(e.view) for e in entries] == [bytes([i % 256]) * 40 for i in range(200)]
        del newer, entries
    assert sys.getrefcount(LazyRecord) == before


def test_a_record_in_a_cycle_is_collected_and_its_memory_reused() -> None:
    recs = _many(3)
    holder = _Holder()
    ref = weakref.ref(holder)
    recs[0].key = holder  # type: ignore[attr-defined]
    holder.rec = recs[0]
    del recs, holder
    gc.collect()
    assert ref() is None
    assert [r.key for r in _many(5)] == [f"k{i}" for i in range(5)]  # type: ignore[attr-defined]


def test_subclass_instances_are_freed_by_their_own_type() -> None:
    from shardcat.format.lazy import LazyRecord

    class Sub(LazyRecord):
        __slots__ = ("extra",)

    before = sys.getrefcount(Sub)
    subs = [Sub.__new__(Sub) for _ in range(100)]
    for s in subs:
        object.__setattr__(s, "extra", [s])  # a cycle through the subclass's own slot
    assert sys.getrefcount(Sub) == before + 100
    del subs, s
    gc.collect()
    assert sys.getrefcount(Sub) == before
    assert [r.key for r in _many(3)] == ["k0", "k1", "k2"]  # type: ignore[attr-defined]


def test_every_kind_of_entry_pickles_as_its_bytes() -> None:
    """A read entry is a view of its record's buffer; another process gets its decoded bytes."""
    import pickle

    rec: Any = _decoded()
    lazy = rec["a"]
    assert type(lazy) is _SpanEntry
    stored = _StoredEntry(memoryview(b"plain"), OCTET, Codec.NONE)
    packed = Entry.from_stored(memoryview(compress(b"z" * 500, Codec.ZSTD)), OCTET, Codec.ZSTD)
    mine = Entry(b"abc", "text/plain", codec="lz4")
    for entry, data in ((lazy, b"AAAA"), (stored, b"plain"), (packed, b"z" * 500), (mine, b"abc")):
        back = pickle.loads(pickle.dumps(entry))
        assert type(back) is Entry
        assert (back.data, back.content_type) == (data, entry.content_type)
    # A read entry's codec said how its shard stored it; an entry made to write keeps its own.
    assert pickle.loads(pickle.dumps(packed)).codec is None
    assert pickle.loads(pickle.dumps(mine)).codec is Codec.LZ4
