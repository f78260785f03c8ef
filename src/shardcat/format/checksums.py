"""CRC32C and key hashing: the two checksums of the format."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import crc32c as _crc32c
import numpy as np
import xxhash

__all__ = ["crc32c", "key_hash", "signed_key_hash", "signed_key_hashes"]


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``value``; hardware-accelerated."""
    return _crc32c.crc32c(data, value)


def key_hash(key: bytes) -> int:
    """xxHash64 (seed 0) of a key's UTF-8 bytes, as an unsigned 64-bit integer."""
    return xxhash.xxh64_intdigest(key)


def signed_key_hash(key: bytes) -> int:
    """The same hash as a two's-complement signed 64-bit integer (SQL BIGINT)."""
    h = xxhash.xxh64_intdigest(key)
    return h - (1 << 64) if h >= 1 << 63 else h


def signed_key_hashes(keys: Iterable[bytes]) -> list[int]:
    """:func:`signed_key_hash` of many keys (one reinterpretation of them all as int64)."""
    unsigned = np.fromiter(map(xxhash.xxh64_intdigest, keys), dtype=np.uint64)
    return cast("list[int]", unsigned.view(np.int64).tolist())
