"""Decoding single tar header fields: numbers, names and pax records.

The scanner parses the few fields it needs inline (the hot path); these are
the general decoders behind it, and the vectorised checksum check that lets
it verify every header of a buffered chunk in one numpy pass.
"""

from __future__ import annotations

import numpy as np

from .spec import BLOCK, CHKSUM_AT, CHKSUM_LEN

__all__ = [
    "byte_sums",
    "checksum_mismatches",
    "header_checksums",
    "parse_number",
    "parse_pax",
]

_CHKSUM_SPACES = CHKSUM_LEN * ord(" ")


def parse_number(field: bytes | bytearray) -> int:
    """A numeric header field, as tar writes it: octal text, or GNU base-256.

    Octal text ends at the first NUL and may be padded with spaces (as
    Python's ``tarfile`` and GNU tar read it). A first byte of 0x80 (or 0xff,
    negative) marks a big-endian binary number in the remaining bytes.

    Raises
    ------
    ValueError
        The field is neither.
    """
    first = field[0] if field else 0
    if first in (0x80, 0xFF):
        n = int.from_bytes(field[1:], "big")
        return n - (1 << (8 * (len(field) - 1))) if first == 0xFF else n
    text = bytes(field).split(b"\0", 1)[0].strip()
    if not text:
        return 0
    if not all(48 <= c <= 55 for c in text):
        raise ValueError(f"{bytes(field)!r} is not an octal number")
    return int(text, 8)


def header_checksums(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The unsigned and signed checksums of each 512-byte row of ``blocks`` (uint8).

    The checksum field itself counts as eight spaces. Some old tars (Sun,
    NeXT) summed signed chars; readers accept either, as ``tarfile`` does.
    """
    field = blocks[:, CHKSUM_AT : CHKSUM_AT + CHKSUM_LEN]
    unsigned = blocks.sum(axis=1, dtype=np.int64) - field.sum(axis=1, dtype=np.int64)
    signed_blocks = blocks.view(np.int8)
    signed_field = signed_blocks[:, CHKSUM_AT : CHKSUM_AT + CHKSUM_LEN]
    signed = signed_blocks.sum(axis=1, dtype=np.int64) - signed_field.sum(axis=1, dtype=np.int64)
    return unsigned + _CHKSUM_SPACES, signed + _CHKSUM_SPACES


_LANES = np.uint64(0x00FF_00FF_00FF_00FF)
_EIGHT, _SIXTEEN, _THIRTY_TWO = np.uint64(8), np.uint64(16), np.uint64(32)


def byte_sums(blocks: np.ndarray) -> np.ndarray:
    """Sum of each row's bytes, eight bytes at a time (rows of 512 bytes, C-contiguous).

    Adjacent bytes are added into 16-bit lanes of a 64-bit word (at most
    510 each, 32,640 after 64 words: no lane overflows), then the lanes are
    folded: a few passes over the data instead of a widening byte sum.
    """
    words = blocks.view("<u8")
    lanes = (words & _LANES) + ((words >> _EIGHT) & _LANES)
    total = lanes.sum(axis=1, dtype=np.uint64)
    total = (total & np.uint64(0xFFFF_FFFF)) + (total >> _THIRTY_TWO)
    total = (total & np.uint64(0xFFFF)) + (total >> _SIXTEEN)
    out: np.ndarray = total.astype(np.int64)
    return out


_POWERS = 8 ** np.arange(5, -1, -1, dtype=np.int64)


def checksum_mismatches(buf: np.ndarray, positions: list[int]) -> list[int]:
    """Indexes into ``positions`` of the headers in ``buf`` whose checksum is wrong.

    ``buf`` is a uint8 view of the scanner's buffer, ``positions`` the
    header starts inside it. One row gather and a few vector passes per
    chunk replace a 512-step Python loop per header. The stored checksum is
    read vectorised in the form common writers use (six octal digits, then
    NUL or space); other forms, and any mismatch, are re-checked one by one
    with the general parser and the signed-char sum.
    """
    if not positions:
        return []
    # Row i of this view is buf[i:i + 512]: gathering rows copies whole headers.
    rows = np.lib.stride_tricks.as_strided(
        buf, shape=(len(buf) - BLOCK + 1, BLOCK), strides=(1, 1), writeable=False
    )
    blocks = rows[np.asarray(positions, dtype=np.intp)]
    field = blocks[:, CHKSUM_AT : CHKSUM_AT + CHKSUM_LEN]
    computed = byte_sums(blocks) - field.sum(axis=1, dtype=np.int64) + _CHKSUM_SPACES
    digits = field[:, :6].astype(np.int64) - 48
    common = np.all((digits >= 0) & (digits <= 7), axis=1) & (
        (field[:, 6] == 0) | (field[:, 6] == 32)
    )
    stored = (digits * _POWERS).sum(axis=1)  # not `@`: a matmul wakes the BLAS threads
    out: list[int] = []
    for i in np.flatnonzero(~common | (stored != computed)).tolist():
        _, signed = header_checksums(blocks[i : i + 1])
        try:
            value = parse_number(field[i].tobytes())
        except ValueError:
            out.append(i)
            continue
        if value not in (int(computed[i]), int(signed[0])):
            out.append(i)
    return out


def parse_pax(data: bytes) -> dict[str, bytes]:
    """The records of a pax extended header: ``"%d %s=%s\\n"`` each, length first.

    Values stay bytes (``hdrcharset=BINARY`` makes them so); later records
    override earlier ones, as in POSIX.

    Raises
    ------
    ValueError
        A record's length field is not a number or runs past the data.
    """
    out: dict[str, bytes] = {}
    pos = 0
    end = len(data)
    while pos < end and data[pos] != 0:
        space = data.find(b" ", pos)
        if space < 0:
            raise ValueError(f"pax record at byte {pos} has no length")
        length = int(data[pos:space])
        stop = pos + length
        if length <= 0 or stop > end or data[stop - 1] != 0x0A:
            raise ValueError(f"pax record at byte {pos} declares {length} bytes")
        key, eq, value = data[space + 1 : stop - 1].partition(b"=")
        if not eq:
            raise ValueError(f"pax record at byte {pos} has no '='")
        out[key.decode("utf-8", "replace")] = value
        pos = stop
    return out
