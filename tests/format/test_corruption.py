"""Damaged, truncated, foreign and future shards: always a FormatError, never wrong data."""

from __future__ import annotations

import json
import struct
import warnings
import zlib
from typing import Any

import numpy as np
import pytest

from shardcat.errors import (
    ChecksumError,
    FormatError,
    NewerVersionWarning,
    TruncatedError,
    VersionError,
)
from shardcat.format import FORMAT_VERSION, ShardReader, ShardWriter, iter_partial
from shardcat.format.spec import HEADER_SIZE, TRAILER_SIZE

from .conftest import parse_layout, plain, reseal, small_samples, write_shard

NAME = "damaged/shard-00042.shard"


def outcome(data: bytes, name: str = NAME) -> BaseException | None:
    """Open and fully verify ``data``; the exception raised, or None if it passed."""
    with warnings.catch_warnings():
        # A flipped version byte can look like a newer minor version before its CRC fails.
        warnings.simplefilter("ignore", NewerVersionWarning)
        try:
            ShardReader(data, name=name).verify()
        except Exception as e:
            return e
    return None


def flipped(data: bytes, pos: int, mask: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= mask
    return bytes(b)


def region_of(data: bytes, pos: int) -> str:
    """Which part of the file a byte belongs to, for readable failure reports."""
    footer_offset = int.from_bytes(data[-TRAILER_SIZE : -TRAILER_SIZE + 8], "little")
    if pos < HEADER_SIZE:
        return "header"
    if pos < footer_offset:
        return "records"
    if pos < len(data) - TRAILER_SIZE:
        return "footer"
    return "trailer"


# --- bit flips ---------------------------------------------------------------------------


def test_the_reference_shard_is_small_and_valid(small_shard):
    assert 1024 < len(small_shard) < 4096
    parse_layout(small_shard)
    assert outcome(small_shard) is None


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF], ids=["xor01", "xor80", "xorFF"])
def test_every_byte_flip_is_detected_as_a_format_error(small_shard, mask):
    problems = []
    for pos in range(len(small_shard)):
        error = outcome(flipped(small_shard, pos, mask))
        where = f"byte {pos} ({region_of(small_shard, pos)}) ^ {mask:#04x}"
        if error is None:
            problems.append(f"{where}: not detected")
        elif not isinstance(error, FormatError):
            problems.append(f"{where}: leaked {type(error).__name__}: {error}")
        elif error.path != NAME or NAME not in str(error):
            problems.append(f"{where}: error does not name the file: {error}")
        elif error.offset is not None and not 0 <= error.offset < len(small_shard):
            problems.append(f"{where}: offset {error.offset} is outside the file: {error}")
    assert problems == []


def _access_everything(
    reader: ShardReader, keys: list[str], names: list[list[str]]
) -> list[tuple[str, Any]]:
    """Every way of reading records, each paired with its result or its exception."""
    results: list[tuple[str, Any]] = []

    def attempt(label: str, fn: Any) -> None:
        try:
            results.append((label, fn()))
        except Exception as e:
            results.append((label, e))

    attempt("iterate", lambda: [plain(r) for r in reader])
    attempt("take", lambda: [plain(r) for r in reader.take(list(range(len(keys))))])
    attempt("read_range", lambda: [plain(r) for r in reader.read_range(0, len(keys))])
    for i, key in enumerate(keys):
        attempt(f"read({i})", lambda i=i: plain(reader.read(i)))
        attempt(f"get({key!r})", lambda key=key: plain(reader.get(key)))
        for name in names[i]:
            attempt(
                f"read({i}, [{name!r}])",
                lambda i=i, name=name: plain(reader.read(i, entries=[name])),
            )
    return results


