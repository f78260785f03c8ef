"""Streaming several shards in order, the next one opened while the current one is read.

Each shard of an object store costs, before its first record, its opening
(a tail read, the footer, a size check: three round trips) and the first
chunk of its stream. Streamed one after another, the decoder waits for all
of it at every shard boundary. :func:`iter_shards` opens the next
``ahead`` shards on a background thread and starts their streams
(read-ahead included), so the boundary costs nothing when the consumer is
slower than the store.

The streams share :class:`~shardcat.format.prefetch.ReadSlots`: ``2 * (ahead + 1)``
chunk reads in flight (or read and not yet handed over) across the current
shard and those opened ahead, the earliest first. The next shard's reads
start as soon as the current one has asked for its last chunk, so the same
number of connections stay busy across shard boundaries (at cloud latency,
throughput is connections busy x bandwidth each), rather than the next
shard's reads doubling them at its start and leaving them idle after.
Memory: those chunks (8-16 MiB each, :func:`.gap.stream_chunk`), plus the one
being decoded and the first decoded batch of each shard opened ahead: up to
``2 * (ahead + 1) + ahead + 1`` chunks, 96 MiB with ``ahead=1`` at 16 MiB.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from itertools import chain

from .._types import StorageOptions
from ..format.entries import Record
from ..format.prefetch import READ_AHEAD_DEPTH, ReadSlots
from .shards import ShardReader

__all__ = ["iter_shards"]

_Batches = Generator[Iterable[Record], None, None]


@dataclass(slots=True)
class _Opened:
    """A shard opened and its stream started: the reader, its batches and the first batch."""

    reader: ShardReader
    batches: _Batches
    first: Iterable[Record] | None

    def close(self) -> None:
        try:
            self.batches.close()  # stops the read-ahead and waits for its reads
        finally:
            self.reader.close()


def _open(
    url: str | os.PathLike[str],
    storage_options: StorageOptions | None,
    entries: frozenset[str] | None,
    slots: ReadSlots,
) -> _Opened:
    reader = ShardReader(url, storage_options=storage_options)
    batches = reader.record_batches(entries, read_slots=slots)
    try:
        # Runs the stream up to its first batch: the size check, the read-ahead
        # started, the first chunk read and the header checked.
        first = next(batches, None)
    except BaseException:
        batches.close()
        reader.close()
        raise
    return _Opened(reader, batches, first)


def iter_shards(
    urls: Iterable[str | os.PathLike[str]],
    storage_options: StorageOptions | None = None,
    entries: Iterable[str] | None = None,
    *,
    ahead: int = 1,
) -> Iterator[Record]:
    """Every record of ``urls``, shard after shard, each in file order.

    The same records as ``ShardReader(url).iter_records(entries)`` for each
    URL in turn, with the next ``ahead`` shards opened on a background
    thread meanwhile (``ahead=0``: one after another). Memory: the remote
    shards' streams share ``2 * (ahead + 1)`` chunk reads of 8-16 MiB (this
    module's docstring), up to ``3 * ahead + 3`` chunks in all. An error of a shard (not
    found, damaged, a failed read) is raised when the stream reaches that
    shard, after every record of the shards before it. Leaving the loop
    early (dropping the iterator) closes every shard opened ahead and waits
    for its reads.

    Raises
    ------
    ShardNotFoundError, StorageError, FormatError
        As :class:`~shardcat.ShardReader` and its stream raise them.
    """
    # Batches flattened at C speed, as ShardReader.iter_records does: no
    # Python frame resumed per record.
    return chain.from_iterable(_batches(list(urls), storage_options, entries, ahead))


def _batches(
    todo: Sequence[str | os.PathLike[str]],
    storage_options: StorageOptions | None,
    entries: Iterable[str] | None,
    ahead: int,
) -> Iterator[Iterable[Record]]:
    names = None if entries is None else frozenset(entries)
    if ahead <= 0 or len(todo) <= 1:
        for url in todo:
            with ShardReader(url, storage_options=storage_options) as reader:
                yield from reader.record_batches(names)
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shardcat-next-shard")
    pending: deque[Future[_Opened]] = deque()
    queued = iter(todo)
    slots = ReadSlots(READ_AHEAD_DEPTH * (ahead + 1))

    def submit() -> None:
        url = next(queued, None)
        if url is not None:
            pending.append(pool.submit(_open, url, storage_options, names, slots))

    current: _Opened | None = None
    try:
        # The first shard is opened here: nothing to overlap it with.
        current = _open(todo[0], storage_options, names, slots)
        next(queued)
        for _ in range(ahead):
            submit()
        while True:
            if current.first is not None:
                yield current.first
                yield from current.batches
            current.close()
            current = None
            if not pending:
                return
            current = pending.popleft().result()  # raises the shard's own error
            submit()
    finally:
        if current is not None:
            current.close()
        for future in pending:
            if not future.cancel():
                with suppress(BaseException):  # its error is not the caller's: it stopped first
                    future.result().close()
        pool.shutdown(wait=True)
