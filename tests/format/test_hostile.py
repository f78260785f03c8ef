"""Hand-made shards with valid CRCs: typed errors with bounded memory, never a crash.

Each shard here passes every checksum (see ``hostile.py``), so the reader has
to survive what the bytes say: metadata nested without end, timestamps no
calendar holds, compressed frames that lie about their size or are bombs, and
footers that describe more file than there is. Memory is measured with
tracemalloc, which sees every buffer Python or the codec libraries allocate.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import lz4.frame
import numpy as np
import pytest
import zstandard

import shardcat.config
from shardcat.errors import DecompressionLimitError, FormatError, TruncatedError
from shardcat.format import (
    BytesSource,
    Entry,
    ShardReader,
    ShardWriter,
    decode_value,
    iter_partial,
)
from shardcat.format.codecs import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    MAX_DECOMPRESSED_ENV,
    decompress,
    max_decompressed_bytes,
)
from shardcat.format.spec import (
    CREATED_US_MAX,
    CREATED_US_MIN,
    MAX_METADATA_DEPTH,
    TAIL_READ_SIZE,
    TRAILER_SIZE,
    Codec,
)

from .conftest import FIXED_CLOCK_NS, parse_layout, reseal, write_shard
from .hostile import (
    build_shard,
    lz4_frame,
    single_entry_shard,
    with_longer_last_record,
    with_metadata,
    zstd_frame,
    zstd_rle_bomb,
)

NAME = "hostile/shard-000001.shard"
MEMORY_BUDGET = 64 << 20
GIB = 1 << 30


@pytest.fixture(autouse=True)
def _default_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    shardcat.config.set(max_decompressed_bytes=None)


@contextmanager
def peak_memory() -> Iterator[list[int]]:
    """Yields a list that holds the peak of traced memory (bytes) once the block ends."""
    result: list[int] = []
    tracemalloc.start()
    try:
        yield result
    finally:
        result.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def raises_within_budget(
    fn: Callable[[], Any], error: type[BaseException] = FormatError
) -> BaseException:
    """Run ``fn``: it must raise ``error`` and allocate less than MEMORY_BUDGET on the way."""
    with peak_memory() as peak, pytest.raises(error) as info:
        fn()
    assert peak[0] < MEMORY_BUDGET, f"peak {peak[0] / 2**20:.0f} MiB"
    return info.value


def on_disk(tmp_path: Any, data: bytes, name: str = "hostile.shard") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


FINE = [("txt", "text/plain", Codec.NONE, b"fine")]


def test_the_builders_make_shards_that_read_and_verify(tmp_path):
    content = b"compressible " * 500
    data = build_shard(
        [
            ("a", FINE),
            (
                "b",
                [("z", "application/octet-stream", Codec.ZSTD, zstd_frame(content, len(content)))],
            ),
            ("c", [("l", "application/octet-stream", Codec.LZ4, lz4_frame(content, len(content)))]),
        ]
    )
    parse_layout(data)  # the independent parser: every CRC and layout rule holds
    r = ShardReader(on_disk(tmp_path, data))
    assert r.get("b")["z"].data == content
    assert r.get("c")["l"].data == content
    assert r.verify().records == 3
    bomb = zstd_rle_bomb(1 << 20, 1 << 20)
    assert zstandard.ZstdDecompressor().decompress(bomb) == bytes(1 << 20)
    same = json.dumps(r.footer.metadata, sort_keys=True, separators=(",", ":")).encode()
    assert with_metadata(data, same) == data


# --- metadata JSON ---------------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    """Footer metadata whose "user" value nests arrays so that the document is ``depth`` deep."""
    inner = depth - 1
    return (
        b'{"entry_specs":[["txt","text/plain","none"]],"user":' + b"[" * inner + b"]" * inner + b"}"
    )


@pytest.mark.parametrize("depth", [MAX_METADATA_DEPTH + 1, 990, 5_000, 1_000_000])
def test_deeply_nested_metadata_is_a_format_error_naming_the_file(depth, tmp_path):
    # Before: json.loads raised RecursionError from the footer decoder.
    plain = build_shard([("a", FINE)])
    data = with_metadata(plain, _nested(depth))
    error = raises_within_budget(lambda: ShardReader(data, name=NAME))
    assert NAME in str(error) and "nested more than 64 levels" in str(error)
    assert error.offset is not None
    with pytest.raises(FormatError, match="nested"):
        ShardReader(on_disk(tmp_path, data)).close()


def test_metadata_at_the_depth_limit_is_read():
    data = with_metadata(build_shard([("a", FINE)]), _nested(MAX_METADATA_DEPTH))
    r = ShardReader(data, name=NAME)
    assert r.metadata == {}  # "user" is a list here: not user metadata
    assert r.read(0)["txt"].data == b"fine"
    r.verify()


@pytest.mark.parametrize(
    "metadata",
    [
        b"[]",
        b'"text"',
        b"null",
        b"3",
        b'{"entry_specs": {"0": ["txt", "text/plain", "none"]}}',
        b'{"entry_specs": "abc"}',
        b'{"entry_specs": ["abc"]}',
        b'{"entry_specs": [[1, "text/plain", "none"]]}',
        b'{"entry_specs": [["txt", null, "none"]]}',
        b'{"entry_specs": [["txt", "text/plain"]]}',
        b'{"entry_specs": [["txt", "text/plain", "none", "x"]]}',
        b'{"entry_specs": [["txt", "text/plain", "none"]], "user": NaN}',
        b'{"entry_specs": [["txt", "text/plain", "none"]], "user": -Infinity}',
        b'{"entry_specs": [["txt", "text/plain", "none"]], "user": ' + b"9" * 5000 + b"}",
        '{"entry_specs": [["txt", "text/plain", "none"]]}'.encode("utf-16"),
        b'{"entry_specs": [["txt", "text/plain", "none"]], "user": "\xff"}',
        b'{"entry_specs": [["txt", "text/plain", "none"]]',
    ],
    ids=[
        "array",
        "string",
        "null",
        "number",
        "specs-object",
        "specs-string",
        "spec-string",
        "spec-number-name",
        "spec-null-type",
        "spec-short",
        "spec-long",
        "nan",
        "infinity",
        "huge-integer",
        "utf-16",
        "bad-utf8",
        "unterminated",
    ],
)
def test_any_other_metadata_surprise_is_a_format_error(metadata):
    data = with_metadata(build_shard([("a", FINE)]), metadata)
    with pytest.raises(FormatError) as info:
        ShardReader(data, name=NAME)
    assert NAME in str(info.value)


def test_the_writer_refuses_metadata_readers_would_refuse():
    # {"user": {"deep": nested}}: the footer adds one level, {"deep": ...} another.
    nested: Any = {}
    for _ in range(MAX_METADATA_DEPTH - 2):  # 63 levels: one too many
        nested = {"x": nested}
    data = write_shard([{"__key__": "a", "txt": "x"}], metadata={"deep": [1]})
    assert ShardReader(data).metadata == {"deep": [1]}
    # The user object sits one level below the footer's top-level object.
    with pytest.raises(ValueError, match="nests more than 63 levels"):
        ShardWriter(io.BytesIO(), metadata={"deep": nested})
    just_fits: Any = {}
    for _ in range(MAX_METADATA_DEPTH - 3):
        just_fits = {"x": just_fits}
    data = write_shard([{"__key__": "a", "txt": "x"}], metadata={"deep": just_fits})
    assert ShardReader(data).metadata == {"deep": just_fits}
    very_deep: Any = []
    for _ in range(100_000):  # json.dumps alone would raise RecursionError
        very_deep = [very_deep]
    with pytest.raises(ValueError, match="nests more than"):
        ShardWriter(io.BytesIO(), metadata={"deep": very_deep})
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValueError, match="contains itself"):
        ShardWriter(io.BytesIO(), metadata=cyclic)


# --- created_us --------------------------------------------------------------------------------

OUT_OF_RANGE = {
    "2^62": (2**62, CREATED_US_MAX, dt.datetime(9999, 12, 30, 23, 59, 59)),
    "-2^62": (-(2**62), CREATED_US_MIN, dt.datetime(1, 1, 2)),
    "int64-max": (2**63 - 1, CREATED_US_MAX, dt.datetime(9999, 12, 30, 23, 59, 59)),
    "int64-min": (-(2**63), CREATED_US_MIN, dt.datetime(1, 1, 2)),
    "just-above": (
        CREATED_US_MAX + 1,
        CREATED_US_MAX,
        dt.datetime(9999, 12, 30, 23, 59, 59),
    ),
    "just-below": (CREATED_US_MIN - 1, CREATED_US_MIN, dt.datetime(1, 1, 2)),
}


@pytest.mark.parametrize(
    ("stored", "clamped", "when"), OUT_OF_RANGE.values(), ids=list(OUT_OF_RANGE)
)
def test_created_us_out_of_the_calendar_is_clamped_not_an_error(stored, clamped, when, tmp_path):
    # Before: ShardInfo.created and catalog registration raised ValueError / OverflowError.
    data = build_shard([("a", FINE), ("b", FINE)], created_us=stored)
    assert int.from_bytes(data[16:24], "little", signed=True) == stored  # the file keeps it
    r = ShardReader(on_disk(tmp_path, data))
    assert r.header.created_us == clamped
    assert r.info.created == when.replace(tzinfo=dt.timezone.utc)
    assert r.header.created == r.info.created
    assert [rec.key for rec in r] == ["a", "b"]  # no data is lost
    assert r.verify().records == 2
    assert [rec.key for rec in iter_partial(data)] == ["a", "b"]


@pytest.mark.parametrize("us", [0, -1, 1, FIXED_CLOCK_NS // 1000, CREATED_US_MIN, CREATED_US_MAX])
def test_created_us_in_range_is_kept_exactly(us):
    r = ShardReader(build_shard([("a", FINE)], created_us=us))
    assert r.header.created_us == us
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    assert r.info.created == epoch + dt.timedelta(microseconds=us)
    # The same as shardcat always computed it (and `shardcat inspect` still does).
    assert r.info.created == dt.datetime.fromtimestamp(us / 1e6, tz=dt.timezone.utc)


def test_a_writer_with_a_wild_clock_writes_a_shard_every_reader_agrees_on():
    buf = io.BytesIO()
    with ShardWriter(buf, clock=lambda: 2**62 * 1000) as w:
        w.add("a", {"txt": "x"})
    data = buf.getvalue()
    assert int.from_bytes(data[16:24], "little") == 2**62
    read = ShardReader(data).info
    assert w.info.header == read.header
    assert (
        w.info.created
        == read.created
        == dt.datetime(9999, 12, 30, 23, 59, 59, tzinfo=dt.timezone.utc)
    )


# --- compressed entries: damaged frames ----------------------------------------------------------


def _frame_with_damaged_blocks(codec: Codec) -> bytes:
    content = bytes(range(256)) * 64
    if codec is Codec.ZSTD:
        frame = zstd_frame(content, len(content))
        header = 14  # magic, descriptor, window, 8-byte size
    else:
        frame = lz4_frame(content, len(content))
        header = 15  # magic, FLG, BD, 8-byte size, HC
    # The header stays valid (its size is declared); the blocks after it are noise.
    return frame[:header] + bytes(b ^ 0xA5 for b in frame[header:])


GARBAGE = {
    "zstd-damaged-blocks": (
        Codec.ZSTD,
        _frame_with_damaged_blocks(Codec.ZSTD),
        zstandard.ZstdError,
    ),
    "lz4-damaged-blocks": (Codec.LZ4, _frame_with_damaged_blocks(Codec.LZ4), RuntimeError),
    "zstd-not-a-frame": (Codec.ZSTD, b"this is not zstd at all", ValueError),
    "lz4-not-a-frame": (Codec.LZ4, b"this is not lz4 at all!", ValueError),
    "zstd-empty-payload": (Codec.ZSTD, b"", ValueError),
    "lz4-bad-header-checksum": (
        Codec.LZ4,
        lz4_frame(b"x" * 100, 100)[:14] + b"\x00" + lz4_frame(b"x" * 100, 100)[15:],
        RuntimeError,
    ),
    "zstd-cut-short": (Codec.ZSTD, zstd_frame(b"abc" * 5000, 15000)[:-5], zstandard.ZstdError),
    "lz4-cut-short": (Codec.LZ4, lz4_frame(os.urandom(5000), 5000)[:-9], None),
}


@pytest.mark.parametrize(("codec", "payload", "cause"), GARBAGE.values(), ids=list(GARBAGE))
def test_codec_errors_are_format_errors_naming_entry_file_and_offset(
    codec, payload, cause, tmp_path
):
    # Before: zstandard.ZstdError and lz4's RuntimeError escaped as they were.
    data = single_entry_shard(payload, codec)
    path = on_disk(tmp_path, data)
    offset = next(e.file_offset for e in parse_layout(data).records[1].entries if e.name == "bin")
    r = ShardReader(path)
    for read in (
        lambda: r.get("hostile")["bin"].data,
        lambda: r.read(1)["bin"].view,
        lambda: r.read(1, entries=["bin"])["bin"].data,
        lambda: r.take([1])[0]["bin"].decode(),
        lambda: [rec["bin"].data for rec in r if "bin" in rec],
        lambda: len(r.read_range(0, 3)[1]["bin"]),
    ):
        error = raises_within_budget(read)
        assert type(error) in (FormatError, DecompressionLimitError)
        assert "'bin'" in str(error) and path in str(error)
        assert error.path == path and error.offset == offset
        if cause is not None:
            assert isinstance(error.__cause__, cause)
    # The rest of the shard is still readable.
    assert r.read(0)["txt"].data == b"fine"
    assert r.get("hostile")["txt"].data == b"fine"
    assert r.read(2)["txt"].data == b"fine"


def test_a_frame_without_a_declared_size_is_refused(tmp_path):
    content = b"no size " * 1000
    for codec, frame in (
        (Codec.ZSTD, zstd_frame(content, None)),
        (Codec.LZ4, lz4_frame(content, None)),
        (Codec.ZSTD, zstd_rle_bomb(3 * GIB, None)),
    ):
        r = ShardReader(on_disk(tmp_path, single_entry_shard(frame, codec)))
        error = raises_within_budget(lambda r=r: r.get("hostile")["bin"].data)
        assert "does not declare its decompressed size" in str(error)
        with pytest.raises(FormatError, match="does not declare"):
            r.verify()


def test_an_empty_lz4_frame_without_a_size_is_read_as_empty():
    # LZ4 leaves the size out for empty input, even when asked to store it.
    empty = lz4.frame.compress(b"", store_size=True)
    assert decompress(empty, Codec.LZ4) == b""
    data = write_shard([{"__key__": "a", "nothing": Entry(b"", codec="lz4")}])
    r = ShardReader(data)
    assert r.read(0)["nothing"].data == b""
    r.verify()


@pytest.mark.parametrize("codec", [Codec.ZSTD, Codec.LZ4])
@pytest.mark.parametrize(
    "declared", [-1, +1, -4000, +(200 << 20)], ids=["-1", "+1", "-4000", "+200MiB"]
)
def test_a_frame_that_lies_about_its_size_fails_without_allocating_more(codec, declared):
    content = os.urandom(8 << 10)  # incompressible: the frame holds 8 KiB of real data
    make = zstd_frame if codec is Codec.ZSTD else lz4_frame
    frame = make(content, len(content) + declared)
    error = raises_within_budget(lambda: decompress(frame, codec, name="bin"))
    assert not isinstance(error, DecompressionLimitError)
    assert "'bin'" in str(error)


@pytest.mark.parametrize("codec", [Codec.ZSTD, Codec.LZ4])
def test_a_large_frame_that_declares_less_than_it_holds_stops_at_the_declared_size(codec):
    # A real 100 MiB frame that declares 40 MiB: never more than 40 MiB (+ a chunk) is produced.
    content = bytes(100 << 20)
    make = zstd_frame if codec is Codec.ZSTD else lz4_frame
    frame = make(content, 40 << 20)
    del content
    with peak_memory() as peak, pytest.raises(FormatError, match="more than the 41,943,040"):
        decompress(frame, codec, name="bin")
    assert peak[0] < 100 << 20


@pytest.mark.parametrize("codec", [Codec.ZSTD, Codec.LZ4])
def test_data_after_the_frame_is_refused(codec):
    make = zstd_frame if codec is Codec.ZSTD else lz4_frame
    frame = make(b"abc" * 1000, 3000)
    for extra in (b"junk", frame, bytes(8)):
        with pytest.raises(FormatError):
            decompress(frame + extra, codec, name="bin")
    assert decompress(frame, codec) == b"abc" * 1000


# --- compressed entries: size limits -------------------------------------------------------------


@pytest.mark.parametrize("codec", [Codec.ZSTD, Codec.LZ4])
def test_a_33_kb_shard_declaring_1_1_gb_is_refused_before_allocating(codec, tmp_path):
    # Before: the 33 KB shard made `shardcat get` allocate 1.1 GB (and then fail in the codec).
    make = zstd_frame if codec is Codec.ZSTD else lz4_frame
    data = single_entry_shard(make(os.urandom(32 << 10), 1_100_000_000), codec)
    assert len(data) < 34_000
    path = on_disk(tmp_path, data)
    with ShardReader(path) as r:
        error = raises_within_budget(lambda: r.get("hostile")["bin"].data, DecompressionLimitError)
        assert "1,100,000,000 bytes" in str(error)
        assert f"limit of {DEFAULT_MAX_DECOMPRESSED_BYTES:,} bytes" in str(error)
        assert MAX_DECOMPRESSED_ENV in str(error) and "'bin'" in str(error) and path in str(error)
        raises_within_budget(lambda: r.read(1, entries=["bin"])["bin"].decode())
        # Full verification reads frame headers (never the frames): it finds the entry too.
        raises_within_budget(r.verify, DecompressionLimitError)


def test_a_99_kb_zstd_bomb_of_3_gib_is_refused_before_allocating(tmp_path):
    # Before: a MemoryError (or 3 GiB of memory where there was room for it).
    bomb = zstd_rle_bomb(3 * GIB, 3 * GIB)
    data = single_entry_shard(bomb, Codec.ZSTD)
    assert len(data) < 100_000
    with ShardReader(on_disk(tmp_path, data)) as r:
        error = raises_within_budget(lambda: r.get("hostile")["bin"].data, DecompressionLimitError)
        assert "3,221,225,472 bytes" in str(error) and "=3GiB" in str(error)
        raises_within_budget(lambda: [rec.decode() for rec in r], DecompressionLimitError)


def test_a_bomb_that_declares_a_size_within_the_limit_costs_only_what_it_holds():
    # 512 MiB declared (under the 1 GiB limit), 8 KiB of real frame: decompressed in
    # chunks, since a one-shot buffer of the declared size would be allocated up front.
    frame = zstd_frame(os.urandom(8 << 10), 512 << 20)
    raises_within_budget(lambda: decompress(frame, Codec.ZSTD, name="bin"))
    frame = lz4_frame(os.urandom(8 << 10), 512 << 20)
    raises_within_budget(lambda: decompress(frame, Codec.LZ4, name="bin"))


def test_the_limit_is_set_by_an_environment_variable(monkeypatch):
    content = bytes(2 << 20)
    frame = zstandard.ZstdCompressor().compress(content)
    assert max_decompressed_bytes() == GIB
    monkeypatch.setenv(MAX_DECOMPRESSED_ENV, str(1 << 20))
    shardcat.config.refresh()  # the environment is read when asked to, not on every call
    assert max_decompressed_bytes() == 1 << 20
    with pytest.raises(DecompressionLimitError, match=f"limit of {1 << 20:,} bytes") as info:
        decompress(frame, Codec.ZSTD, name="bin", path="x.shard", offset=128)
    assert str(info.value).startswith("x.shard at offset 128: entry 'bin' declares 2,097,152")
    assert f"{MAX_DECOMPRESSED_ENV}=1GiB" in str(info.value)
    shardcat.config.set(max_decompressed_bytes="4MiB")
    assert max_decompressed_bytes() == 4 << 20
    assert decompress(frame, Codec.ZSTD) == content
    for bad in ("lots", "-5", "0", "1.5.2GB"):
        shardcat.config.set(max_decompressed_bytes=bad)
        with pytest.raises(ValueError, match=MAX_DECOMPRESSED_ENV):
            max_decompressed_bytes()


def test_large_honest_entries_round_trip_through_both_decompression_paths():
    rng = np.random.default_rng(3)
    # Above the 32 MiB one-shot size: ~4x compressible goes one-shot, zeros in chunks.
    runs = np.repeat(rng.integers(0, 256, size=(33 << 20) // 8, dtype=np.uint8), 8).tobytes()
    zeros = bytes(40 << 20)
    for content in (runs, zeros):
        for codec in (Codec.ZSTD, Codec.LZ4):
            make = zstd_frame if codec is Codec.ZSTD else lz4_frame
            assert decompress(make(content, len(content)), codec) == content


def test_the_writer_stores_entries_above_the_limit_uncompressed(monkeypatch):
    shardcat.config.set(max_decompressed_bytes="1MiB")
    big, small = bytes(2 << 20), bytes(512 << 10)
    data = write_shard(
        [
            {
                "__key__": "a",
                "big.bin": big,
                "forced": Entry(big, "application/x-zeros", "lz4"),
                "small.bin": small,
            }
        ],
        compression="zstd",
    )
    codecs = {e.name: e.codec for e in parse_layout(data).records[0].entries}
    assert codecs == {"big.bin": Codec.NONE, "forced": Codec.NONE, "small.bin": Codec.ZSTD}
    r = ShardReader(data)
    assert r.read(0)["big.bin"].data == big and r.read(0)["small.bin"].data == small
    r.verify()
    shardcat.config.set(max_decompressed_bytes=None)
    data = write_shard([{"__key__": "a", "big.bin": big}], compression="zstd")
    assert parse_layout(data).records[0].entries[0].codec == Codec.ZSTD


# --- hostile entry contents (decoded by content type) ----------------------------------------------


def test_deeply_nested_json_entry_is_a_value_error_not_a_recursion_error():
    deep = memoryview(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(FormatError, match="nested too deeply"):
        decode_value(deep, "application/json")
    with pytest.raises(ValueError, match="Expecting"):  # json.JSONDecodeError, as before
        decode_value(memoryview(b"{not json"), "application/json")


def _npy(header: str, data: bytes = b"") -> memoryview:
    raw = header.encode("latin-1")
    raw += b" " * (-(len(raw) + 11) % 64) + b"\n"
    return memoryview(b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + data)


@pytest.mark.parametrize(
    "npy",
    [
        _npy("(" * 5000 + ")" * 5000),
        _npy("{'descr': '<f4', 'fortran_order': False}"),
        _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,)}"),
        _npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}"),
        _npy("{'descr': '<f4', 'fortran_order': False, 'shape': 'abc'}"),
        _npy("{'descr': 'not a dtype', 'fortran_order': False, 'shape': (1,)}"),
        _npy("{'descr': '|V1000000000000', 'fortran_order': False, 'shape': ()}"),
        _npy("[" * 200 + "]" * 200),
        _npy("__import__('os')"),
        memoryview(b"\x93NUMPY\x01\x00\xff\xff{'descr'"),
    ],
    ids=[
        "nested-parens",
        "no-shape",
        "huge-shape",
        "negative-shape",
        "shape-string",
        "bad-descr",
        "huge-dtype",
        "nested-list",
        "code",
        "header-overruns",
    ],
)
def test_hostile_npy_headers_are_format_errors(npy):
    with peak_memory() as peak, pytest.raises(FormatError):
        decode_value(npy, "application/x-npy")
    assert peak[0] < MEMORY_BUDGET


# --- lengths that point past the end of the file ---------------------------------------------------


def _large_shard() -> bytes:
    """Larger than the 64 KiB tail read, so opening cannot see the file's size."""
    return write_shard([{"__key__": f"k{i:05d}-" + "k" * 300, "x": b"y"} for i in range(400)])