def test_damage_never_yields_wrong_data_on_any_read_path(small_shard, expected_records):
    keys = [k for k, _ in expected_records]
    names = [list(e) for _, e in expected_records]
    want: dict[str, Any] = {
        "iterate": expected_records,
        "take": expected_records,
        "read_range": expected_records,
    }
    for i, (key, entries) in enumerate(expected_records):
        want[f"read({i})"] = want[f"get({key!r})"] = (key, entries)
        for name in entries:
            want[f"read({i}, [{name!r}])"] = (key, {name: entries[name]})

    problems = []
    for pos in range(len(small_shard)):
        mask = (0x01, 0x80, 0xFF)[pos % 3]
        damaged = flipped(small_shard, pos, mask)
        where = f"byte {pos} ({region_of(small_shard, pos)}) ^ {mask:#04x}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NewerVersionWarning)  # a flipped minor version
                reader = ShardReader(damaged, name=NAME)
        except FormatError:
            continue
        except Exception as e:
            problems.append(f"{where}: open leaked {type(e).__name__}: {e}")
            continue
        for label, result in _access_everything(reader, keys, names):
            if isinstance(result, FormatError):
                continue
            if isinstance(result, Exception):
                problems.append(f"{where}: {label} leaked {type(result).__name__}: {result}")
            elif result != want[label]:
                problems.append(f"{where}: {label} returned wrong data")
        try:
            salvaged = [plain(r) for r in iter_partial(damaged, name=NAME)]
        except FormatError:
            salvaged = []
        except Exception as e:
            problems.append(f"{where}: iter_partial leaked {type(e).__name__}: {e}")
            continue
        if salvaged != expected_records[: len(salvaged)]:
            problems.append(f"{where}: iter_partial yielded damaged records")
    assert problems == []


def test_damaged_payload_is_reported_with_file_entry_and_offset(small_shard, expected_records):
    parsed = parse_layout(small_shard)
    record = parsed.records[1]
    entry = next(e for e in record.entries if e.name == "json")
    damaged = flipped(small_shard, entry.file_offset + 3, 0x20)

    r = ShardReader(damaged, name=NAME)  # the index is intact: opening works
    with pytest.raises(ChecksumError) as info:
        r.verify()
    assert info.value.path == NAME
    assert info.value.offset == entry.file_offset
    assert f"{NAME} at offset {entry.file_offset}" in str(info.value)
    assert "'json'" in str(info.value)
    for read in (lambda: r.read(1), lambda: r.get("cat/0002"), lambda: r.read(1, entries=["json"])):
        with pytest.raises(ChecksumError) as info:
            read()
        assert info.value.offset == entry.file_offset
    with pytest.raises(ChecksumError):
        list(r)
    # The other records and the other entries of this record are still readable.
    assert plain(r.read(0)) == expected_records[0]
    assert plain(r.read(2)) == expected_records[2]
    assert r.read(1, entries=["jpg"])["jpg"].data == expected_records[1][1]["jpg"][1]
    assert [plain(x) for x in iter_partial(damaged)] == expected_records[:1]


def test_damaged_header_and_trailer_name_their_offsets(small_shard):
    with pytest.raises(ChecksumError) as info:
        ShardReader(flipped(small_shard, 20, 0x01), name=NAME)
    assert (info.value.path, info.value.offset) == (NAME, 60)
    assert "header" in str(info.value)

    trailer_at = len(small_shard) - TRAILER_SIZE
    with pytest.raises(ChecksumError) as info:
        ShardReader(flipped(small_shard, trailer_at + 3, 0x01), name=NAME)
    assert (info.value.path, info.value.offset) == (NAME, trailer_at)
    assert "trailer" in str(info.value)

    footer_offset = parse_layout(small_shard).footer_offset
    with pytest.raises(ChecksumError) as info:
        ShardReader(flipped(small_shard, footer_offset + 5, 0x01), name=NAME)
    assert (info.value.path, info.value.offset) == (NAME, footer_offset)


def test_header_from_another_shard_is_rejected(samples):
    a = write_shard(samples, file_id=b"A" * 16)
    b = write_shard(samples, file_id=b"B" * 16)
    spliced = b[:HEADER_SIZE] + a[HEADER_SIZE:]
    with pytest.raises(FormatError, match="two shards"):
        ShardReader(spliced, name=NAME)


# --- truncation --------------------------------------------------------------------------


