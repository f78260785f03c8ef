"""Where each entry of a record lies: the ``records.spans`` column.

A record's entries are described once per distinct *layout* (names, content
types, codecs; see ``layouts``); what differs per record is where each
payload starts inside the record, how many bytes it stores and its CRC32C.
Those three numbers per entry are packed into one small binary value, in
layout order, little-endian::

    narrow (12 bytes per entry): offset u32 | size u32 | crc u32
    wide   (20 bytes per entry): offset u64 | size u64 | crc u32

A value is narrow when every offset and end fits in 32 bits (records under
4 GiB: nearly always), so three entries cost 36 bytes. Its length tells the
two apart: the layout gives the entry count ``n`` and ``12 n != 20 n``.
"""

from __future__ import annotations

import struct

import numpy as np

__all__ = ["NARROW", "WIDE", "pack_spans", "unpack_spans"]

NARROW = np.dtype([("offset", "<u4"), ("size", "<u4"), ("crc", "<u4")])
WIDE = np.dtype([("offset", "<u8"), ("size", "<u8"), ("crc", "<u4")], align=False)
_NARROW = struct.Struct("<III")
_WIDE = struct.Struct("<QQI")
assert NARROW.itemsize == _NARROW.size == 12
assert WIDE.itemsize == _WIDE.size == 20


def pack_spans(entries: np.ndarray, counts: np.ndarray, starts: np.ndarray) -> list[bytes]:
    """One packed value per record.

    Parameters
    ----------
    entries:
        Entry rows (``offset``, ``size``, ``crc`` fields), all records' entries
        concatenated in record order, as in a shard's footer.
    counts:
        Entries per record.
    starts:
        First entry row of each record (``len(counts) + 1`` values).

    Returns
    -------
    list of bytes
        Record ``i``'s value, in record order.
    """
    n = len(counts)
    if n == 0:
        return []
    if len(entries) == 0:
        return [b""] * n
    ends = entries["offset"].astype(np.uint64) + entries["size"].astype(np.uint64)
    dtype = NARROW if int(ends.max()) < 1 << 32 else WIDE
    packed = np.empty(len(entries), dtype=dtype)
    packed["offset"] = entries["offset"]
    packed["size"] = entries["size"]
    packed["crc"] = entries["crc"]
    width = dtype.itemsize
    distinct = np.unique(counts)
    if len(distinct) == 1:
        k = int(distinct[0])
        if k == 0:
            return [b""] * n
        # All records have k entries: one fixed-size void per record, in C.
        return packed.view(np.dtype((np.void, k * width))).tolist()  # type: ignore[no-any-return]
    out: list[bytes] = [b""] * n
    for k in distinct.tolist():
        if k == 0:
            continue
        which = np.flatnonzero(counts == k)
        rows = starts[which][:, None] + np.arange(k)
        blobs = np.ascontiguousarray(packed[rows]).view(np.dtype((np.void, k * width))).ravel().tolist()
        for i, blob in zip(which.tolist(), blobs):
            out[i] = blob
    return out


def unpack_spans(value: bytes, count: int) -> list[tuple[int, int, int]]:
    """``(offset, size, crc)`` of each of a record's ``count`` entries.

    Raises
    ------
    ValueError
        If the value's length fits neither packing for ``count`` entries.
    """
    if len(value) == 12 * count:
        return list(_NARROW.iter_unpack(value))
    if len(value) == 20 * count:
        return list(_WIDE.iter_unpack(value))
    raise ValueError(f"spans of {len(value)} bytes do not describe {count} entries")