def test_a_footer_claiming_a_longer_data_region_is_caught_before_any_read(tmp_path):
    # Before: read() of the last record allocated the claimed 1.1 GB, and .info
    # reported (and a catalog would register) a 1.1 GB shard.
    data = with_longer_last_record(_large_shard(), 1_100_000_000)
    path = on_disk(tmp_path, data)
    # What streams or registers the shard checks the file's size first.
    for use in (lambda r: list(r), lambda r: r.info, lambda r: r.verify()):
        with ShardReader(path) as r:
            error = raises_within_budget(lambda r=r, use=use: use(r))
            assert "its trailer describes 1" in str(error) and path in str(error)
            assert "350312 bytes" in str(error).replace(",", "")
    # Ranged reads get only the bytes the file has: the record is cut short.
    with ShardReader(path) as r:
        for read in (lambda: r.read(399), lambda: r.read_range(398, 2), lambda: r.take([0, 399])):
            error = raises_within_budget(read, TruncatedError)
            assert "record 399 needs 1100000512 bytes" in str(error)
        assert r.read(0).key.startswith("k00000-")
        assert r.read(399, entries=["x"])["x"].data == b"y"  # only touches bytes the file has


def test_a_file_source_never_reads_past_the_end_of_the_file(tmp_path):
    from shardcat.format.sources import FileSource

    path = on_disk(tmp_path, b"0123456789" * 10)
    src = FileSource(path)
    with peak_memory() as peak:
        assert src.read(90, 90 + (1 << 40)) == b"0123456789"
        assert src.read(200, 200 + (1 << 40)) == b""
    assert peak[0] < MEMORY_BUDGET
    with open(path, "rb") as f:
        assert FileSource(f).read(95, 1 << 40) == b"56789"


