"""Round trips through ShardWriter and ShardReader, checked against the spec's byte layout."""

from __future__ import annotations

import io
import json
import string
from typing import Any

import lz4.frame
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import shardcat.format.reader
import shardcat.format.writer
from shardcat.errors import (
    DuplicateKeyError,
    FormatError,
    InvalidKeyError,
    KeyNotFoundError,
    ShardcatError,
    TruncatedError,
    WriterClosedError,
)
from shardcat.format import Codec, Entry, Record, ShardInfo, ShardReader, ShardWriter, encode_value
from shardcat.format.codecs import should_compress
from shardcat.format.spec import ALIGNMENTS, MAX_KEY_BYTES, NO_SHARD_NUMBER, data_start

from .conftest import FIXED_CLOCK_NS, FIXED_FILE_ID, parse_layout, plain, write_shard

PROPERTY_SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# --- strategies -------------------------------------------------------------------

# codec="utf-8" excludes lone surrogates, which are not valid keys.
TEXT = st.characters(codec="utf-8")
SPECIAL_KEY_PARTS = [
    "\x00",
    "/",
    "//",
    "\\",
    "\U0001f600",
    "\U00010348",
    "é",
    " ",
    "\n",
    "..",
    "\ufeff",
]

keys = st.one_of(
    st.text(TEXT, min_size=1, max_size=30),
    st.lists(
        st.one_of(st.sampled_from(SPECIAL_KEY_PARTS), st.text(TEXT, max_size=4)),
        min_size=1,
        max_size=8,
    )
    .map("".join)
    .filter(bool),
    # Long keys, up to the 65535-byte limit (ASCII, or four-byte characters plus ASCII).
    st.integers(1, MAX_KEY_BYTES).map(lambda n: "k" * n),
    st.integers(0, MAX_KEY_BYTES // 4).map(
        lambda n: "\U0001f600" * n + "z" * (MAX_KEY_BYTES - 4 * n)
    ),
)

entry_names = st.one_of(
    st.sampled_from(
        ["jpg", "json", "txt", "npy", "cls", "png", "bin", "x.json", "left.jpg", "a/b", "__meta__"]
    ),
    st.text(TEXT, min_size=1, max_size=10),
).filter(lambda name: name != "__key__")  # write() takes the key from "__key__"

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
json_documents = st.one_of(
    st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    st.lists(json_values, max_size=5),
    st.tuples(json_scalars, json_scalars),
    json_scalars.filter(lambda v: not isinstance(v, str)),
)

binary_values = st.one_of(
    st.binary(max_size=300),
    # compressible: a short pattern repeated
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(1, 200)),
)

content_types = st.sampled_from(
    [
        "application/octet-stream",
        "image/jpeg",
        "text/plain",
        "application/x-thing",
        "video/mp4",
        "x",
    ]
)
explicit_entries = st.builds(
    Entry, binary_values, content_types, st.sampled_from([None, "none", "zstd", "lz4", Codec.ZSTD])
)

field_names = st.text(string.ascii_letters, min_size=1, max_size=4)
array_dtypes = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?"),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"),
    hnp.timedelta64_dtypes(endianness="?"),
    hnp.byte_string_dtypes(max_len=6),
    hnp.unicode_string_dtypes(endianness="?", max_len=4),
    # Structured dtypes with ASCII field names (non-Latin-1 names have their own test).
    st.lists(
        st.tuples(field_names, hnp.scalar_dtypes()),
        min_size=1,
        max_size=3,
        unique_by=lambda f: f[0],
    ).map(np.dtype),
)


def _lay_out(array: np.ndarray, how: str) -> np.ndarray:
    if how == "fortran":
        return np.asfortranarray(array)
    if how == "transposed":
        return array.T
    if how == "strided" and array.ndim:
        return array[::2]
    return array


arrays = st.builds(
    _lay_out,
    hnp.arrays(array_dtypes, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)),
    st.sampled_from(["c", "fortran", "transposed", "strided"]),
)

values = st.one_of(binary_values, st.text(max_size=50), json_documents, arrays, explicit_entries)

compressions = st.sampled_from([None, "none", "zstd", "lz4"])
alignments = st.sampled_from(ALIGNMENTS)
# Metadata must be strict JSON (no NaN or infinities).
strict_json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(),
    ),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=10,
)
user_metadata = st.dictionaries(st.text(max_size=8), strict_json_values, max_size=4)


