"""The two byte layouts of tar shards, declared once: the tar header and TARIDX.

A tar archive (POSIX.1-1988 ustar, with the GNU and pax extensions) is a
sequence of 512-byte blocks. Every member is one header block followed by its
payload, padded with NULs to a whole block; two NUL blocks end the archive::

    ┌────────┬──────────┬─────┬────────┬────────┬───────────┬─────┬───────┬───────┐
    │ header │ payload  │ pad │ header │ header │ payload   │ pad │ 0 × 512 0 × 512│
    │ 512 B  │ size B   │ →512│ 'x'/'L'│ '0'    │           │     │ end of archive │
    └────────┴──────────┴─────┴────────┴────────┴───────────┴─────┴───────┴───────┘
             ▲ payload = header + 512   ▲ extension headers (pax 'x', GNU 'L'/'K') and
                                          their own payload blocks precede the header
                                          they describe

A ``.taridx`` file (the TARIDX format of iTar, version 1.0) indexes the
members of one or more tars::

    offset 0        64               off_crash           off_arr                 EOF
    ┌───────────────┬────────────────┬───────────────────┬───────────────────────┐
    │ header 64 B   │ extensions     │ crash stems       │ rows, 32 B each       │
    │ TARIDX\\0\\0 …  │ "jpg\\njson"    │ "stem_a\\nstem_b"  │ fid offset size extid │
    │               │ (ids 0..n-1)   │ (ids 1..n)        │ crashid keyhash       │
    └───────────────┴────────────────┴───────────────────┴───────────────────────┘

Every integer in both formats is little-endian where it is binary; tar
header numbers are ASCII octal (or GNU base-256 when the top bit is set).
"""

from __future__ import annotations

import numpy as np

from ..spec import struct_of

__all__ = [
    "BLOCK",
    "CHKSUM_AT",
    "CHKSUM_LEN",
    "GNU_LONGLINK",
    "GNU_LONGNAME",
    "NO_DATA_TYPES",
    "PAX_GLOBAL",
    "PAX_LOCAL",
    "REGULAR_TYPES",
    "SIZE_AT",
    "SIZE_LEN",
    "TARIDX_FLAG_CONTIGUOUS",
    "TARIDX_HEADER_DTYPE",
    "TARIDX_HEADER_SIZE",
    "TARIDX_HEADER_STRUCT",
    "TARIDX_MAGIC",
    "TARIDX_MAX_EXTID",
    "TARIDX_MAX_FID",
    "TARIDX_ROW_DTYPE",
    "TARIDX_ROW_SIZE",
    "TARIDX_VERSION",
    "USTAR_HEADER_DTYPE",
    "USTAR_HEADER_STRUCT",
    "blocks",
]

# --- tar ---------------------------------------------------------------------

BLOCK = 512
"""Every tar header and every padded payload is a whole number of these."""

USTAR_HEADER_DTYPE = np.dtype(
    [
        ("name", "S100"),  # 0    member path (NUL-terminated unless 100 bytes long)
        ("mode", "S8"),  # 100  octal
        ("uid", "S8"),  # 108
        ("gid", "S8"),  # 116
        ("size", "S12"),  # 124  payload bytes: octal, or base-256 if byte 124 has its top bit set
        ("mtime", "S12"),  # 136
        ("chksum", "S8"),  # 148  sum of the header's bytes, this field counted as 8 spaces
        ("typeflag", "S1"),  # 156  see the *_TYPES below
        ("linkname", "S100"),  # 157
        ("magic", "S6"),  # 257  b"ustar\0" (POSIX) or b"ustar " (old GNU)
        ("version", "S2"),  # 263  b"00" (POSIX) or b" \0" (old GNU)
        ("uname", "S32"),  # 265
        ("gname", "S32"),  # 297
        ("devmajor", "S8"),  # 329
        ("devminor", "S8"),  # 337
        ("prefix", "S155"),  # 345  POSIX: directory part of a path longer than 100 bytes
        ("pad", "V12"),  # 500
    ]
)
assert USTAR_HEADER_DTYPE.itemsize == BLOCK
USTAR_HEADER_STRUCT = struct_of(USTAR_HEADER_DTYPE)

CHKSUM_AT = 148
CHKSUM_LEN = 8
SIZE_AT = 124
SIZE_LEN = 12

REGULAR_TYPES = frozenset((b"0", b"\0", b"7"))
"""Regular files (``'7'`` is a contiguous file): the members that become entries."""
GNU_LONGNAME = b"L"
GNU_LONGLINK = b"K"
PAX_LOCAL = b"x"
PAX_GLOBAL = b"g"
NO_DATA_TYPES = frozenset((b"1", b"2", b"3", b"4", b"5", b"6"))
"""Links, devices, directories and FIFOs: their size field is ignored, no payload follows.

Any other type (``'S'`` sparse, ``'D'``, vendor types) is skipped with
``size`` bytes of payload, as Python's ``tarfile`` and GNU tar do.
"""


def blocks(size: int) -> int:
    """Bytes that ``size`` bytes of payload take in the archive (rounded up to a block)."""
    return (size + BLOCK - 1) & ~(BLOCK - 1)


# --- TARIDX ------------------------------------------------------------------

TARIDX_MAGIC = b"TARIDX"
"""Stored NUL-padded in an 8-byte field."""
TARIDX_VERSION = (1, 0)
"""(major, minor) written; readers accept any minor of major 1."""
TARIDX_HEADER_SIZE = 64
TARIDX_ROW_SIZE = 32
TARIDX_FLAG_CONTIGUOUS = 0x01
"""Header flag bit 0: rows are grouped contiguously by ``(keyhash, crashid)``."""

TARIDX_HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),  # 0   TARIDX + two NULs
        ("major", "<u2"),  # 8
        ("minor", "<u2"),  # 10
        ("rec_size", "<u2"),  # 12  TARIDX_ROW_SIZE
        ("hdr_size", "<u2"),  # 14  TARIDX_HEADER_SIZE
        ("n_stems", "<u8"),  # 16  distinct stems (= distinct (keyhash, crashid) pairs)
        ("n_rows", "<u8"),  # 24
        ("n_ext", "<u4"),  # 32  extensions in the extension block
        ("n_crash", "<u4"),  # 36  stems in the crash block
        ("off_crash", "<u8"),  # 40  = 64 + extension block bytes
        ("off_arr", "<u8"),  # 48  = off_crash + crash block bytes
        ("flags", "u1"),  # 56  TARIDX_FLAG_CONTIGUOUS; other bits reserved
        ("reserved", "V7"),  # 57  zero when written, ignored when read
    ]
)
assert TARIDX_HEADER_DTYPE.itemsize == TARIDX_HEADER_SIZE
TARIDX_HEADER_STRUCT = struct_of(TARIDX_HEADER_DTYPE)

TARIDX_ROW_DTYPE = np.dtype(
    [
        ("fid", "<u2"),  # 0   position of the tar in the indexed list
        ("offset", "<u8"),  # 2   the member's (last) 512-byte header; payload at offset + 512
        ("size", "<u8"),  # 10  payload bytes
        ("extid", "<u2"),  # 18  index into the extension block
        ("crashid", "<u4"),  # 20  0: canonical stem of its hash; k >= 1: crash stem k
        ("keyhash", "<u8"),  # 24  xxh64 (seed 0) of the stem's UTF-8 bytes
    ]
)
assert TARIDX_ROW_DTYPE.itemsize == TARIDX_ROW_SIZE

TARIDX_MAX_FID = 0xFFFF
TARIDX_MAX_EXTID = 0xFFFF
