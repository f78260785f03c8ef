"""The compiled record codec agrees with the pure-Python reference, byte for byte and error for error.

The rest of tests/format runs every test against both codecs (the
``record_codec`` fixture); these tests call the two side by side on random
records and on random or damaged bytes: the same bytes out of the encoders,
and out of the decoders the same record or the same error. They also check
that the compiled codec decides by itself: it hands a record to the reference
only when the record is bad (the reference then raises), never a good one.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import crc32c as crc32c_package
import pytest
import xxhash
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardcat import config
from shardcat.errors import FormatError
from shardcat.format import lazy, recordcodec, records
from shardcat.format.entries import Record, _StoredEntry
from shardcat.format.records import PreparedEntry
from shardcat.format.spans import unpack_spans
from shardcat.format.spec import (
    ALIGNMENTS,
    BATCH_ROW_DTYPE,
    ENTRY_DESC_STRUCT,
    RECORD_HEAD_STRUCT,
    Codec,
)

if "compiled" not in recordcodec.available() and config.get("record_codec") == "python":
    pytest.skip("the compiled record codec is not built", allow_module_level=True)
from shardcat.format import _ccodec as ccodec

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, params=["compiled"])
def record_codec(request):
    """These tests call both codecs themselves: run them once (overrides conftest's)."""
    return request.param


class Fallbacks:
    """Counts the compiled codec's calls to the reference, and how each ended."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def wrap(self, fn: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                result = fn(*args, **kwargs)
            except Exception as e:
                self.calls.append(type(e).__name__)
                raise
            self.calls.append("returned")
            return result

        return counted


@contextmanager
def counting() -> Iterator[Fallbacks]:
    """Route the compiled codec's calls to the reference through a counter."""
    f = Fallbacks()
    _setup(f.wrap)
    try:
        yield f
    finally:
        _setup(lambda fn: fn)


def _setup(wrap: Any) -> None:
    ccodec._setup(
        lazy.LazyRecord,
        lazy.make_layout,
        records.EncodedRecord,
        Codec,
        wrap(records.decode_record),
        wrap(records.decode_indexed),
        wrap(records.encode_record),
        _StoredEntry,
        wrap(records.decode_spanned),
    )


@pytest.fixture
def fallbacks() -> Iterator[Fallbacks]:
    with counting() as f:
        yield f


# --- strategies --------------------------------------------------------------

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
ctypes = st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=20)
payloads = st.one_of(
    st.binary(max_size=300),
    st.integers(0, 20_000).map(lambda n: bytes(range(256)) * (n // 256) + bytes(n % 256)),
)


@st.composite
def prepared_entries(draw: Any) -> PreparedEntry:
    payload = draw(payloads)
    kind = draw(st.sampled_from([bytes, bytearray, memoryview]))
    return PreparedEntry(
        draw(names).encode("utf-8"),
        draw(ctypes).encode("ascii"),
        Codec(draw(st.sampled_from([0, 0, 1, 2, 7]))),
        kind(payload),
        crc32c_package.crc32c(payload),
    )


@st.composite
def record_inputs(draw: Any) -> tuple[bytes, int, list[PreparedEntry], int]:
    key = draw(names).encode("utf-8")
    entries = draw(st.lists(prepared_entries(), max_size=5))
    return key, xxhash.xxh64_intdigest(key), entries, draw(st.sampled_from(ALIGNMENTS))


def joined(rec: records.EncodedRecord) -> bytes:
    return b"".join(bytes(p) for p in rec.parts)


def comparable(rec: Record) -> tuple[Any, ...]:
    """A record as plain data, without decompressing (codecs may be unknown or the frames junk)."""
    entries = [
        (name, e.content_type, int(e.codec or 0), bytes(e._stored))  # type: ignore[arg-type]
        for name, e in rec.entries.items()
    ]
    return rec.key, rec.index, rec.offset, rec.length, entries


def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    try:
        return ("ok", comparable(fn(*args, **kwargs)))
    except Exception as e:
        return ("error", type(e), str(e))


# --- CRC32C ------------------------------------------------------------------


@SETTINGS
@given(st.binary(max_size=70_000), st.integers(0, 2**32 - 1), st.integers(0, 7))
def test_crc32c_matches_the_crc32c_package(data, value, skip):
    view = memoryview(data)[skip:]
    expected = crc32c_package.crc32c(view, value)
    assert ccodec.crc32c(view, value) == expected
    assert ccodec.crc32c_table(view, value) == expected


def test_crc32c_of_long_buffers_in_pieces():
    data = bytes(range(256)) * 4099 + b"tail"
    assert ccodec.crc32c(data) == crc32c_package.crc32c(data)
    assert ccodec.crc32c(data[1000:], ccodec.crc32c(data[:1000])) == crc32c_package.crc32c(data)


def test_the_c_constants_are_the_spec():
    assert RECORD_HEAD_STRUCT.size == ccodec.HEAD_SIZE
    assert ENTRY_DESC_STRUCT.size == ccodec.DESC_SIZE
    assert BATCH_ROW_DTYPE.itemsize == ccodec.BATCH_ROW_SIZE
    # The C reads the batch rows at fixed offsets: the declaration must keep them.
    fields = BATCH_ROW_DTYPE.fields or {}
    assert [(n, fields[n][1], fields[n][0].str) for n in BATCH_ROW_DTYPE.names or ()] == [
        ("blob", 0, "<u4"),
        ("shard", 4, "<u4"),
        ("row", 8, "<u4"),
        ("reserved", 12, "<u4"),
        ("at", 16, "<u8"),
        ("length", 24, "<u8"),
        ("offset", 32, "<u8"),
    ]
    assert ccodec.TEXT_CACHE_MAX == records._TEXT_CACHE_MAX
    assert ccodec.CRC32C_IMPL in ("sse4.2", "table")


# --- encoding ----------------------------------------------------------------


@SETTINGS
@given(record_inputs())
def test_encoders_write_the_same_bytes(inputs):
    ours, ref = ccodec.encode_record(*inputs), records.encode_record(*inputs)
    assert isinstance(ours, records.EncodedRecord)
    assert joined(ours) == joined(ref)
    assert (ours.length, ours.head_length, ours.offsets) == (
        ref.length,
        ref.head_length,
        ref.offsets,
    )
    if ours.length > ccodec.JOIN_LIMIT:  # large records keep their payloads as separate parts
        assert [bytes(p) for p in ours.parts] == [bytes(p) for p in ref.parts]


def test_encoders_agree_on_a_record_larger_than_the_join_limit():
    payload = bytes(range(256)) * 300
    entries = [PreparedEntry(b"a", b"x/y", Codec.NONE, payload, crc32c_package.crc32c(payload))] * 3
    ours, ref = (
        ccodec.encode_record(b"k", 5, entries, 64),
        records.encode_record(b"k", 5, entries, 64),
    )
    assert len(ours.parts) > 1 and ours.parts[1] is payload
    assert joined(ours) == joined(ref)


@pytest.mark.parametrize(
    ("key", "key_hash", "entries", "alignment"),
    [
        (b"k" * 70_000, 1, [], 64),  # key longer than its u16 length
        (b"k", -1, [], 64),  # hash not a u64
        (b"k", 2**64, [], 64),
        (b"k", 1, [PreparedEntry(b"n" * 70_000, b"t", Codec.NONE, b"", 0)], 64),
        (b"k", 1, [PreparedEntry(b"n", b"t", Codec.NONE, b"", 2**32)], 64),  # CRC not a u32
        (b"k", 1, [PreparedEntry(b"n", b"t", Codec.NONE, b"", -1)], 64),
    ],
)
def test_encoders_raise_the_same_errors(key, key_hash, entries, alignment, fallbacks):
    with pytest.raises(struct.error) as ref:
        records.encode_record(key, key_hash, entries, alignment)
    with pytest.raises(struct.error) as ours:
        ccodec.encode_record(key, key_hash, entries, alignment)
    assert str(ours.value) == str(ref.value)
    assert fallbacks.calls == ["error"]


# --- decoding ----------------------------------------------------------------


def decode_both(data: bytes | memoryview, **kwargs: Any) -> tuple[Any, Any]:
    kwargs.setdefault("path", "x.shard")
    kwargs.setdefault("offset", 4096)
    view = memoryview(data)
    return (
        outcome(ccodec.decode_record, view, text_cache={}, **kwargs),
        outcome(records.decode_record, view, **kwargs),
    )


@st.composite
def mutated(draw: Any) -> tuple[bytes, int]:
    """An encoded record, maybe damaged: bytes flipped, overwritten, cut or extended."""
    key, key_hash, entries, alignment = draw(record_inputs())
    data = bytearray(joined(records.encode_record(key, key_hash, entries, alignment)))
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["flip", "set", "cut", "extend"]))
        if action == "flip" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif action == "set" and data:
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        elif action == "cut":
            del data[draw(st.integers(0, len(data))) :]
        else:
            data += draw(st.binary(max_size=80))
    return bytes(data), alignment