@st.composite
def sample_lists(draw: st.DrawFn, max_records: int = 6) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key in draw(st.lists(keys, max_size=max_records, unique=True)):
        n = draw(st.one_of(st.integers(0, 5), st.integers(40, 50)))
        names = draw(st.lists(entry_names, min_size=n, max_size=n, unique=True))
        entries = {name: draw(values if n < 40 else binary_values) for name in names}
        out.append((key, entries))
    return out


# --- checks ---------------------------------------------------------------------------


def assert_same_array(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()  # bytewise: NaN payloads and -0.0 included
    if want.ndim > 1 and want.flags.f_contiguous and not want.flags.c_contiguous:
        assert got.flags.f_contiguous


def check_entry(name: str, value: Any, entry: Entry, writer_codec: Codec) -> None:
    want = encode_value(name, value)
    data = bytes(want.view)
    assert entry.content_type == want.content_type
    assert entry.data == data
    assert bytes(entry.view) == data
    if isinstance(value, Entry) and value.codec is not None:
        assert entry.codec is value.codec
    elif writer_codec is Codec.NONE or len(data) < 64 or not should_compress(want.content_type):
        assert entry.codec is Codec.NONE
    else:
        assert entry.codec in (Codec.NONE, writer_codec)
    if isinstance(value, np.ndarray):
        assert_same_array(entry.decode(), value)
    elif value is None or isinstance(value, (dict, list, tuple, int, float)):
        assert entry.decode() == json.loads(json.dumps(value))
    elif isinstance(value, str) and want.content_type.startswith("text/"):
        assert entry.decode() == value


def assert_same_info(written: ShardInfo, read: ShardInfo) -> None:
    assert read.path == written.path
    assert read.header == written.header
    assert read.size == written.size
    assert read.data_crc == written.data_crc
    assert read.footer_crc == written.footer_crc
    assert read.keys == written.keys
    assert read.records.dtype == written.records.dtype
    assert read.records.tobytes() == written.records.tobytes()
    assert read.entries.dtype == written.entries.dtype
    assert read.entries.tobytes() == written.entries.tobytes()
    assert read.specs == written.specs
    assert read.metadata == written.metadata
    assert read.record_count == written.record_count
    assert read.file_id == written.file_id
    assert read.created == written.created
    assert read.payload_bytes() == written.payload_bytes()


def decompress_stored(stored: bytes, codec: int) -> bytes:
    if codec == Codec.ZSTD:
        return zstandard.ZstdDecompressor().decompress(stored)
    if codec == Codec.LZ4:
        return lz4.frame.decompress(stored)
    assert codec == Codec.NONE
    return stored


def npy_header_length(data: bytes) -> int:
    """Bytes before the array data of a .npy file (magic, version, header length, header)."""
    assert data[:6] == b"\x93NUMPY"
    if data[6] == 1:
        return 10 + int.from_bytes(data[8:10], "little")
    return 12 + int.from_bytes(data[8:12], "little")


def write_samples(
    samples: list[tuple[str, dict[str, Any]]], **kwargs: Any
) -> tuple[bytes, ShardInfo]:
    buf = io.BytesIO()
    w = ShardWriter(buf, **kwargs)
    for i, (key, entries) in enumerate(samples):
        if i % 2:
            assert w.write({"__key__": key, **entries}) == i
        else:
            assert w.add(key, entries) == i
    info = w.close()
    return buf.getvalue(), info


# --- property tests -------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(
    samples=sample_lists(), compression=compressions, alignment=alignments, metadata=user_metadata
)
def test_random_shards_round_trip_exactly_and_follow_the_spec_layout(
    samples, compression, alignment, metadata
):
    data, written = write_samples(
        samples, path="prop.shard", compression=compression, alignment=alignment, metadata=metadata
    )
    writer_codec = Codec.parse(compression)
    expected = [(k, {n: v for n, v in e.items() if not n.startswith("__")}) for k, e in samples]

    # The bytes follow the spec, independently of the library's reader.
    parsed = parse_layout(data)
    assert parsed.alignment == alignment
    assert [r.key for r in parsed.records] == [k for k, _ in expected]
    for rec, (_, entries) in zip(parsed.records, expected):
        assert [e.name for e in rec.entries] == list(entries)
        for e, (name, value) in zip(rec.entries, entries.items()):
            assert decompress_stored(e.stored, e.codec) == bytes(encode_value(name, value).view)

    with ShardReader(data, name="prop.shard") as r:
        assert len(r) == len(expected)
        assert r.keys() == [k for k, _ in expected]
        assert r.metadata == json.loads(json.dumps(metadata))
        assert_same_info(written, r.info)
        assert written.size == len(data) == r.size

        streamed = list(r)
        by_index = [r.read(i) for i in range(len(r))]
        by_key = [r.get(k) for k, _ in expected]
        taken = r.take(list(range(len(r)))[::-1])[::-1]
        ranged = r.read_range(0, len(r))
        for got in (by_index, by_key, taken, ranged):
            assert [plain(x) for x in got] == [plain(x) for x in streamed]

        for i, (rec, (key, entries)) in enumerate(zip(streamed, expected)):
            assert rec.key == key
            assert key in r
            assert list(rec.entries) == list(entries)
            for name, value in entries.items():
                check_entry(name, value, rec[name], writer_codec)
                only = r.read(i, entries=[name])
                assert only.key == key
                assert list(only.entries) == [name]
                assert only[name].data == rec[name].data

        # Every payload starts on an aligned file offset; uncompressed .npy data on 64 bytes.
        starts = r.footer.entry_starts
        for i, (rec, (_, entries)) in enumerate(zip(streamed, expected)):
            base = int(r.footer.records[i]["offset"])
            assert base % alignment == 0
            for j, (name, entry) in enumerate(rec.entries.items()):
                at = base + int(r.footer.entries[int(starts[i]) + j]["offset"])
                assert at == parsed.records[i].entries[j].file_offset
                assert at % alignment == 0
                is_array = isinstance(entries[name], np.ndarray)
                if is_array and entry.codec is Codec.NONE and alignment >= 64:
                    assert (at + npy_header_length(entry.data)) % 64 == 0, name

        report = r.verify()
        assert report.records == len(expected)
        assert report.entries == sum(len(e) for _, e in expected)
        assert report.bytes == len(data)
        assert report.data_crc == r.trailer.data_crc == written.data_crc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(array=arrays, compression=compressions, alignment=st.sampled_from([8, 64, 256, 4096]))
