"""Hand-made hostile shards: every CRC valid, the content crafted to hurt a reader.

Built with the format's own encoders (``Header``, ``encode_record``,
``Footer.encode``), so a reader cannot reject them by a checksum and has to
survive what the bytes say. Catalog and CLI tests import these builders as
``format.hostile`` (``tests/`` is on ``sys.path``, as for every test package).

* ``build_shard``: records with arbitrary stored payloads and codecs;
* ``with_metadata``: the same shard with other metadata JSON bytes;
* ``zstd_frame``, ``lz4_frame``: real frames whose header declares any size;
* ``zstd_rle_bomb``: a zstd frame of RLE blocks, ~32768 bytes out per 4 in;
* ``with_longer_last_record``: a large shard whose footer claims a longer
  data region than the file has.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import lz4.frame
import numpy as np
import xxhash
import zstandard

from shardcat.format import Footer, Header
from shardcat.format.checksums import crc32c, key_hash
from shardcat.format.records import PreparedEntry, encode_record
from shardcat.format.spec import (
    ENTRY_ROW_DTYPE,
    HEADER_SIZE,
    RECORD_ROW_DTYPE,
    TRAILER_SIZE,
    TRAILER_STRUCT,
    Codec,
    align_up,
    data_start,
)

from .conftest import FIXED_CLOCK_NS, FIXED_FILE_ID, reseal

# (name, content type, codec, stored payload bytes)
EntryBytes = tuple[str, str, Codec, bytes]

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_BLOCK = 128 << 10


def build_shard(
    records: Sequence[tuple[str, Sequence[EntryBytes]]],
    *,
    created_us: int = FIXED_CLOCK_NS // 1000,
    alignment: int = 64,
    user: dict[str, object] | None = None,
) -> bytes:
    """A complete shard holding exactly these stored payloads, with every CRC right."""
    header = Header.new(
        created_us=created_us,
        alignment=alignment,
        default_codec=Codec.NONE,
        file_id=FIXED_FILE_ID,
    ).encode()
    out = bytearray(header + bytes(data_start(alignment) - HEADER_SIZE))
    rows: list[tuple[int, int, int, int, int]] = []
    entry_rows: list[tuple[int, int, int, int]] = []
    keys: list[bytes] = []
    specs: dict[tuple[str, str, str], int] = {}
    for key, entries in records:
        raw_key = key.encode("utf-8")
        h = key_hash(raw_key)
        prepared = [
            PreparedEntry(name.encode(), ctype.encode(), Codec(codec), payload, crc32c(payload))
            for name, ctype, codec, payload in entries
        ]
        rec = encode_record(raw_key, h, prepared, alignment)
        offset = len(out)
        for part in rec.parts:
            out += part
        rows.append((offset, rec.length, h, len(raw_key), len(prepared)))
        for off, (name, ctype, codec, payload) in zip(rec.offsets, entries):
            spec = specs.setdefault((name, ctype, Codec(codec).label), len(specs))
            entry_rows.append((off, len(payload), crc32c(payload), spec))
        keys.append(raw_key)
    record_arr = np.zeros(len(rows), dtype=RECORD_ROW_DTYPE)
    for field, col in zip(
        ("offset", "length", "key_hash", "key_length", "entry_count"), zip(*rows)
    ):
        record_arr[field] = col
    entry_arr = np.zeros(len(entry_rows), dtype=ENTRY_ROW_DTYPE)
    for field, col in zip(("offset", "size", "crc", "spec"), zip(*entry_rows)):
        entry_arr[field] = col
    metadata = {
        "writer": "a hostile test",
        "user": user or {},
        "entry_specs": [list(spec) for spec in specs],
    }
    tail = Footer.encode(
        record_arr,
        entry_arr,
        b"".join(keys),
        metadata,
        footer_offset=len(out),
        data_crc=crc32c(bytes(out[HEADER_SIZE:])),
        header_crc=int.from_bytes(header[60:64], "little"),
    )
    return bytes(out) + tail


def with_metadata(data: bytes, metadata: bytes) -> bytes:
    """``data`` with its footer's metadata JSON replaced by ``metadata`` (lengths and CRCs fixed)."""
    t = len(data) - TRAILER_SIZE
    fields = list(TRAILER_STRUCT.unpack_from(data, t))
    footer_offset, n_records, n_entries, keys_length = fields[:4]
    meta_at = footer_offset + 32 * n_records + 24 * n_entries + keys_length
    body = data[footer_offset:meta_at] + metadata
    body += bytes(align_up(len(body), 8) - len(body))
    fields[4] = len(metadata)
    return reseal(data[:footer_offset] + body + TRAILER_STRUCT.pack(*fields))


