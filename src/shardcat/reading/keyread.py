"""Reading records' keys from their shards: what a hash-only dataset compares.

A hash-only dataset (``keys="hash"``, :mod:`shardcat.catalog.hashkeys`) finds
rows by key hash; the key each row stands for is in its record's head, a
few hundred bytes at the row's offset. :func:`record_keys` reads them, one
ranged read per record (two for a key longer than :data:`KEY_PEEK` allows).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._types import ByteRange, StorageOptions
from ..format.records import KEY_PEEK, head_key, key_span
from ..storage import SourceCache

__all__ = ["KeyReaderOf", "record_key", "record_keys"]


def record_key(sources: SourceCache, url: str, offset: int, length: int) -> str:
    """The key of the record at ``offset`` (``length`` bytes) of the native shard ``url``.

    Raises
    ------
    FormatError
        The bytes there are not a record head.
    StorageError
        The shard cannot be read.
    """
    data = sources.read(url, offset, offset + min(length, KEY_PEEK))
    _, end = key_span(data, path=url, offset=offset)
    if end > len(data):
        data = sources.read(url, offset, offset + min(length, end))
    return head_key(data, path=url, offset=offset)


def record_keys(sources: SourceCache, places: Sequence[tuple[str, int, int]]) -> list[str]:
    """:func:`record_key` of each ``(url, offset, length)``, in order: the heads read as one batch.

    One :meth:`~shardcat.storage.SourceCache.read_batch` of every head (local: merged
    ``pread`` calls; remote: one ``cat_ranges``), then a read of its own for a key longer
    than the head read showed.

    Raises
    ------
    FormatError
        The bytes at a place are not a record head.
    StorageError
        A shard cannot be read.
    """
    if len(places) == 1:
        return [record_key(sources, *places[0])]
    heads = sources.read_batch(
        [(url, ByteRange(offset, offset + min(length, KEY_PEEK))) for url, offset, length in places]
    )
    keys = []
    for (url, offset, length), head in zip(places, heads):
        _, end = key_span(head, path=url, offset=offset)
        if end > len(head):
            keys.append(record_key(sources, url, offset, length))
        else:
            keys.append(head_key(head, path=url, offset=offset))
    return keys


class KeyReaderOf:
    """A :data:`~shardcat.catalog.hashkeys.KeyReader` over shards read with ``storage_options``.

    Each call opens the shards it needs and closes them before it returns (a
    commit's candidates are few, and its thread is not a lookup's).
    """

    def __init__(self, storage_options: StorageOptions | None) -> None:
        self.storage_options = dict(storage_options or {})

    def __call__(self, places: Sequence[tuple[str, int, int]]) -> list[str]:
        sources = SourceCache(self.storage_options, 16)
        try:
            return record_keys(sources, places)
        finally:
            sources.close()