def _boundaries(data: bytes) -> dict[str, int]:
    parsed = parse_layout(data)
    rec = parsed.records[1]
    payload = max(rec.entries, key=lambda e: len(e.stored))
    footer_end = len(data) - TRAILER_SIZE
    return {
        "inside-magic": 5,
        "after-magic": 8,
        "inside-header": 40,
        "after-header": HEADER_SIZE,
        "mid-record-head": rec.offset + 16,
        "after-record-head": rec.offset + rec.head_length,
        "mid-payload": payload.file_offset + len(payload.stored) // 2,
        "between-records": rec.offset + rec.length,
        "footer-start": parsed.footer_offset,
        "mid-footer": (parsed.footer_offset + footer_end) // 2,
        "trailer-start": footer_end,
        "mid-trailer": footer_end + 32,
        "inside-trailer-magic": len(data) - 4,
        "one-byte-short": len(data) - 1,
    }


BOUNDARIES = list(_boundaries(write_shard(small_samples(), compression="zstd")))


def _complete_before(data: bytes, cut: int) -> int:
    return sum(1 for r in parse_layout(data).records if r.offset + r.length <= cut)


@pytest.mark.parametrize("where", BOUNDARIES)
def test_truncation_at_region_boundaries(small_shard, expected_records, where):
    cut = _boundaries(small_shard)[where]
    short = small_shard[:cut]
    with pytest.raises(FormatError) as info:
        ShardReader(short, name=NAME)
    assert info.value.path == NAME
    if cut >= len(b"\x89SCT\r\n\x1a\n"):
        assert isinstance(info.value, TruncatedError)
        assert "iter_partial" in str(info.value)  # tells the user how to salvage
    if cut < HEADER_SIZE:
        with pytest.raises(FormatError):
            list(iter_partial(short, name=NAME))
    else:
        complete = _complete_before(small_shard, cut)
        assert [plain(r) for r in iter_partial(short, name=NAME)] == expected_records[:complete]


def test_every_truncated_length_is_rejected_and_salvaged_exactly(small_shard, expected_records):
    problems = []
    ends = [r.offset + r.length for r in parse_layout(small_shard).records]
    for cut in range(len(small_shard)):
        short = small_shard[:cut]
        error = outcome(short)
        if not isinstance(error, FormatError):
            problems.append(f"cut at {cut}: open gave {error!r}")
        elif cut >= 8 and not isinstance(error, TruncatedError):
            problems.append(
                f"cut at {cut}: {type(error).__name__} instead of TruncatedError: {error}"
            )
        if cut < HEADER_SIZE:
            continue
        try:
            salvaged = [plain(r) for r in iter_partial(short)]
        except Exception as e:
            problems.append(f"cut at {cut}: iter_partial raised {type(e).__name__}: {e}")
            continue
        complete = sum(1 for end in ends if end <= cut)
        if salvaged != expected_records[:complete]:
            problems.append(
                f"cut at {cut}: iter_partial gave {len(salvaged)} records, expected {complete}"
            )
    assert problems == []


def test_iter_partial_salvages_an_aborted_write(samples, expected_records, tmp_path):
    path = tmp_path / "aborted.shard"
    with open(path, "wb") as f:
        w = ShardWriter(f, path=str(path))
        for s in samples[:3]:
            w.write(s)
        w.abort()
    with pytest.raises(TruncatedError) as info:
        ShardReader(path)
    assert str(path) in str(info.value)
    assert [plain(r) for r in iter_partial(path)] == expected_records[:3]
    assert [plain(r) for r in iter_partial(str(path))] == expected_records[:3]
    with open(path, "rb") as f:
        assert [plain(r) for r in iter_partial(f)] == expected_records[:3]


def test_iter_partial_of_a_complete_shard_yields_every_record(small_shard, expected_records):
    assert [plain(r) for r in iter_partial(small_shard)] == expected_records


# --- files that are not shards -------------------------------------------------------------


def _png() -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0\0"))
        + chunk(b"IEND", b"")
    )


def _npy() -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, np.arange(100))
    return buf.getvalue()