def test_numpy_arrays_round_trip_bytewise_as_zero_copy_aligned_views(array, compression, alignment):
    data = write_shard(
        [{"__key__": "a", "npy": array}], compression=compression, alignment=alignment
    )
    r = ShardReader(data)
    entry = r.get("a")["npy"]
    got = entry.decode()
    assert isinstance(got, np.ndarray)
    assert_same_array(got, array)
    assert not got.flags.writeable
    if entry.codec is Codec.NONE:
        # A view of the bytes read from the shard, not a copy.
        if got.nbytes:
            assert np.shares_memory(got, np.frombuffer(entry.view, dtype=np.uint8))
        at = int(r.footer.records[0]["offset"]) + int(r.footer.entries[0]["offset"])
        assert at % alignment == 0
        if alignment >= 64:
            assert (at + npy_header_length(entry.data)) % 64 == 0


SPECIFIC_ARRAYS = {
    "0-d": np.array(3.5),
    "0-d-int": np.int16(-7),
    "empty": np.zeros((0,), dtype="<f8"),
    "empty-2d": np.zeros((3, 0, 2), dtype="<i4"),
    "fortran": np.asfortranarray(np.arange(24, dtype="<i8").reshape(2, 3, 4)),
    "non-contiguous": np.arange(40, dtype="<u2").reshape(5, 8)[::2, 1::3],
    "big-endian": np.arange(10, dtype=">f4"),
    "bool": np.array([[True, False], [False, True]]),
    "complex": np.array([1 + 2j, np.nan - 1j], dtype="<c16"),
    "datetime": np.array(["2024-02-29T12:00", "NaT"], dtype="datetime64[m]"),
    "unicode": np.array(["ünï", "\U0001f600", ""], dtype="<U3"),
    "bytes": np.array([b"a\x00b", b""], dtype="S3"),
    "structured": np.array([(1, 2.5, b"x")], dtype=[("a", "<i4"), ("b", ">f8"), ("c", "S2")]),
    "float16": np.array([0.5, -0.0, np.inf], dtype="<f2"),
}


