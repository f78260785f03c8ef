"""Decoding single tar header fields: numbers, names and pax records.

The scanner parses the few fields it needs inline (the hot path); these are
the general decoders behind it, and the vectorised checksum check that lets
it verify every header of a buffered chunk in one numpy pass.
"""

from __future__ import annotations

import numpy as np

from .spec import BLOCK, CHKSUM_AT, CHKSUM_LEN

__all__ = ["checksum_mismatches", "header_checksums", "parse_number", "parse_pax"]

_ARANGE = np.arange(BLOCK, dtype=np.intp)
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


def _stored_checksums(fields: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The octal checksum fields of many headers at once, and which ones need the slow parser.

    Handles the forms writers use (leading spaces, up to 8 octal digits,
    ended by NUL or space); anything else is flagged and parsed one by one.
    """
    n = len(fields)
    value = np.zeros(n, dtype=np.int64)
    started = np.zeros(n, dtype=bool)
    done = np.zeros(n, dtype=bool)
    odd = np.zeros(n, dtype=bool)
    for j in range(CHKSUM_LEN):
        c = fields[:, j].astype(np.int64)
        digit = (c >= 48) & (c <= 55)
        space = c == 32
        take = digit & ~done
        value = np.where(take, value * 8 + (c - 48), value)
        started |= take
        # Text after a space that ended the digits, or any byte tar never writes here.
        odd |= (done & digit) | (~done & ~digit & ~space & (c != 0))
        done |= (c == 0) | (space & started)
    return value, odd


def checksum_mismatches(buf: np.ndarray, positions: list[int]) -> list[int]:
    """Indexes into ``positions`` of the headers in ``buf`` whose checksum is wrong.

    ``buf`` is a uint8 view of the scanner's buffer, ``positions`` the
    header starts inside it. One gather and a few vector sums per chunk
    replace a 512-step Python loop per header.
    """
    if not positions:
        return []
    blocks = buf[np.asarray(positions, dtype=np.intp)[:, None] + _ARANGE]
    unsigned, signed = header_checksums(blocks)
    stored, odd = _stored_checksums(blocks[:, CHKSUM_AT : CHKSUM_AT + CHKSUM_LEN])
    bad = ((stored != unsigned) & (stored != signed)) | odd
    out: list[int] = []
    for i in np.flatnonzero(bad).tolist():
        field = blocks[i, CHKSUM_AT : CHKSUM_AT + CHKSUM_LEN].tobytes()
        try:
            value = parse_number(field)
        except ValueError:
            out.append(i)
            continue
        if value not in (int(unsigned[i]), int(signed[i])):
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