FOREIGN = {
    "empty": b"",
    "one-byte": b"x",
    "png": _png(),
    "text": b"hello, this is a text file\nwith some lines\n" * 10,
    "short-text": b"hi\n",
    "zip": b"PK\x03\x04" + bytes(200),
    "npy": _npy(),
    "zeros": bytes(4096),
    "json": json.dumps({"not": "a shard"}).encode(),
}


@pytest.mark.parametrize("content", list(FOREIGN.values()), ids=list(FOREIGN))
def test_files_that_are_not_shards_are_rejected_by_name(content, tmp_path):
    with pytest.raises(FormatError, match="not a shardcat shard") as info:
        ShardReader(content, name=NAME)
    assert not isinstance(info.value, (TruncatedError, ChecksumError, VersionError))
    assert info.value.path == NAME
    assert info.value.offset == 0

    path = tmp_path / "foreign.bin"
    path.write_bytes(content)
    with pytest.raises(FormatError, match="not a shardcat shard") as info:
        ShardReader(path)
    assert str(path) in str(info.value)
    # iter_partial calls an empty file "cut short"; anything else is "not a shard".
    with pytest.raises(FormatError, match="not a shardcat shard" if content else None):
        list(iter_partial(content, name=NAME))


@pytest.mark.parametrize(
    ("old", "new"), [(b"\r\n", b"\n"), (b"\n", b"\r\n")], ids=["crlf-to-lf", "lf-to-crlf"]
)
def test_text_mode_line_ending_damage_is_named(small_shard, old, new):
    mangled = small_shard.replace(old, new)
    assert mangled != small_shard
    with pytest.raises(FormatError, match="text-mode") as info:
        ShardReader(mangled, name=NAME)
    assert info.value.path == NAME
    assert "binary mode" in str(info.value)
    with pytest.raises(FormatError, match="text-mode"):
        list(iter_partial(mangled, name=NAME))


def test_seven_bit_transfer_damage_is_named(small_shard):
    stripped = bytes(b & 0x7F for b in small_shard)
    with pytest.raises(FormatError, match="high bit"):
        ShardReader(stripped, name=NAME)


# --- versions ----------------------------------------------------------------------------


def _with_version(
    data: bytes, major: int, minor: int, *, header: bool = True, trailer: bool = True
) -> bytes:
    b = bytearray(data)
    t = len(b) - TRAILER_SIZE
    if header:
        b[8:12] = struct.pack("<HH", major, minor)
    if trailer:
        b[t + 48 : t + 52] = struct.pack("<HH", major, minor)
    return reseal(b)


@pytest.mark.parametrize(
    ("where", "header", "trailer"),
    [("both", True, True), ("header-only", True, False), ("trailer-only", False, True)],
)
def test_newer_major_version_raises_version_error_naming_versions_and_file(
    small_shard, tmp_path, where, header, trailer
):
    future = _with_version(small_shard, FORMAT_VERSION[0] + 1, 3, header=header, trailer=trailer)
    path = tmp_path / "future.shard"
    path.write_bytes(future)
    for source, name in ((future, NAME), (path, str(path))):
        with pytest.raises(VersionError) as info:
            ShardReader(source, name=name if source is future else None).verify()
        message = str(info.value)
        assert f"{FORMAT_VERSION[0] + 1}.3" in message
        assert f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1]}" in message
        assert name in message
        assert "upgrade" in message
    if header:
        with pytest.raises(VersionError):
            list(iter_partial(future, name=NAME))


def test_older_major_version_raises_version_error(small_shard):
    with pytest.raises(VersionError, match="older") as info:
        ShardReader(_with_version(small_shard, 0, 9), name=NAME)
    assert "0.9" in str(info.value)
    assert NAME in str(info.value)