@pytest.mark.parametrize("compression", [None, "zstd"])
@pytest.mark.parametrize("name", list(SPECIFIC_ARRAYS))
def test_specific_numpy_arrays_round_trip(name, compression):
    value = SPECIFIC_ARRAYS[name]
    data = write_shard([{"__key__": name, "npy": value}], compression=compression)
    got = ShardReader(data).get(name)["npy"].decode()
    assert_same_array(got, np.asarray(value))


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
@pytest.mark.parametrize("alignment", [8, 4096])
def test_multi_mebibyte_entries_round_trip(compression, alignment):
    rng = np.random.default_rng(1)
    noise = rng.bytes(3 * 1024 * 1024 + 5)  # incompressible: stored as is
    repetitive = b"shardcat " * (2 * 1024 * 1024 // 9)  # compressible
    array = rng.standard_normal((512, 300)).astype("<f8", order="F")
    samples = [
        {"__key__": "big/0", "bin": noise, "txt": repetitive.decode()},
        {"__key__": "big/1", "npy": array, "empty": b""},
    ]
    data = write_shard(samples, compression=compression, alignment=alignment)
    parse_layout(data)
    r = ShardReader(data)
    a, b = list(r)
    assert a["bin"].data == noise
    assert a["bin"].codec is Codec.NONE
    assert a["txt"].decode() == repetitive.decode()
    if compression is not None:
        assert a["txt"].codec is Codec.parse(compression)
        assert len(data) < len(noise) + len(repetitive)
    assert_same_array(b["npy"].decode(), array)
    assert b["empty"].data == b""
    assert r.get("big/1", entries=["npy"])["npy"].data == b["npy"].data
    r.verify()


@pytest.mark.parametrize("alignment", ALIGNMENTS)
def test_records_and_payloads_start_on_multiples_of_the_alignment_in_the_file(alignment):
    samples = [
        {
            "__key__": f"key/{i}",
            "bin": b"x" * (37 * i),
            "npy": np.arange(i, dtype="<f8"),
            "json": {"i": i},
        }
        for i in range(4)
    ]
    data = write_shard(samples, alignment=alignment)
    parsed = parse_layout(data)
    footer = ShardReader(data).footer
    assert parsed.records[0].offset == data_start(alignment)
    for i, rec in enumerate(parsed.records):
        assert rec.offset % alignment == 0, f"record {i} at {rec.offset}"
        assert int(footer.records[i]["offset"]) == rec.offset
        for e in rec.entries:
            assert e.file_offset % alignment == 0, f"record {i} entry {e.name} at {e.file_offset}"
            if e.name == "npy" and alignment >= 64:
                assert (e.file_offset + npy_header_length(e.stored)) % 64 == 0
    assert parsed.footer_offset % alignment == 0


# --- keys -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "k" * MAX_KEY_BYTES,
        "\U0001f600" * (MAX_KEY_BYTES // 4) + "abc",
        "é" * (MAX_KEY_BYTES // 2) + "x",
        "\x00",
        "a\x00b/../c",
        "/",
        "\U0010ffff",
    ],
    ids=[
        "ascii-limit",
        "astral-limit",
        "two-byte-limit",
        "nul",
        "nul-and-slashes",
        "slash",
        "max-codepoint",
    ],
)
def test_extreme_valid_keys_round_trip(key):
    assert len(key.encode()) <= MAX_KEY_BYTES
    data = write_shard(
        [{"__key__": key, "txt": "x"}, {"__key__": key + "\x00" if len(key) < 100 else "other"}]
    )
    r = ShardReader(data)
    assert r.keys()[0] == key
    assert r.get(key).key == key
    assert next(iter(r)).key == key
    r.verify()


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("", "empty key"),
        (b"bytes", "keys are strings"),
        (42, "keys are strings"),
        (None, "keys are strings"),
        ("lone \ud800 surrogate", "not valid Unicode"),
        ("\udfff", "not valid Unicode"),
        ("k" * (MAX_KEY_BYTES + 1), "the limit is 65535"),
        ("\U0001f600" * (MAX_KEY_BYTES // 4 + 1), "the limit is 65535"),
    ],
    ids=[
        "empty",
        "bytes",
        "int",
        "none",
        "lone-high-surrogate",
        "lone-low-surrogate",
        "ascii-over",
        "astral-over",
    ],
)
def test_invalid_keys_raise_invalid_key_error_and_leave_the_writer_usable(key, fragment):
    buf = io.BytesIO()
    w = ShardWriter(buf, path="keys.shard")
    with pytest.raises(InvalidKeyError, match=fragment) as info:
        w.add(key, {"txt": "x"})
    assert isinstance(info.value, ValueError)
    assert "keys.shard" in str(info.value)
    w.add("fine", {"txt": "x"})
    w.close()
    assert ShardReader(buf.getvalue()).keys() == ["fine"]


def test_write_without_key_raises_invalid_key_error():
    with pytest.raises(InvalidKeyError, match="__key__"):
        ShardWriter(io.BytesIO()).write({"txt": "x"})


def test_duplicate_key_raises_and_the_first_record_is_kept():
    buf = io.BytesIO()
    w = ShardWriter(buf, path="dup.shard")
    w.add("same", {"txt": "first"})
    with pytest.raises(DuplicateKeyError) as info:
        w.add("same", {"txt": "second"})
    assert info.value.keys == ["same"]
    assert "dup.shard" in str(info.value)
    with pytest.raises(DuplicateKeyError):
        w.write({"__key__": "same"})
    w.add("Same", {"txt": "other case is another key"})
    w.close()
    r = ShardReader(buf.getvalue())
    assert r.keys() == ["same", "Same"]
    assert r.get("same")["txt"].decode() == "first"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "names are non-empty strings"),
        ("bad \ud800 name", "not valid Unicode"),
        ("n" * 65536, "longer than"),
    ],
    ids=["empty", "lone-surrogate", "too-long"],
)
def test_invalid_entry_names_raise_invalid_key_error(name, fragment):
    with pytest.raises(InvalidKeyError, match=fragment):
        ShardWriter(io.BytesIO()).add("k", {name: b"x"})


