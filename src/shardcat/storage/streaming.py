"""Streaming several shards in order, the next one opened while the current one is read.

Each shard of an object store costs, before its first record, its opening
(a tail read, the footer, a size check: three round trips) and the first
chunk of its stream. Streamed one after another, the decoder waits for all
of it at every shard boundary. :func:`iter_shards` opens the next
``ahead`` shards on a background thread and starts their streams
(read-ahead included), so the boundary costs nothing when the consumer is
slower than the store.
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
) -> _Opened:
    reader = ShardReader(url, storage_options=storage_options)
    batches = reader.record_batches(entries)
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
    thread meanwhile (``ahead=0``: one after another). Memory: a remote
    shard's stream holds up to three 8 MiB chunks (:mod:`.format.prefetch`),
    so up to ``3 * (ahead + 1)`` chunks in all. An error of a shard (not
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

    def submit() -> None:
        url = next(queued, None)
        if url is not None:
            pending.append(pool.submit(_open, url, storage_options, names))

    current: _Opened | None = None
    try:
        # The first shard is opened here: nothing to overlap it with.
        current = _open(todo[0], storage_options, names)
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
