"""Shared fixtures and helpers for the shard-format tests.

Besides a small reference dataset, this provides two tools that do not go
through the library's own reader (test modules import them from here):

* ``parse_layout``: an independent parser of the byte layout declared in
  ``shardcat.format.spec`` that checks every CRC, alignment and zero pad, so
  round-trip tests also prove the bytes follow the spec (not only that the
  reader undoes whatever the writer did);
* ``reseal``: recompute every CRC of a deliberately edited shard, to build
  files that are damaged or unusual *on purpose* but internally consistent.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import xxhash

from shardcat import config
from shardcat.format import Entry, ShardWriter, encode_value, recordcodec
from shardcat.format.checksums import crc32c
from shardcat.format.spec import (
    ENTRY_DESC_STRUCT,
    ENTRY_ROW_DTYPE,
    HEADER_MAGIC,
    HEADER_SIZE,
    HEADER_STRUCT,
    RECORD_HEAD_STRUCT,
    RECORD_ROW_DTYPE,
    RECORD_TAG,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    TRAILER_STRUCT,
    align_up,
)

FIXED_CLOCK_NS = 1_700_000_000_123_456_789
FIXED_FILE_ID = bytes(range(16))

# Offsets inside the 64-byte header and trailer (see spec.HEADER_DTYPE / TRAILER_DTYPE).
HEADER_CRC_AT = 60
TRAILER_DATA_CRC_AT = 36
TRAILER_FOOTER_CRC_AT = 40
TRAILER_HEADER_CRC_AT = 44
TRAILER_CRC_AT = 52


# --- both record codecs ------------------------------------------------------


@pytest.fixture(autouse=True, params=["compiled", "python"])
def record_codec(request: pytest.FixtureRequest) -> Any:
    """Every format test runs against the compiled codec and the pure-Python reference.

    The compiled one must have been built (``pip install -e .`` with a C
    compiler); where it cannot be, ``SHARDCAT_RECORD_CODEC=python`` skips it.
    """
    name = request.param
    if name not in recordcodec.available() and config.get("record_codec") == "python":
        pytest.skip("the compiled record codec is not built (SHARDCAT_RECORD_CODEC=python)")
    previous = recordcodec.use(name)
    yield name
    recordcodec.use(previous)


# --- the independent layout parser -----------------------------------------


@dataclass
class ParsedEntry:
    name: str
    content_type: str
    codec: int
    payload_offset: int  # relative to the record
    file_offset: int  # absolute
    stored: bytes


@dataclass
class ParsedRecord:
    offset: int
    length: int
    head_length: int
    key: str
    key_hash: int
    entries: list[ParsedEntry] = field(default_factory=list)


@dataclass
class ParsedShard:
    header: tuple[Any, ...]
    alignment: int
    records: list[ParsedRecord]
    footer_offset: int
    record_rows: np.ndarray
    entry_rows: np.ndarray
    keys_blob: bytes
    metadata: dict[str, Any]
    trailer: tuple[Any, ...]


def _u32(data: bytes, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "little")


def parse_layout(data: bytes) -> ParsedShard:
    """Parse a shard from the spec alone, asserting every documented invariant."""
    assert len(data) >= HEADER_SIZE + TRAILER_SIZE
    assert len(data) % 8 == 0, "footer is zero-padded to 8 and every other part is a multiple of 8"
    header = HEADER_STRUCT.unpack_from(data, 0)
    assert header[0] == HEADER_MAGIC
    assert (header[1], header[2]) == (1, 0)
    assert header[9] == b"\0" * 7, "reserved header bytes are zero when written"
    assert header[10] == crc32c(data[:HEADER_CRC_AT])
    alignment = header[7]

    trailer_at = len(data) - TRAILER_SIZE
    trailer = TRAILER_STRUCT.unpack_from(data, trailer_at)
    (footer_offset, n_records, n_entries, keys_len, meta_len, data_crc, footer_crc, header_crc) = (
        trailer[:8]
    )
    assert trailer[11] == TRAILER_MAGIC
    assert (trailer[8], trailer[9]) == (1, 0)
    assert trailer[10] == crc32c(data[trailer_at : trailer_at + TRAILER_CRC_AT])
    assert header_crc == header[10], "the trailer names its header through header_crc"
    assert data_crc == crc32c(data[HEADER_SIZE:footer_offset])
    assert footer_crc == crc32c(data[footer_offset:trailer_at])

    # Records, walked forward from the header. (Absolute alignment of record and
    # payload offsets is asserted by the tests, so that it fails on its own.)
    records: list[ParsedRecord] = []
    pos = HEADER_SIZE
    if pos < footer_offset and data[pos : pos + 4] != RECORD_TAG:
        # A layout that pads the header out to the alignment: the gap must be zero.
        pos = align_up(HEADER_SIZE, alignment)
        assert data[HEADER_SIZE:pos] == bytes(pos - HEADER_SIZE)
    while pos < footer_offset:
        tag, head_crc, length, khash, head_length, key_len, count = RECORD_HEAD_STRUCT.unpack_from(
            data, pos
        )
        assert tag == RECORD_TAG
        assert length % alignment == 0 and head_length % alignment == 0
        assert head_crc == crc32c(data[pos + 8 : pos + head_length])
        strings_at = pos + 32 + 32 * count
        key = data[strings_at : strings_at + key_len]
        assert khash == xxhash.xxh64_intdigest(key)
        cursor = strings_at + key_len
        rec = ParsedRecord(pos, length, head_length, key.decode("utf-8"), khash)
        expected_payload = head_length
        for j in range(count):
            p_off, size, crc, name_len, type_len, codec, reserved = ENTRY_DESC_STRUCT.unpack_from(
                data, pos + 32 + 32 * j
            )
            assert reserved == b"\0" * 7
            assert p_off == expected_payload, (
                "payloads follow each other, each on an aligned offset"
            )
            name = data[cursor : cursor + name_len].decode("utf-8")
            cursor += name_len
            ctype = data[cursor : cursor + type_len].decode("ascii")
            cursor += type_len
            stored = data[pos + p_off : pos + p_off + size]
            assert crc == crc32c(stored)
            pad_end = align_up(p_off + size, alignment)
            assert data[pos + p_off + size : pos + pad_end] == bytes(pad_end - p_off - size)
            rec.entries.append(ParsedEntry(name, ctype, codec, p_off, pos + p_off, stored))
            expected_payload = pad_end
        assert cursor <= pos + head_length
        assert data[cursor : pos + head_length] == bytes(pos + head_length - cursor), (
            "head pad is zero"
        )
        assert expected_payload == length
        records.append(rec)
        pos += length
    assert pos == footer_offset
    assert len(records) == n_records

    # Footer: record rows, entry rows, keys blob, metadata JSON, zero pad to 8.
    at = footer_offset
    record_rows = np.frombuffer(data, RECORD_ROW_DTYPE, count=n_records, offset=at)
    at += n_records * RECORD_ROW_DTYPE.itemsize
    entry_rows = np.frombuffer(data, ENTRY_ROW_DTYPE, count=n_entries, offset=at)
    at += n_entries * ENTRY_ROW_DTYPE.itemsize
    keys_blob = data[at : at + keys_len]
    at += keys_len
    metadata = json.loads(data[at : at + meta_len])
    at += meta_len
    assert data[at:trailer_at] == bytes(trailer_at - at)
    assert trailer_at - at < 8 and (trailer_at - footer_offset) % 8 == 0

    specs = metadata["entry_specs"]
    row = 0
    blob_at = 0
    for i, rec in enumerate(records):
        r = record_rows[i]
        assert (int(r["offset"]), int(r["length"]), int(r["key_hash"])) == (
            rec.offset,
            rec.length,
            rec.key_hash,
        )
        assert int(r["entry_count"]) == len(rec.entries)
        assert bytes(r["reserved"]) == b"\0" * 4
        key = keys_blob[blob_at : blob_at + int(r["key_length"])]
        blob_at += int(r["key_length"])
        assert key.decode("utf-8") == rec.key
        for e in rec.entries:
            er = entry_rows[row]
            row += 1
            assert (int(er["offset"]), int(er["size"]), int(er["crc"])) == (
                e.payload_offset,
                len(e.stored),
                crc32c(e.stored),
            )
            assert bytes(er["reserved"]) == b"\0" * 2
            name, ctype, codec_label = specs[int(er["spec"])]
            assert (name, ctype) == (e.name, e.content_type)
            assert codec_label == ("none", "zstd", "lz4")[e.codec]
    assert row == n_entries and blob_at == keys_len
    return ParsedShard(
        header,
        alignment,
        records,
        footer_offset,
        record_rows,
        entry_rows,
        keys_blob,
        metadata,
        trailer,
    )


# --- resealing edited shards ----------------------------------------------------


def reseal(data: bytes | bytearray, *, record_heads: bool = False) -> bytes:
    """Recompute the CRCs of an edited shard so that only the edit itself is "wrong".

    Header CRC, (optionally) every record head CRC, the data and footer CRCs,
    the trailer's copy of the header CRC and the trailer CRC. The footer offset
    is taken from the (possibly edited) trailer.
    """
    b = bytearray(data)
    b[HEADER_CRC_AT : HEADER_CRC_AT + 4] = crc32c(bytes(b[:HEADER_CRC_AT])).to_bytes(4, "little")
    t = len(b) - TRAILER_SIZE
    footer_offset = int.from_bytes(b[t : t + 8], "little")
    if record_heads:
        pos = HEADER_SIZE
        while pos < footer_offset:
            length = int.from_bytes(b[pos + 8 : pos + 16], "little")
            head_length = int.from_bytes(b[pos + 24 : pos + 28], "little")
            b[pos + 4 : pos + 8] = crc32c(bytes(b[pos + 8 : pos + head_length])).to_bytes(
                4, "little"
            )
            pos += length
    fields = {
        TRAILER_DATA_CRC_AT: crc32c(bytes(b[HEADER_SIZE:footer_offset])),
        TRAILER_FOOTER_CRC_AT: crc32c(bytes(b[footer_offset:t])),
        TRAILER_HEADER_CRC_AT: _u32(bytes(b), HEADER_CRC_AT),
    }
    for at, value in fields.items():
        b[t + at : t + at + 4] = value.to_bytes(4, "little")
    b[t + TRAILER_CRC_AT : t + TRAILER_CRC_AT + 4] = crc32c(
        bytes(b[t : t + TRAILER_CRC_AT])
    ).to_bytes(4, "little")
    return bytes(b)


# --- a small reference dataset -------------------------------------------------


def small_samples() -> list[dict[str, Any]]:
    """Five samples, two to four entries each, some compressible, some not."""
    rng = np.random.default_rng(7)
    return [
        {
            "__key__": "cat/0001",
            "txt": "a small cat " * 20,
            "json": {"label": 3, "tags": ["a", "b"]},
        },
        {
            "__key__": "cat/0002",
            "jpg": rng.bytes(150),
            "json": {"label": 4},
            "npy": np.arange(12, dtype="<f4"),
        },
        {"__key__": "dog/ünï/0003", "txt": "dog", "json": [1, 2, 3], "cls": "7"},
        {
            "__key__": "dog/\U0001f436/0004",
            "bin": Entry(bytes(200), "application/x-zeros", "zstd"),
            "json": {"deep": {"x": [None, True, 1.5]}},
            "raw": Entry(b"stored as is " * 8, "application/x-raw", "none"),
            "lz": Entry(b"lz4 lz4 lz4 " * 10, "application/x-lz", "lz4"),
        },
        {"__key__": "empty/0005", "json": {}, "nothing": b""},
    ]


def write_shard(samples: list[dict[str, Any]], **kwargs: Any) -> bytes:
    """Write ``samples`` to bytes with a fixed clock and file id (override through kwargs)."""
    kwargs.setdefault("clock", lambda: FIXED_CLOCK_NS)
    kwargs.setdefault("file_id", FIXED_FILE_ID)
    buf = io.BytesIO()
    with ShardWriter(buf, **kwargs) as w:
        for s in samples:
            w.write(s)
    return buf.getvalue()


def plain(record: Any) -> tuple[str, dict[str, tuple[str, bytes]]]:
    """A record as comparable plain data: key and {name: (content type, decoded bytes)}."""
    return record.key, {n: (e.content_type, e.data) for n, e in record.entries.items()}


@pytest.fixture(scope="session")
def samples() -> list[dict[str, Any]]:
    return small_samples()


@pytest.fixture(scope="session", params=[64, 8], ids=["align64", "align8"])
def small_shard(request: pytest.FixtureRequest) -> bytes:
    """The reference dataset as a ~2 KiB zstd shard, at alignment 64 and 8."""
    return write_shard(
        small_samples(), compression="zstd", alignment=request.param, metadata={"split": "train"}
    )


def expected_plain(sample: dict[str, Any]) -> tuple[str, dict[str, tuple[str, bytes]]]:
    """What reading ``sample`` back must give, computed without the reader."""
    entries = {}
    for name, value in sample.items():
        if not name.startswith("__"):
            e = encode_value(name, value)
            entries[name] = (e.content_type, bytes(e.view))
    return sample["__key__"], entries


@pytest.fixture(scope="session")
def expected_records(
    samples: list[dict[str, Any]],
) -> list[tuple[str, dict[str, tuple[str, bytes]]]]:
    return [expected_plain(s) for s in samples]