@SETTINGS
@given(mutated(), st.booleans(), st.one_of(st.none(), st.frozensets(names, max_size=2)))
def test_decoders_give_the_same_record_or_the_same_error(case, check_padding, keep):
    data, alignment = case
    ours, ref = decode_both(
        data, alignment=alignment, index=3, check_padding=check_padding, names=keep
    )
    assert ours == ref


@SETTINGS
@given(st.binary(max_size=400), st.sampled_from(ALIGNMENTS))
def test_decoders_agree_on_random_bytes(data, alignment):
    tagged = b"REC\0" + data  # past the tag check, so the rest of the head is exercised
    for candidate in (data, tagged):
        ours, ref = decode_both(candidate, alignment=alignment)
        assert ours == ref


@SETTINGS
@given(record_inputs())
def test_the_compiled_decoder_accepts_good_records_by_itself(inputs):
    data = joined(records.encode_record(*inputs))
    with counting() as f:
        rec = ccodec.decode_record(
            memoryview(data), path=None, offset=0, alignment=inputs[3], check_padding=True
        )
        got = ccodec.decode_indexed(
            memoryview(data),
            key=inputs[0],
            length=len(data),
            path=None,
            offset=0,
            alignment=inputs[3],
            text_cache={},
        )
    assert f.calls == []
    assert type(rec) is lazy.LazyRecord and comparable(rec) == comparable(got)