def single_entry_shard(
    payload: bytes, codec: Codec, *, content_type: str = "application/octet-stream"
) -> bytes:
    """Three records; the middle one holds the entry ``bin`` with these stored bytes."""
    fine: list[EntryBytes] = [("txt", "text/plain", Codec.NONE, b"fine")]
    return build_shard(
        [
            ("before", fine),
            ("hostile", [*fine, ("bin", content_type, codec, payload)]),
            ("after", fine),
        ]
    )


# --- compressed frames -------------------------------------------------------------


def zstd_frame(content: bytes, declared: int | None) -> bytes:
    """A real zstd frame of ``content`` whose header declares ``declared`` bytes (None: no size)."""
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(content)
    fhd = frame[4]
    assert fhd & 0b1110_0011 == 0, "no content size, not single-segment, no dictionary"
    if declared is None:
        return frame
    # Frame_Content_Size_flag 3: an 8-byte size after the window descriptor.
    return frame[:4] + bytes([fhd | 0xC0]) + frame[5:6] + struct.pack("<Q", declared) + frame[6:]


def zstd_rle_bomb(total: int, declared: int | None) -> bytes:
    """A valid zstd frame of ``total`` zero bytes in 128 KiB RLE blocks of 4 bytes each."""
    assert total % _ZSTD_BLOCK == 0
    window = bytes([(17 - 10) << 3])  # 2^17 = 128 KiB
    if declared is None:
        header = ZSTD_MAGIC + b"\x00" + window
    else:
        header = ZSTD_MAGIC + b"\xc0" + window + struct.pack("<Q", declared)
    block = ((1 << 1) | (_ZSTD_BLOCK << 3)).to_bytes(3, "little") + b"\x00"  # RLE of 0x00
    last = ((1 << 0) | (1 << 1) | (_ZSTD_BLOCK << 3)).to_bytes(3, "little") + b"\x00"
    return header + block * (total // _ZSTD_BLOCK - 1) + last


def lz4_frame(content: bytes, declared: int | None) -> bytes:
    """A real LZ4 frame of ``content`` whose header declares ``declared`` bytes (None: no size)."""
    frame = lz4.frame.compress(content, store_size=False)
    flg, bd = frame[4], frame[5]
    assert not flg & 0x09, "no content size, no dictionary"
    if declared is None:
        return frame
    descriptor = bytes([flg | 0x08, bd]) + struct.pack("<Q", declared)
    checksum = (xxhash.xxh32_intdigest(descriptor) >> 8) & 0xFF
    return frame[:4] + descriptor + bytes([checksum]) + frame[7:]


# --- lengths that point past the end of the file --------------------------------------


def with_longer_last_record(data: bytes, extra: int) -> bytes:
    """A shard whose footer says the last record (and the data region) is ``extra`` bytes longer.

    The footer stays self-consistent (rows tile the data region up to the new
    ``footer_offset``), so only the file size can tell. Use a shard larger than
    the reader's 64 KiB tail read, or opening sees the whole file at once.
    """
    t = len(data) - TRAILER_SIZE
    fields = list(TRAILER_STRUCT.unpack_from(data, t))
    footer_offset, n_records = fields[0], fields[1]
    b = bytearray(data)
    last_row = footer_offset + 32 * (n_records - 1)
    length = int.from_bytes(b[last_row + 8 : last_row + 16], "little")
    b[last_row + 8 : last_row + 16] = (length + extra).to_bytes(8, "little")
    fields[0] = footer_offset + extra
    fields[6] = crc32c(bytes(b[footer_offset:t]))  # footer_crc
    trailer = bytearray(TRAILER_STRUCT.pack(*fields))
    trailer[52:56] = crc32c(bytes(trailer[:52])).to_bytes(4, "little")
    b[t:] = trailer
    return bytes(b)