def test_newer_minor_version_is_read_with_one_warning(small_shard, expected_records):
    newer = _with_version(small_shard, FORMAT_VERSION[0], FORMAT_VERSION[1] + 7)
    with pytest.warns(NewerVersionWarning) as caught:
        r = ShardReader(newer, name=NAME)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert NAME in message
    assert f"{FORMAT_VERSION[0]}.{FORMAT_VERSION[1] + 7}" in message
    # Using the reader does not warn again (warnings are errors in this test suite).
    assert r.header.version == (FORMAT_VERSION[0], FORMAT_VERSION[1] + 7)
    assert [plain(x) for x in r] == expected_records
    assert plain(r.get("cat/0002")) == expected_records[1]
    r.verify()
    with pytest.warns(NewerVersionWarning):
        assert [plain(x) for x in iter_partial(newer, name=NAME)] == expected_records


def test_header_and_trailer_with_different_versions_are_rejected(small_shard):
    mixed = _with_version(
        small_shard, FORMAT_VERSION[0], FORMAT_VERSION[1] + 1, header=True, trailer=False
    )
    with pytest.raises(FormatError):
        ShardReader(mixed, name=NAME).verify()


# --- bytes readers must ignore --------------------------------------------------------------


def _assert_reads_like(data: bytes, expected_records: list[Any]) -> ShardReader:
    r = ShardReader(data, name=NAME)
    assert [plain(x) for x in r] == expected_records
    assert [plain(r.get(k)) for k, _ in expected_records] == expected_records
    assert [plain(x) for x in iter_partial(data)] == expected_records
    r.verify()
    return r


def test_unknown_header_flag_bits_are_ignored(small_shard, expected_records):
    b = bytearray(small_shard)
    b[12:16] = (0xFFFF_FFFF).to_bytes(4, "little")
    r = _assert_reads_like(reseal(b), expected_records)
    assert r.header.flags == 0xFFFF_FFFF


def test_non_zero_reserved_header_bytes_and_unknown_default_codec_are_ignored(
    small_shard, expected_records
):
    b = bytearray(small_shard)
    b[52] = 200  # default_codec: informational only
    b[53:60] = b"\xff\x01\x02\x03\x04\x05\x06"
    _assert_reads_like(reseal(b), expected_records)


def test_non_zero_reserved_bytes_in_footer_rows_are_ignored(small_shard, expected_records):
    parsed = parse_layout(small_shard)
    b = bytearray(small_shard)
    n = len(parsed.records)
    for i in range(n):
        at = parsed.footer_offset + 32 * i + 28
        b[at : at + 4] = b"\xde\xad\xbe\xef"
    for j in range(len(parsed.entry_rows)):
        at = parsed.footer_offset + 32 * n + 24 * j + 22
        b[at : at + 2] = b"\xbe\xef"
    _assert_reads_like(reseal(b), expected_records)


def test_non_zero_reserved_bytes_in_entry_descriptors_are_ignored(small_shard, expected_records):
    parsed = parse_layout(small_shard)
    b = bytearray(small_shard)
    for rec in parsed.records:
        for j in range(len(rec.entries)):
            at = rec.offset + 32 + 32 * j + 25
            b[at : at + 7] = b"\x01\x02\x03\x04\x05\x06\x07"
    _assert_reads_like(reseal(b, record_heads=True), expected_records)


# --- consistent CRCs, inconsistent content ------------------------------------------------------


def _replace_footer_part(
    data: bytes, *, keys_blob: bytes | None = None, metadata: bytes | None = None
) -> bytes:
    """Rebuild the footer with another keys blob or metadata, fixing lengths and CRCs."""
    parsed = parse_layout(data)
    t = len(data) - TRAILER_SIZE
    n_rec, n_ent = len(parsed.record_rows), len(parsed.entry_rows)
    keys = parsed.keys_blob if keys_blob is None else keys_blob
    meta = json.dumps(parsed.metadata).encode() if metadata is None else metadata
    body = parsed.record_rows.tobytes() + parsed.entry_rows.tobytes() + keys + meta
    body += bytes(-len(body) % 8)
    trailer = bytearray(data[t:])
    assert n_rec == int.from_bytes(trailer[8:16], "little") and n_ent == int.from_bytes(
        trailer[16:24], "little"
    )
    trailer[24:32] = len(keys).to_bytes(8, "little")
    trailer[32:36] = len(meta).to_bytes(4, "little")
    return reseal(data[: parsed.footer_offset] + body + bytes(trailer))