@SETTINGS
@given(mutated())
def test_the_reference_only_ever_raises_for_the_compiled_decoder(case):
    """A record the compiled decoder hands over is one the reference rejects."""
    data, alignment = case
    with counting() as f:
        outcome(ccodec.decode_record, memoryview(data), path=None, offset=0, alignment=alignment)
    assert "returned" not in f.calls


def test_a_bad_record_is_named_by_the_reference(fallbacks):
    payload = b"payload"
    rec = records.encode_record(
        b"k", 1, [PreparedEntry(b"a", b"t/t", Codec.NONE, payload, 12345)], 64
    )
    with pytest.raises(FormatError, match="payload CRC32C mismatch") as e:
        ccodec.decode_record(memoryview(joined(rec)), path="s.shard", offset=640, alignment=64)
    assert (e.value.path, e.value.offset) == ("s.shard", 640 + rec.offsets[0])
    assert fallbacks.calls == ["ChecksumError"]


@SETTINGS
@given(record_inputs(), st.sampled_from(["same", "str", "other", "short", "registered", "wrong"]))
def test_indexed_decoders_agree(inputs, variant):
    key, key_hash, entries, alignment = inputs
    data = joined(records.encode_record(key, key_hash, entries, alignment))
    spans = [ENTRY_DESC_STRUCT.unpack_from(data, 32 + 32 * i)[:3] for i in range(len(entries))]
    kwargs: dict[str, Any] = {"key": key, "length": len(data), "index": 2}
    if variant == "str":
        kwargs["key"] = key.decode("utf-8")
    elif variant == "other":
        kwargs["key"] = key + b"!"
    elif variant == "short":
        kwargs["length"] = len(data) + 8
    elif variant == "registered":
        kwargs["registered"] = lambda n: spans if n == len(spans) else [][0]
    elif variant == "wrong":
        kwargs["registered"] = lambda n: [(o, s, c ^ 1) for o, s, c in spans]
    results = [
        outcome(
            fn,
            memoryview(data),
            path="p",
            offset=64,
            alignment=alignment,
            text_cache={},
            **kwargs,
        )
        for fn in (ccodec.decode_indexed, records.decode_indexed)
    ]
    assert results[0] == results[1]
    assume(variant != "wrong" or entries)
    if variant in ("same", "str", "registered"):
        assert results[0][0] == "ok"


