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

import itertools
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import numpy as np

    NARROW: np.dtype
    WIDE: np.dtype

__all__ = ["NARROW", "WIDE", "PackedSpans", "pack_spans", "unpack_spans"]

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
    """Pack the spans of every record.

    Parameters
    ----------
    entries:
        Entry rows (``offset``, ``size``, ``crc`` fields), all records' entries
        concatenated in record order, as in a shard's footer.
    counts:
        Entries per record.
    """
    import numpy as np

    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    if len(entries) == 0:
        return PackedSpans(np.zeros(0, dtype=np.uint8), starts)
    ends = entries["offset"].astype(np.uint64) + entries["size"].astype(np.uint64)
    dtype = __getattr__("NARROW" if int(ends.max()) < 1 << 32 else "WIDE")
    packed = np.empty(len(entries), dtype=dtype)
    packed["offset"] = entries["offset"]
    packed["size"] = entries["size"]
    packed["crc"] = entries["crc"]
    # Entries are already in record order, so the packed rows are too.
    return PackedSpans(packed.view(np.uint8), starts * dtype.itemsize)


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