@pytest.mark.parametrize("name", [1, b"jpg", None, ("a",)], ids=["int", "bytes", "none", "tuple"])
def test_non_string_entry_names_raise_invalid_key_error(name):
    # The docstring of add() promises InvalidKeyError for a name that is "not text".
    w = ShardWriter(io.BytesIO())
    with pytest.raises(InvalidKeyError):
        w.add("k", {name: b"x"})


def test_entry_names_starting_with_two_underscores_are_skipped():
    data = write_shard(
        [
            {
                "__key__": "a",
                "__url__": "https://example.com",
                "__meta": {"x": 1},
                "_single": b"kept",
                "txt": "t",
            },
            {"__key__": "b", "__only__": b"nothing else"},
        ]
    )
    r = ShardReader(data)
    assert list(r.get("a").entries) == ["_single", "txt"]
    assert list(r.get("b").entries) == []
    assert r.get("a").decode() == {"__key__": "a", "_single": b"kept", "txt": "t"}
    assert r.get("b").decode() == {"__key__": "b"}
    assert all(not s.name.startswith("__") for s in r.footer.specs)


# --- reading API --------------------------------------------------------------------


def test_get_of_a_missing_key_raises_key_not_found_error_which_is_a_key_error(small_shard):
    r = ShardReader(small_shard, name="small.shard")
    for missing in ["cat/9999", "cat/000", "CAT/0001", "cat/0001 ", "\ud800", ""]:
        assert missing not in r
        with pytest.raises(KeyNotFoundError) as info:
            r.get(missing)
        assert isinstance(info.value, KeyError)
        assert isinstance(info.value, ShardcatError)
        assert "small.shard" in str(info.value)
    with pytest.raises(KeyError):
        r.get("nope")
    assert 42 not in r
    assert b"cat/0001" not in r


@pytest.mark.parametrize("key", [b"cat/0001", 1, None], ids=["bytes", "int", "none"])
def test_get_with_a_key_that_is_not_a_string_raises_type_error_or_key_error(samples, key):
    r = ShardReader(write_shard(samples))
    assert key not in r
    with pytest.raises((TypeError, KeyError)):
        r.get(key)


def test_text_entries_decode_with_their_declared_charset():
    data = write_shard(
        [
            {
                "__key__": "a",
                "latin": Entry("café".encode("latin-1"), "text/plain; charset=latin-1"),
                "utf16": Entry("naïve".encode("utf-16"), "text/plain; charset=utf-16"),
                "utf8": Entry("ünï".encode(), "text/plain; charset=utf-8"),
            }
        ]
    )
    rec = ShardReader(data).get("a")
    assert rec["utf8"].decode() == "ünï"
    assert rec["latin"].decode() == "café"
    assert rec["utf16"].decode() == "naïve"


def test_take_and_read_with_entries_read_only_those_entries(small_shard, expected_records):
    r = ShardReader(small_shard)
    order = [3, 0, 4, 0, 2]
    full = r.take(order)
    assert [plain(x) for x in full] == [expected_records[i] for i in order]
    some = r.take(order, entries=["json", "bin"])
    for rec, i in zip(some, order):
        key, entries = expected_records[i]
        assert rec.key == key
        assert rec.index == i
        assert {n: (e.content_type, e.data) for n, e in rec.entries.items()} == {
            n: v for n, v in entries.items() if n in ("json", "bin")
        }
    assert r.take([]) == []
    assert r.take([1], entries=[]) == [Record(expected_records[1][0], {})]
    assert r.take([1], entries=["no-such-entry"])[0].entries == {}
    rec = r.read(3, entries=["bin", "lz", "missing"])
    assert sorted(rec.entries) == ["bin", "lz"]
    assert rec["bin"].data == bytes(200)
    assert rec["lz"].decode() == b"lz4 lz4 lz4 " * 10


