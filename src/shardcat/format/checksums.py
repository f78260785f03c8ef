"""CRC32C and key hashing: the two checksums of the format."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import xxhash

__all__ = ["crc32c", "key_hash", "signed_key_hash", "signed_key_hashes"]


_crc32c: Callable[..., int] | None = None


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data``, continuing from ``value``; hardware-accelerated."""
    return (_crc32c or package_crc32c())(data, value)


def package_crc32c() -> Callable[..., int]:
    """The ``crc32c`` package's C function, imported on first use.

    Importing the package reads every installed distribution's metadata
    (``importlib.metadata.version``): about a tenth of a CLI call, which a
    lookup checked by the compiled codec never needs.
    """
    global _crc32c
    if _crc32c is None:
        from crc32c import crc32c as c_function

        _crc32c = c_function
    return _crc32c


def key_hash(key: bytes) -> int:
    """xxHash64 (seed 0) of a key's UTF-8 bytes, as an unsigned 64-bit integer."""
    return xxhash.xxh64_intdigest(key)


def signed_key_hash(key: bytes) -> int:
    """The same hash as a two's-complement signed 64-bit integer (SQL BIGINT)."""
    h = xxhash.xxh64_intdigest(key)
    return h - (1 << 64) if h >= 1 << 63 else h


def signed_key_hashes(keys: Iterable[bytes]) -> list[int]:
    """:func:`signed_key_hash` of many keys (one reinterpretation of them all as int64)."""
    import numpy as np

    unsigned = np.fromiter(map(xxhash.xxh64_intdigest, keys), dtype=np.uint64)
    return cast("list[int]", unsigned.view(np.int64).tolist())