def test_registered_errors_that_are_not_value_errors_propagate():
    data = joined(records.encode_record(b"k", 1, [], 64))

    def broken(n: int) -> Any:
        raise KeyError("spans")

    for fn in (ccodec.decode_indexed, records.decode_indexed):
        with pytest.raises(KeyError):
            fn(
                memoryview(data),
                key=b"k",
                length=len(data),
                path=None,
                offset=0,
                alignment=64,
                registered=broken,
                text_cache={},
            )


# --- the point lookup's decoder (positional, spans as the catalog stores them) -


def _packed(data: bytes, count: int, wide: bool) -> bytes:
    """The record's spans packed as the catalog stores them (format/spans.py)."""
    rows = [ENTRY_DESC_STRUCT.unpack_from(data, 32 + 32 * i)[:3] for i in range(count)]
    fmt = struct.Struct("<QQI" if wide else "<III")
    return b"".join(fmt.pack(*r) for r in rows)


@SETTINGS
@given(
    record_inputs(),
    st.sampled_from(["same", "bytes", "wide", "other", "short", "wrong", "count", "memview"]),
)
def test_spanned_decoders_agree(inputs, variant):
    key, key_hash, entries, alignment = inputs
    data = joined(records.encode_record(key, key_hash, entries, alignment))
    spans = _packed(data, len(entries), wide=variant == "wide")
    view: Any = data if variant == "bytes" else memoryview(data)
    length = len(data)
    if variant == "other":
        key = key + b"!"
    elif variant == "short":
        length += 8
    elif variant == "wrong" and entries:
        spans = spans[:-1] + bytes([spans[-1] ^ 1])
    elif variant == "count":
        spans += bytes(12)
    elif variant == "memview":
        spans = memoryview(spans)  # not bytes: the reference decides
    text = key.decode("utf-8")
    results = [
        outcome(fn, view, text, length, "p", 64, alignment, spans, unpack_spans, {})
        for fn in (ccodec.decode_spanned, records.decode_spanned)
    ]
    assert results[0] == results[1]
    if variant in ("same", "bytes", "wide", "memview"):
        assert results[0][0] == "ok"
    if variant in ("other", "short", "count"):
        assert results[0][0] == "error"


@SETTINGS
@given(record_inputs())
def test_the_spanned_decoder_accepts_good_records_by_itself(inputs):
    data = joined(records.encode_record(*inputs))
    spans = _packed(data, len(inputs[2]), wide=False)
    with counting() as f:
        got = ccodec.decode_spanned(
            data, inputs[0].decode("utf-8"), len(data), "p", 0, inputs[3], spans, unpack_spans, {}
        )
    assert f.calls == []
    ref = records.decode_spanned(
        data, inputs[0], len(data), "p", 0, inputs[3], spans, unpack_spans, {}
    )
    assert type(got) is lazy.LazyRecord and comparable(got) == comparable(ref)


def test_spans_that_differ_are_named_by_the_reference(fallbacks):
    data = joined(
        records.encode_record(
            b"k",
            1,
            [
                PreparedEntry(
                    b"a", b"t/t", Codec.NONE, b"payload", crc32c_package.crc32c(b"payload")
                )
            ],
            64,
        )
    )
    good = _packed(data, 1, wide=False)
    bad = good[:8] + bytes(4)  # another CRC
    with pytest.raises(FormatError, match="not the one registered") as e:
        ccodec.decode_spanned(data, "k", len(data), "s.shard", 640, 64, bad, unpack_spans, {})
    assert (e.value.path, e.value.offset) == ("s.shard", 640)
    assert fallbacks.calls == ["ChecksumError"]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        ((b"",) * 8, {}),  # one short
        ((b"",) * 10, {}),  # one too many
        ((b"",) * 8, {"text_cache": {}}),  # by keyword
    ],
)
def test_the_spanned_decoders_take_nine_positional_arguments(args, kwargs):
    for fn in (ccodec.decode_spanned, records.decode_spanned):
        with pytest.raises(TypeError):
            fn(*args, **kwargs)


@pytest.mark.parametrize("bad", ["view", "length", "alignment", "text_cache", "unpack"])
def test_the_spanned_decoders_raise_the_same_error_for_a_bad_argument(bad):
    data = joined(records.encode_record(b"k", 1, [], 64))
    args: dict[str, Any] = {
        "view": data,
        "key": "k",
        "length": len(data),
        "path": "p",
        "offset": 0,
        "alignment": 64,
        "spans": b"",
        "unpack": unpack_spans,
        "text_cache": {},
    }
    args[bad] = {
        "view": 12,
        "length": "64",
        "alignment": 63,
        "text_cache": "cache",
        "unpack": None,
    }[bad]
    results = [
        outcome(fn, *args.values()) for fn in (ccodec.decode_spanned, records.decode_spanned)
    ]
    assert results[0] == results[1]