def test_iter_records_with_entries_yields_only_those_entries(small_shard, expected_records):
    r = ShardReader(small_shard)
    got = [(rec.key, sorted(rec.entries)) for rec in r.iter_records(entries=["json", "txt"])]
    assert got == [(k, sorted(n for n in e if n in ("json", "txt"))) for k, e in expected_records]


def test_negative_indices_behave_like_python_sequences(small_shard, expected_records):
    r = ShardReader(small_shard)
    assert plain(r.read(-1)) == expected_records[-1]
    assert plain(r.read(-5)) == expected_records[0]
    with pytest.raises(IndexError):
        r.read(5)
    with pytest.raises(IndexError):
        r.read(-6)
    assert r.read(-1, entries=["json"]).key == expected_records[-1][0]
    # take() accepts any indices "in any order"; negative ones must mean the same as in read().
    assert [plain(x) for x in r.take([-1, 0])] == [expected_records[-1], expected_records[0]]
    taken = r.take([-1], entries=["json"])[0]
    assert taken.key == expected_records[-1][0]
    assert list(taken.entries) == ["json"]


def test_record_and_entry_accessors(small_shard):
    r = ShardReader(small_shard)
    rec = r.get("cat/0002")
    assert rec.key == "cat/0002"
    assert "json" in rec and "txt" not in rec
    assert list(rec) == ["jpg", "json", "npy"]
    assert len(rec) == 3
    assert rec["json"].decode() == {"label": 4}
    assert rec["json"].content_type == "application/json"
    assert rec["jpg"].content_type == "image/jpeg"
    assert rec["jpg"].codec is Codec.NONE  # already-compressed media are not recompressed
    assert isinstance(rec["jpg"].data, bytes)
    assert isinstance(rec["jpg"].view, memoryview)
    decoded = rec.decode()
    assert decoded["__key__"] == "cat/0002"
    np.testing.assert_array_equal(decoded["npy"], np.arange(12, dtype="<f4"))
    first = r.get("cat/0001")
    assert first["txt"].decode() == "a small cat " * 20
    assert first["txt"].codec is Codec.ZSTD
    assert len(first["txt"]) == len("a small cat " * 20)
    with pytest.raises(KeyError):
        rec["missing"]


# --- writer lifecycle -----------------------------------------------------------------


def test_writer_output_is_deterministic_given_clock_and_file_id(samples):
    kwargs: dict[str, Any] = {"compression": "zstd", "metadata": {"a": [1, 2]}, "shard_number": 7}
    first = write_shard(samples, **kwargs)
    assert write_shard(samples, **kwargs) == first
    other = write_shard(samples, **kwargs, file_id=bytes(16 * [0xAB]))
    assert len(other) == len(first)
    changed = {i for i, (x, y) in enumerate(zip(first, other)) if x != y}
    trailer = len(first) - 64
    allowed = set(range(24, 40)) | set(range(60, 64)) | set(range(trailer + 44, trailer + 48))
    allowed |= set(range(trailer + 52, trailer + 56))
    assert changed <= allowed
    assert changed & set(range(24, 40))

    h = ShardReader(first).header
    assert h.created_us == FIXED_CLOCK_NS // 1000
    assert h.file_id == FIXED_FILE_ID
    assert h.shard_number == 7
    assert h.default_codec is Codec.ZSTD
    assert h.alignment == 64
    assert ShardReader(write_shard(samples)).header.shard_number == NO_SHARD_NUMBER


def test_random_file_ids_differ_between_writers(samples):
    a = write_shard(samples, file_id=None)
    b = write_shard(samples, file_id=None)
    assert ShardReader(a).header.file_id != ShardReader(b).header.file_id


def test_close_is_idempotent_and_add_after_close_raises():
    buf = io.BytesIO()
    w = ShardWriter(buf, path="closed.shard")
    w.add("a", {"txt": "x"})
    with pytest.raises(WriterClosedError):
        w.info  # noqa: B018 - not closed yet
    info = w.close()
    size = len(buf.getvalue())
    assert w.close() is info
    assert w.info is info
    assert len(buf.getvalue()) == size
    with pytest.raises(WriterClosedError, match=r"closed\.shard"):
        w.add("b", {"txt": "y"})
    with pytest.raises(WriterClosedError):
        w.write({"__key__": "b"})
    assert isinstance(WriterClosedError("x"), ShardcatError)