def _open_and_use(data: bytes) -> None:
    r = ShardReader(data, name=NAME)
    r.keys()
    r.info  # noqa: B018
    for i in range(len(r)):
        r.read(i)
        r.read(i, entries=[s.name for s in r.footer.specs])
    r.verify()


def test_rebuilt_footer_helper_round_trips(small_shard, expected_records):
    _assert_reads_like(_replace_footer_part(small_shard), expected_records)


@pytest.mark.parametrize(
    "metadata",
    [
        b"[1, 2]",
        b"not json",
        b'{"a": "\xff"}',
        b'{"entry_specs": 5}',
        b'{"entry_specs": [["only", "two"]]}',
        b'{"entry_specs": [[1, 2, 3, 4]]}',
        b"",
    ],
    ids=["list", "garbage", "bad-utf8", "specs-int", "spec-short", "spec-long", "empty"],
)
def test_invalid_footer_metadata_is_a_format_error(small_shard, metadata):
    with pytest.raises(FormatError):
        _open_and_use(_replace_footer_part(small_shard, metadata=metadata))


def test_index_keys_that_are_not_utf8_are_a_format_error(small_shard):
    parsed = parse_layout(small_shard)
    keys = bytearray(parsed.keys_blob)
    keys[0] = 0xFF  # same length, so rows and records still line up
    with pytest.raises(FormatError):
        _open_and_use(_replace_footer_part(small_shard, keys_blob=bytes(keys)))


def test_index_keys_that_disagree_with_the_records_are_a_format_error(small_shard):
    parsed = parse_layout(small_shard)
    keys = parsed.keys_blob.replace(b"cat/0001", b"cat/9999")
    damaged = _replace_footer_part(small_shard, keys_blob=keys)
    r = ShardReader(damaged, name=NAME)
    with pytest.raises(FormatError, match="index"):
        r.read(0)
    with pytest.raises(FormatError):
        r.verify()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("record_count", 2**46),
        ("entry_count", 2**46),
        ("keys_length", 2**60),
        ("footer_offset", 2**62),
        ("footer_offset", 8),
    ],
    ids=[
        "huge-record-count",
        "huge-entry-count",
        "huge-keys-length",
        "huge-footer-offset",
        "footer-in-header",
    ],
)
@pytest.mark.parametrize("large", [False, True], ids=["whole-file-in-tail", "larger-than-tail"])
def test_trailer_promising_impossible_sizes_is_a_format_error(field, value, large, tmp_path):
    # A trailer with a valid CRC but absurd sizes must not make the reader allocate them.
    if large:
        samples = [{"__key__": f"key-{i:05d}-" + "k" * 300, "x": b"y"} for i in range(300)]
    else:
        samples = small_samples()
    data = bytearray(write_shard(samples))
    t = len(data) - TRAILER_SIZE
    at = {"footer_offset": 0, "record_count": 8, "entry_count": 16, "keys_length": 24}[field]
    data[t + at : t + at + 8] = value.to_bytes(8, "little")
    path = tmp_path / "impossible.shard"
    path.write_bytes(reseal(data))
    with pytest.raises(FormatError), ShardReader(path) as r:
        r.verify()


def test_entry_rows_pointing_outside_their_record_are_a_format_error(tmp_path):
    samples = [{"__key__": f"key-{i:05d}-" + "k" * 300, "x": b"y"} for i in range(300)]
    data = write_shard(samples)
    parsed = parse_layout(data)
    b = bytearray(data)
    first_entry_row = parsed.footer_offset + 32 * len(parsed.records)
    b[first_entry_row + 8 : first_entry_row + 16] = (2**62).to_bytes(8, "little")  # size of entry 0
    path = tmp_path / "bad-entry-row.shard"
    path.write_bytes(reseal(b))
    # Caught when the footer is decoded, before any read trusts the row.
    with pytest.raises(FormatError, match="outside its record"):
        ShardReader(path)