def test_a_record_head_claiming_a_huge_length_is_bounded_when_streaming(tmp_path):
    data = bytearray(_large_shard())
    first = parse_layout(bytes(data)).records[0].offset
    data[first + 8 : first + 16] = (1 << 40).to_bytes(8, "little")  # record_length
    damaged = reseal(data, record_heads=True)
    path = on_disk(tmp_path, damaged)
    with ShardReader(path) as r:
        raises_within_budget(lambda: list(r))
        raises_within_budget(lambda: r.read(0))
    with peak_memory() as peak:
        assert list(iter_partial(path)) == []
    assert peak[0] < MEMORY_BUDGET


class _CountingSource(BytesSource):
    """A shard in memory that records the calls made to it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data, NAME)
        self.calls: list[tuple[Any, ...]] = []

    def size(self) -> int:
        self.calls.append(("size",))
        return super().size()

    def read_suffix(self, length: int) -> bytes:
        self.calls.append(("read_suffix", length))
        return super().read_suffix(length)


@pytest.mark.parametrize(("field", "at"), [("keys_length", 24), ("record_count", 8)])
def test_a_trailer_claiming_a_huge_footer_is_checked_before_the_second_read(field, at, tmp_path):
    # Before: the second suffix read asked for the claimed size, which returns the
    # whole file: harmless for this one, gigabytes for a large shard.
    data = bytearray(_large_shard())
    t = len(data) - TRAILER_SIZE
    data[t + at : t + at + 8] = (2**40).to_bytes(8, "little")
    damaged = reseal(data)
    src = _CountingSource(damaged)
    with pytest.raises(FormatError, match="trailer describes"):
        ShardReader(src)
    assert src.calls == [("read_suffix", TAIL_READ_SIZE), ("size",)]
    raises_within_budget(lambda: ShardReader(on_disk(tmp_path, damaged)))
