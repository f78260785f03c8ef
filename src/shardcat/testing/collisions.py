"""Forced key-hash collisions: the test hook that proves hash-only datasets stay exact.

A 64-bit key hash collides about once among 5.85 billion keys, too rarely to
meet in a test. :func:`colliding_key_hashes` narrows the one definition of the
key hash (:mod:`shardcat.format.checksums`, xxHash64 of the key's UTF-8
bytes) to its low ``bits`` bits, everywhere shardcat's Python code computes
it: the writer (shard footers and record heads then carry the narrow hash),
registration (which takes the footer's), the lookups and the checks. With
``bits=3`` every eight keys share a hash on average.

It patches the module attributes that *are* the hash functions (found by
identity in every loaded ``shardcat`` module, so a new alias is covered too),
and restores them on exit. The compiled point lookup, which hashes keys
itself, is narrowed too (:func:`shardcat.reading.point.narrow_key_hashes`), so
its hash-only path meets the collisions; the tar scanner is not: tests under
the hook read native shards.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import xxhash

from ..format import checksums
from ..reading import point

__all__ = ["colliding_key_hashes"]


@contextmanager
def colliding_key_hashes(bits: int = 3) -> Iterator[int]:
    """Within the block, every key hash keeps only its low ``bits`` bits; yields the mask.

    Shards written inside the block carry the narrow hash and are read back
    inside it (``verify`` agrees: it hashes with the same function).
    """
    if not 1 <= bits <= 63:
        raise ValueError(f"bits must be within 1..63, not {bits}")
    mask = (1 << bits) - 1
    intdigest = xxhash.xxh64_intdigest
    digest = xxhash.xxh64_digest

    def narrow_intdigest(key: bytes) -> int:
        return intdigest(key) & mask

    def narrow_digest(key: bytes) -> bytes:
        return (intdigest(key) & mask).to_bytes(8, "big")

    def narrow_signed(key: bytes) -> int:
        return intdigest(key) & mask  # below 2**63: the signed value is the same

    def narrow_signed_many(keys: Iterable[bytes]) -> list[int]:
        return [int(h) for h in np.fromiter((intdigest(k) & mask for k in keys), np.int64)]

    replace: dict[int, Any] = {
        id(intdigest): narrow_intdigest,
        id(digest): narrow_digest,
        id(checksums.key_hash): narrow_intdigest,
        id(checksums.signed_key_hash): narrow_signed,
        id(checksums.signed_key_hashes): narrow_signed_many,
    }
    originals = {
        id(intdigest): intdigest,
        id(digest): digest,
        id(checksums.key_hash): checksums.key_hash,
        id(checksums.signed_key_hash): checksums.signed_key_hash,
        id(checksums.signed_key_hashes): checksums.signed_key_hashes,
    }
    for name in _HASHING:  # a module first imported inside the block would keep the real hash
        importlib.import_module(name)
    patched: list[tuple[Any, str, Any]] = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "shardcat" or name.startswith("shardcat.")):
            continue
        if name == __name__:
            continue
        for attr, value in list(vars(module).items()):
            new = replace.get(id(value))
            if new is not None and originals[id(value)] is value:
                patched.append((module, attr, value))
                setattr(module, attr, new)
    compiled = point.narrow_key_hashes(mask)
    try:
        yield mask
    finally:
        point.narrow_key_hashes(compiled)
        for module, attr, value in reversed(patched):
            setattr(module, attr, value)


_HASHING = tuple(
    f"shardcat.{name}"
    for name in (
        "catalog.kinds",
        "catalog.versions",
        "format.columnar",
        "format.folder",
        "format.footer",
        "format.header",
        "format.reader",
        "format.records",
        "format.scatter",
        "format.tar.convert",
        "format.tar.read",
        "format.tar.scan",
        "format.tar.taridx",
        "format.tar.walk",
        "format.verify",
        "format.writer",
        "orchestration.export_tars",
        "orchestration.index_files",
        "orchestration.taridx_io",
        "reading.folder",
        "reading.lookup",
        "reading.misses",
        "reading.pypoint",
    )
)
"""The modules that bind the key hash functions at import (``from ... import``): imported
before patching, since only loaded modules are patched, and one a lookup or write loads
lazily inside the block would hash keys as they are outside it."""
