"""Where each entry of a record lies: the ``records.spans`` column.

A record's entries are described once per distinct *layout* (names, content
types, codecs; see ``layouts``); what differs per record is where each
payload starts inside the record, how many bytes it stores and its CRC32C.
Those three numbers per entry are packed into one small binary value, in
layout order, little-endian, in one of three packings::

    narrow  (12 bytes per entry): offset u32 | size u32 | crc u32
    wide    (20 bytes per entry): offset u64 | size u64 | crc u32
    compact (6-24 bytes per entry): gap varint | size varint | crc u32

The catalog writes the compact packing (catalogs written before it hold the
fixed ones, which every reader still takes). An entry's offset is the
previous entry's end (0 for the first) plus ``gap``: a native record's
entries lie back to back after its head, so a gap is nearly always 0 and
costs one byte. A varint is LEB128 (7 bits a
byte, low first, the high bit set on every byte but the last), at most 10
bytes, never longer than needed; every entry must end below 2**64.

The value's length tells the packings apart, given the layout's entry count
``n``: ``12 n`` bytes is narrow, ``20 n`` wide, any other length compact. A
compact value whose entries happen to take exactly ``12 n`` or ``20 n`` bytes
(``n > 0``) gets one zero byte appended, so its length is neither. Entries
that do not lie in order (an offset before the previous entry's end) cannot
be packed compactly: a shard with any such record keeps the fixed packings.

This module is the reference; the compiled readers (``format/ccodec/spans.h``)
follow it and are fuzzed against :func:`unpack_spans`.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import numpy as np

    NARROW: np.dtype
    WIDE: np.dtype

__all__ = ["NARROW", "WIDE", "PackedSpans", "pack_record_spans", "pack_spans", "unpack_spans"]

# The two packings as numpy dtypes (NARROW, WIDE), built on first use: a
# lookup unpacks one value with struct and loads no numpy.
_FIELDS = {
    "NARROW": [("offset", "<u4"), ("size", "<u4"), ("crc", "<u4")],
    "WIDE": [("offset", "<u8"), ("size", "<u8"), ("crc", "<u4")],
}
_NARROW = struct.Struct("<III")
_WIDE = struct.Struct("<QQI")
assert _NARROW.size == 12 and _WIDE.size == 20


def __getattr__(name: str) -> Any:
    fields = _FIELDS.get(name)
    if fields is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import numpy as np

    dtype = np.dtype(fields)  # packed: no alignment padding
    assert dtype.itemsize == (_NARROW if name == "NARROW" else _WIDE).size
    globals()[name] = dtype  # the next access skips this function
    return dtype


@dataclass(frozen=True, slots=True)
class PackedSpans:
    """Every record's packed spans, back to back: record ``i`` is ``flat[starts[i]:starts[i + 1]]``."""

    flat: np.ndarray
    """uint8."""
    starts: np.ndarray
    """int64, one more than there are records."""

    def __len__(self) -> int:
        return len(self.starts) - 1

    def lengths(self) -> np.ndarray:
        import numpy as np

        return np.diff(self.starts)

    def tolist(self) -> list[bytes]:
        """One ``bytes`` per record."""
        import numpy as np

        n = len(self)
        if n == 0:
            return []
        lengths = self.lengths()
        width = int(lengths[0])
        if not np.any(lengths != width):
            if width == 0:
                return [b""] * n
            # Equal lengths: one fixed-size void per record, converted in C.
            return cast("list[bytes]", self.flat.view(np.dtype((np.void, width))).tolist())
        data = self.flat.tobytes()
        bounds = self.starts.tolist()
        return [data[a:b] for a, b in itertools.pairwise(bounds)]


def pack_spans(entries: np.ndarray, counts: np.ndarray) -> PackedSpans:
    """Pack the spans of every record: compact, or fixed where entries are out of order.

    Parameters
    ----------
    entries:
        Entry rows (``offset``, ``size``, ``crc`` fields), all records' entries
        concatenated in record order, as in a shard's footer.
    counts:
        Entries per record.
    """
    import numpy as np

    counts = np.asarray(counts, dtype=np.int64)
    first = np.zeros(len(counts) + 1, dtype=np.int64)  # each record's first entry
    np.cumsum(counts, out=first[1:])
    if len(entries) == 0:
        return PackedSpans(np.zeros(0, dtype=np.uint8), np.zeros(len(counts) + 1, dtype=np.int64))
    offsets = entries["offset"].astype(np.uint64)
    sizes = entries["size"].astype(np.uint64)
    ends = offsets + sizes
    # Each entry's previous end: the entry before it in its record, 0 for a record's first.
    before = np.empty_like(ends)
    before[0] = 0
    before[1:] = ends[:-1]
    before[first[:-1][counts > 0]] = 0
    # A wrapped end (offset + size past 2**64) or an entry before its predecessor's end
    # cannot be packed compactly.
    if np.all(offsets >= before) and np.all(ends >= offsets):
        return _pack_compact(offsets - before, sizes, entries["crc"], counts, first)
    return _pack_fixed(entries, first, ends)