def test_abort_leaves_no_footer_and_blocks_further_use():
    buf = io.BytesIO()
    w = ShardWriter(buf)
    w.add("a", {"txt": "x"})
    w.abort()
    with pytest.raises(WriterClosedError):
        w.add("b", {"txt": "y"})
    with pytest.raises(WriterClosedError):
        w.close()
    with pytest.raises(TruncatedError):
        ShardReader(buf.getvalue())


def _write_then_fail(file: Any) -> None:
    with ShardWriter(file, close_file=True) as w:
        w.add("a", {"txt": "x"})
        raise RuntimeError("boom")


def test_context_manager_aborts_on_error_and_closes_file_when_asked(tmp_path):
    path = tmp_path / "ctx.shard"
    f = open(path, "wb")  # noqa: SIM115 - the writer closes it
    with pytest.raises(RuntimeError, match="boom"):
        _write_then_fail(f)
    assert f.closed
    with pytest.raises(TruncatedError):
        ShardReader(path)
    f = open(path, "wb")  # noqa: SIM115
    with ShardWriter(f, close_file=True) as w:
        w.add("a", {"txt": "x"})
    assert f.closed
    with ShardReader(path) as r:
        assert r.keys() == ["a"]
    g = io.BytesIO()
    with ShardWriter(g) as w:
        w.add("a", {"txt": "x"})
    assert not g.closed


@pytest.mark.parametrize(
    "metadata",
    [{"x": object()}, {"x": {1, 2}}, {"x": b"bytes"}, {"x": 1j}],
    ids=["object", "set", "bytes", "complex"],
)
def test_non_json_metadata_raises_type_error_before_anything_is_written(metadata):
    buf = io.BytesIO()
    with pytest.raises(TypeError, match="JSON"):
        ShardWriter(buf, path="meta.shard", metadata=metadata)
    assert buf.getvalue() == b""


def test_metadata_that_json_cannot_sort_fails_at_construction_not_at_close():
    # The footer is written with sort_keys=True: mixed key types only fail then.
    buf = io.BytesIO()
    with pytest.raises(TypeError, match="JSON"):
        ShardWriter(buf, metadata={1: "a", "b": 2})
    assert buf.getvalue() == b"", "the failure must come before any record is written"


def test_writer_info_metadata_equals_what_readers_rebuild_from_the_footer():
    buf = io.BytesIO()
    with ShardWriter(buf, metadata={"pair": (1, 2), "n": 3}) as w:
        w.add("a", {"txt": "x"})
    read = ShardReader(buf.getvalue()).info
    assert ShardReader(buf.getvalue()).metadata == {"pair": [1, 2], "n": 3}
    assert w.info.metadata == read.metadata


def test_invalid_writer_arguments_raise_value_error():
    with pytest.raises(ValueError, match="alignment"):
        ShardWriter(io.BytesIO(), alignment=48)
    with pytest.raises(ValueError, match="compression"):
        ShardWriter(io.BytesIO(), compression="gzip")
    with pytest.raises(TypeError, match="cannot store"):
        ShardWriter(io.BytesIO()).add("k", {"x": object()})


def test_shard_with_zero_records_round_trips():
    buf = io.BytesIO()
    w = ShardWriter(buf, path="empty.shard", metadata={"note": "nothing here"}, alignment=4096)
    info = w.close()
    data = buf.getvalue()
    parsed = parse_layout(data)
    assert parsed.footer_offset == data_start(4096)
    assert parsed.records == []
    r = ShardReader(data, name="empty.shard")
    assert len(r) == 0
    assert r.keys() == []
    assert list(r) == []
    assert r.take([]) == []
    assert r.read_range(0, 10) == []
    assert r.metadata == {"note": "nothing here"}
    assert "a" not in r
    with pytest.raises(KeyNotFoundError):
        r.get("a")
    with pytest.raises(IndexError):
        r.read(0)
    assert_same_info(info, r.info)
    assert info.record_count == 0
    report = r.verify()
    assert (report.records, report.entries, report.bytes) == (0, 0, len(data))


def test_records_without_entries_round_trip():
    data = write_shard(
        [{"__key__": "a"}, {"__key__": "b", "x": b"1"}, {"__key__": "c"}], alignment=8
    )
    parse_layout(data)
    r = ShardReader(data)
    assert [(x.key, len(x)) for x in r] == [("a", 0), ("b", 1), ("c", 0)]
    assert r.get("c").entries == {}
    r.verify()