# --- the stream's batch decoder ---------------------------------------------


@SETTINGS
@given(st.lists(record_inputs(), min_size=1, max_size=6), st.data())
def test_the_batch_decoder_takes_the_whole_records_of_a_buffer(inputs, data):
    alignment = 64
    blobs = [joined(records.encode_record(k, h, e, alignment)) for k, h, e, _ in inputs]
    buf = b"".join(blobs)
    cut = data.draw(st.integers(0, len(buf)))
    pairs, used = ccodec.decode_run(
        memoryview(buf).toreadonly(), 0, cut, 640, -1, alignment, 5, None, {}, False, "s"
    )
    whole = count = 0
    for blob in blobs:
        if whole + len(blob) > cut:
            break
        whole += len(blob)
        count += 1
    assert (used, len(pairs)) == (whole, count)
    at = 0
    for i, (view, rec) in enumerate(pairs):
        ref = records.decode_record(
            memoryview(buf[at : at + len(view)]),
            path="s",
            offset=640 + at,
            alignment=alignment,
            index=5 + i,
        )
        assert bytes(view) == blobs[i]
        assert comparable(rec) == comparable(ref)
        at += len(view)


def test_the_batch_decoder_stops_before_a_damaged_record():
    alignment = 64
    blobs = [
        joined(
            records.encode_record(
                k,
                0,
                [PreparedEntry(b"a", b"t/t", Codec.NONE, p, crc32c_package.crc32c(p))],
                alignment,
            )
        )
        for k, p in [(b"a", b"1" * 100), (b"b", b"2" * 100), (b"c", b"3" * 100)]
    ]
    buf = bytearray(b"".join(blobs))
    buf[len(blobs[0]) + len(blobs[1]) - 1] ^= (
        0xFF  # the second record's padding: found only by check_padding
    )
    view = memoryview(bytes(buf))
    pairs, used = ccodec.decode_run(view, 0, len(buf), 64, -1, alignment, 0, None, {}, True, "s")
    assert (len(pairs), used) == (1, len(blobs[0]))
    pairs, used = ccodec.decode_run(view, 0, len(buf), 64, -1, alignment, 0, None, {}, False, "s")
    assert (len(pairs), used) == (3, len(buf))
    pairs, used = ccodec.decode_run(
        view, 0, len(buf), 64, 64 + len(blobs[0]) + 1, alignment, 0, None, {}, False, "s"
    )
    assert (len(pairs), used) == (1, len(blobs[0]))  # the next one would end past `end`


# --- lazy records ------------------------------------------------------------


def test_entries_are_built_on_first_use_only():
    entries = [
        PreparedEntry(n, b"application/octet-stream", Codec.NONE, p, crc32c_package.crc32c(p))
        for n, p in [(b"a", b"AAAA"), (b"b", b"BB"), (b"c", b"")]
    ]
    data = joined(records.encode_record(b"key", 0, entries, 64))
    rec = ccodec.decode_record(memoryview(data), path=None, offset=0, alignment=64)
    assert rec._some is None and rec._entries is None
    assert list(rec) == ["a", "b", "c"] and len(rec) == 3 and "b" in rec and "z" not in rec
    assert rec._some is None  # names alone build nothing
    assert rec["b"].data == b"BB"
    # One place per descriptor; only the entry asked for was built.
    assert rec._some is not None and [e is not None for e in rec._some] == [False, True, False]
    assert rec["b"] is rec["b"]
    assert rec["b"].view.obj is data or bytes(rec["b"].view) == b"BB"
    assert list(rec.entries) == ["a", "b", "c"]  # write order, whatever was built first
    assert rec.entries["b"] is rec["b"]
    with pytest.raises(KeyError):
        rec["z"]
    ref = records.decode_record(memoryview(data), path=None, offset=0, alignment=64)
    assert rec == ref and ref == rec and repr(rec) == repr(ref)