def _pack_fixed(entries: np.ndarray, first: np.ndarray, ends: np.ndarray) -> PackedSpans:
    import numpy as np

    dtype = __getattr__("NARROW" if int(ends.max()) < 1 << 32 else "WIDE")
    packed = np.empty(len(entries), dtype=dtype)
    packed["offset"] = entries["offset"]
    packed["size"] = entries["size"]
    packed["crc"] = entries["crc"]
    # Entries are already in record order, so the packed rows are too.
    return PackedSpans(packed.view(np.uint8), first * dtype.itemsize)


def _varint_lengths(values: np.ndarray) -> np.ndarray:
    import numpy as np

    lengths = np.ones(len(values), dtype=np.int64)
    for k in range(1, 10):
        lengths += values >= np.uint64(1 << (7 * k))
    return lengths


def _pack_compact(
    gaps: np.ndarray, sizes: np.ndarray, crcs: np.ndarray, counts: np.ndarray, first: np.ndarray
) -> PackedSpans:
    import numpy as np

    gap_len, size_len = _varint_lengths(gaps), _varint_lengths(sizes)
    entry_len = gap_len + size_len + 4
    # Bytes before each entry within its record, and each record's bytes.
    upto = np.zeros(len(entry_len) + 1, dtype=np.int64)
    np.cumsum(entry_len, out=upto[1:])
    record_len = upto[first[1:]] - upto[first[:-1]]
    pad = (counts > 0) & ((record_len == 12 * counts) | (record_len == 20 * counts))
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(record_len + pad, out=starts[1:])
    record_of = np.repeat(np.arange(len(counts)), counts)
    at = starts[record_of] + upto[:-1] - upto[first[record_of]]
    flat = np.zeros(int(starts[-1]), dtype=np.uint8)  # a pad byte stays 0
    for values, lengths, base in ((gaps, gap_len, at), (sizes, size_len, at + gap_len)):
        for k in range(int(lengths.max())):
            more = lengths > k
            byte = (values[more] >> np.uint64(7 * k)) & np.uint64(0x7F)
            byte |= np.where(lengths[more] > k + 1, np.uint64(0x80), np.uint64(0))
            flat[base[more] + k] = byte
    crc_at = at + gap_len + size_len
    crcs = crcs.astype(np.uint32)
    for k in range(4):
        flat[crc_at + k] = (crcs >> np.uint32(8 * k)) & np.uint32(0xFF)
    return PackedSpans(flat, starts)


def pack_record_spans(spans: list[tuple[int, int, int]]) -> bytes:
    """One record's ``(offset, size, crc)`` per entry, packed as :func:`pack_spans` packs it.

    Raises
    ------
    ValueError
        If a number is negative or too large for its field.
    """
    out = bytearray()
    end = 0
    for offset, size, crc in spans:
        if offset < end or offset + size >= 1 << 64 or size < 0 or not 0 <= crc < 1 << 32:
            break
        out += _varint(offset - end) + _varint(size) + crc.to_bytes(4, "little")
        end = offset + size
    else:
        if spans and len(out) in (12 * len(spans), 20 * len(spans)):
            out.append(0)
        return bytes(out)
    ends = [offset + size for offset, size, _ in spans]
    packing = _NARROW if max(ends) < 1 << 32 else _WIDE
    try:
        return b"".join(packing.pack(*span) for span in spans)
    except struct.error as e:
        raise ValueError(f"spans {spans!r} cannot be packed: {e}") from None


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def unpack_spans(value: bytes, count: int) -> list[tuple[int, int, int]]:
    """``(offset, size, crc)`` of each of a record's ``count`` entries.

    Raises
    ------
    ValueError
        If the value is not the spans of ``count`` entries in any packing.
    """
    if len(value) == 12 * count:
        return list(_NARROW.iter_unpack(value))
    if len(value) == 20 * count:
        return list(_WIDE.iter_unpack(value))
    spans = _unpack_compact(value, count)
    if spans is None:
        raise ValueError(f"spans of {len(value)} bytes do not describe {count} entries")
    return spans


def _unpack_compact(value: bytes, count: int) -> list[tuple[int, int, int]] | None:
    """The compact packing's entries; None where the value is not ``count`` of them."""
    out: list[tuple[int, int, int]] = []
    at = end = 0
    for _ in range(count):
        gap, at = _read_varint(value, at)
        size, at = _read_varint(value, at)
        if at < 0 or at + 4 > len(value):
            return None
        crc = int.from_bytes(value[at : at + 4], "little")
        at += 4
        offset = end + gap
        end = offset + size
        if end >= 1 << 64:  # every end below 2**64
            return None
        out.append((offset, size, crc))
    padded = (
        count > 0 and at == len(value) - 1 and at in (12 * count, 20 * count) and value[at] == 0
    )
    return out if at == len(value) or padded else None


def _read_varint(value: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the position after it; position -1 if there is none.

    -1: the value ends first, the varint is longer than needed (a last byte of 0 after
    others) or it passes 64 bits.
    """
    result = 0
    for k in range(10):
        if at < 0 or at + k >= len(value):
            return 0, -1
        byte = value[at + k]
        if k == 9 and byte > 1:
            return 0, -1
        result |= (byte & 0x7F) << (7 * k)
        if not byte & 0x80:
            if k > 0 and byte == 0:
                return 0, -1
            return result, at + k + 1
    return 0, -1