def test_hash_collisions_still_find_the_exact_key(monkeypatch):
    def constant(raw: bytes) -> int:
        return 0xDEAD_BEEF_DEAD_BEEF

    monkeypatch.setattr(shardcat.format.writer, "key_hash", constant)
    monkeypatch.setattr(shardcat.format.reader, "key_hash", constant)
    monkeypatch.setattr(shardcat.format.verify, "key_hash", constant)
    keys = ["a", "ab", "abc", "b", "a\x00", "\U0001f600", "z" * 1000]
    data = write_shard([{"__key__": k, "txt": f"value of {k!r}"} for k in reversed(keys)])
    r = ShardReader(data)
    assert set(r.footer.records["key_hash"].tolist()) == {0xDEAD_BEEF_DEAD_BEEF}
    for k in keys:
        assert k in r
        rec = r.get(k)
        assert rec.key == k
        assert rec["txt"].decode() == f"value of {k!r}"
        assert r.get(k, entries=["txt"]).key == k
    for missing in ["", "abcd", "A", "a\x00\x00"]:
        assert missing not in r
        with pytest.raises(KeyNotFoundError):
            r.get(missing)
    r.verify()


def test_entry_objects_keep_their_content_type_and_forced_codec():
    data = write_shard(
        [
            {
                "__key__": "a",
                "forced": Entry(b"abc", "application/x-tiny", "zstd"),  # forced even when it grows
                "kept": Entry(b"x" * 1000, "application/x-big", "none"),
                "auto": Entry(b"x" * 1000, "application/x-big"),
                "jpeg": Entry(b"y" * 1000, "image/jpeg"),
                "empty-lz4": Entry(b"", "application/x-empty", "lz4"),
            }
        ],
        compression="lz4",
    )
    rec = ShardReader(data).get("a")
    assert (rec["forced"].codec, rec["forced"].data, rec["forced"].content_type) == (
        Codec.ZSTD,
        b"abc",
        "application/x-tiny",
    )
    assert rec["kept"].codec is Codec.NONE
    assert rec["auto"].codec is Codec.LZ4
    assert rec["jpeg"].codec is Codec.NONE
    assert (rec["empty-lz4"].codec, rec["empty-lz4"].data) == (Codec.LZ4, b"")


@pytest.mark.filterwarnings("ignore:Stored array in format 3.0:UserWarning")
def test_structured_arrays_with_non_latin1_field_names_keep_their_names():
    # np.save writes .npy format 3.0 (UTF-8 header) for such dtypes.
    array = np.zeros(3, dtype=[("€uro", "<i4"), ("\U0001f600", "<f8")])
    array["€uro"] = [1, 2, 3]
    got = ShardReader(write_shard([{"__key__": "a", "npy": array}])).get("a")["npy"].decode()
    assert got.dtype == array.dtype
    assert got.dtype.names == ("€uro", "\U0001f600")
    assert_same_array(got, array)


def test_reader_rejects_values_that_are_not_shards_with_format_error():
    with pytest.raises(TypeError):
        ShardReader(12345)  # type: ignore[arg-type]
    with pytest.raises(FormatError):
        ShardReader(b"\x00" * 200)


def test_footer_counts_entries_per_content_type_and_payload_bytes_from_the_index():
    """``content_types`` and ``payload_bytes`` in the footer: what was stored, per kind, summed."""
    samples = [
        {"__key__": "a", "txt": "x" * 500, "bin": b"\x00" * 300, "json": {"i": 1}},
        {"__key__": "b", "bin": b"\x01" * 70, "jpg": b"\xff\xd8" + b"j" * 100},
        {"__key__": "c", "txt": "short", "bin": b"", "cls": 3},
        {"__key__": "d"},
    ]
    data = write_shard(samples, compression="zstd")
    r = ShardReader(data)
    meta = r.footer.metadata
    entries = r.footer.entries
    stored: dict[str, int] = {}
    for spec in entries["spec"].tolist():
        ctype = r.footer.specs[spec].content_type
        stored[ctype] = stored.get(ctype, 0) + 1
    assert meta["content_types"] == stored
    assert sum(stored.values()) == 8 == len(entries)
    assert meta["payload_bytes"] == int(entries["size"].sum()) > 0
    assert meta["payload_bytes"] < 500 + 300  # the zstd-compressed text and bytes, as stored
    empty = ShardReader(write_shard([])).footer.metadata
    assert (empty["content_types"], empty["payload_bytes"]) == ({}, 0)
