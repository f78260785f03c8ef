"""Reading records' keys from their shards: what a hash-only dataset compares.

A hash-only dataset (``keys="hash"``, :mod:`shardcat.catalog.hashkeys`) finds
rows by key hash; the key each row stands for is in its record's head, a
few hundred bytes at the row's offset. :func:`record_keys` reads them, one
ranged read per record (two for a key longer than :data:`KEY_PEEK` allows).
"""

from __future__ import annotations

from collections.abc import Sequence

from .._types import ByteRange, StorageOptions
from ..format.records import KEY_PEEK, head_end, head_key, key_span
from ..storage import SourceCache

__all__ = ["KeyReaderOf", "head_key_of", "head_request", "record_key", "record_keys"]


def _needed(head: memoryview | bytes, url: str, offset: int, checked: bool) -> int:
    """Bytes of the record to read for its key (``checked``: its whole head, for the CRC)."""
    if checked:
        return head_end(head, path=url, offset=offset)
    return key_span(head, path=url, offset=offset)[1]


def record_key(
    sources: SourceCache, url: str, offset: int, length: int, *, checked: bool = False
) -> str:
    """The key of the record at ``offset`` (``length`` bytes) of the native shard ``url``.

    ``checked``: the head's CRC is checked too (:func:`~shardcat.format.records.head_key`).

    Raises
    ------
    FormatError
        The bytes there are not a record head (ChecksumError: ``checked``, and changed).
    StorageError
        The shard cannot be read.
    """
    head = sources.read(url, offset, offset + min(length, KEY_PEEK))
    return head_key_of(sources, head, (url, offset, length), checked=checked)


def head_request(url: str, offset: int, length: int) -> tuple[str, ByteRange]:
    """The read of a record's head that most keys fit in (:data:`KEY_PEEK` bytes at most)."""
    return url, ByteRange(offset, offset + min(length, KEY_PEEK))


def head_key_of(
    sources: SourceCache,
    head: memoryview | bytes,
    place: tuple[str, int, int],
    *,
    checked: bool = False,
) -> str:
    """The key of the record at ``place`` (url, offset, length) whose :func:`head_request` read
    ``head``: a read of its own for a key longer than the head read showed."""
    url, offset, length = place
    end = _needed(head, url, offset, checked)
    if end > len(head):  # the head names the key's length: read up to its end at once
        head = sources.read(url, offset, offset + min(length, end))
    return head_key(head, path=url, offset=offset, checked=checked)


def record_keys(
    sources: SourceCache, places: Sequence[tuple[str, int, int]], *, checked: bool = False
) -> list[str]:
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
        return [record_key(sources, *places[0], checked=checked)]
    heads = sources.read_batch([head_request(*place) for place in places])
    return [
        head_key_of(sources, head, place, checked=checked) for place, head in zip(places, heads)
    ]


class KeyReaderOf:
    """A :data:`~shardcat.catalog.hashkeys.KeyReader` over shards read with ``storage_options``.

    Each call opens the shards it needs and closes them before it returns (a
    commit's candidates are few, and its thread is not a lookup's). Each head's
    CRC is checked: a key changed in the shard is an error, not a collision.
    """

    def __init__(self, storage_options: StorageOptions | None) -> None:
        self.storage_options = dict(storage_options or {})

    def __call__(self, places: Sequence[tuple[str, int, int]]) -> list[str]:
        sources = SourceCache(self.storage_options, 16)
        try:
            # The commit decides on these keys alone (no record decode follows): heads checked.
            return record_keys(sources, places, checked=True)
        finally:
            sources.close()