def test_repeated_entry_names_behave_as_the_reference_dict():
    entries = [
        PreparedEntry(n, t, Codec.NONE, p, crc32c_package.crc32c(p))
        for n, t, p in [(b"a", b"t/1", b"first"), (b"b", b"t/2", b"bee"), (b"a", b"t/3", b"second")]
    ]
    data = joined(records.encode_record(b"key", 0, entries, 64))
    rec = ccodec.decode_record(memoryview(data), path=None, offset=0, alignment=64)
    ref = records.decode_record(memoryview(data), path=None, offset=0, alignment=64)
    assert len(rec) == len(ref) == 2 and list(rec) == list(ref) == ["a", "b"]
    assert rec["a"].data == ref["a"].data == b"second"
    assert comparable(rec) == comparable(ref)


def test_layouts_are_shared_and_the_cache_is_bounded():
    cache: dict[Any, Any] = {}

    def record(name: bytes) -> Any:
        e = [PreparedEntry(name, b"t/t", Codec.NONE, b"x", crc32c_package.crc32c(b"x"))]
        data = joined(records.encode_record(b"k", 0, e, 64))
        return ccodec.decode_record(
            memoryview(data), path=None, offset=0, alignment=64, text_cache=cache
        )

    assert record(b"a")._layout is record(b"a")._layout
    for i in range(ccodec.TEXT_CACHE_MAX + 10):
        record(str(i).encode())
    assert len(cache) <= ccodec.TEXT_CACHE_MAX + 1  # layouts, plus the last one under None


def test_a_writable_view_is_copied_so_entries_cannot_change():
    p = b"payload"
    data = bytearray(
        joined(
            records.encode_record(
                b"k", 0, [PreparedEntry(b"a", b"t/t", Codec.NONE, p, crc32c_package.crc32c(p))], 64
            )
        )
    )
    rec = ccodec.decode_record(memoryview(data), path=None, offset=0, alignment=64)
    data[:] = bytes(len(data))
    assert rec["a"].data == p


# --- hand-made edge cases (random mutation rarely reaches them) ---------------


def resealed(data: bytes | bytearray) -> bytes:
    """The record with its head CRC recomputed, so only the edit is wrong."""
    b = bytearray(data)
    head_length = int.from_bytes(b[24:28], "little")
    b[4:8] = crc32c_package.crc32c(bytes(b[8:head_length])).to_bytes(4, "little")
    return bytes(b)


@pytest.mark.parametrize("extra", [0, 4096, 8192])
@pytest.mark.parametrize("check_padding", [False, True])
def test_a_long_zero_head_pad(extra, check_padding):
    """The reference compares head pads with 4096 zeros: a longer pad fails a full check."""
    b = bytearray(joined(records.encode_record(b"key", 0, [], 64)))
    length = len(b) + extra
    b += bytes(extra)
    b[8:16] = length.to_bytes(8, "little")
    b[24:28] = length.to_bytes(4, "little")
    ours, ref = decode_both(resealed(b), alignment=64, check_padding=check_padding)
    assert ours == ref
    assert ref[0] == ("error" if check_padding and extra > 4096 - 64 else "ok")


@pytest.mark.parametrize("grow", ["to_end", "past_end"])
def test_entry_strings_that_reach_or_pass_the_end_of_the_head(grow):
    p = b"data"
    entry = PreparedEntry(b"a", b"t/t", Codec.NONE, p, crc32c_package.crc32c(p))
    rec = records.encode_record(b"key", 0, [entry], 64)
    b = bytearray(joined(rec))
    pad = rec.head_length - (32 + 32 + 3 + 1 + 3)
    b[32 + 20 : 32 + 22] = (1 + pad + (grow == "past_end")).to_bytes(2, "little")
    ours, ref = decode_both(resealed(b), alignment=64)
    assert ours == ref
    assert ref[0] == ("ok" if grow == "to_end" else "error")


def test_an_entry_that_overruns_the_record():
    p = b"data"
    entry = PreparedEntry(b"a", b"t/t", Codec.NONE, p, crc32c_package.crc32c(p))
    b = bytearray(joined(records.encode_record(b"key", 0, [entry], 64)))
    for size in (60, 61, 2**64 - 1):
        b[32 + 8 : 32 + 16] = size.to_bytes(8, "little")
        ours, ref = decode_both(resealed(b), alignment=64)
        assert ours == ref
