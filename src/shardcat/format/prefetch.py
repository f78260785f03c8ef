"""Reading the next chunks of a stream while the current one is decoded.

A stream from an object store waits one round trip plus the transfer for
every chunk. Read in the decoding thread, that wait and the decoding add up;
:class:`ReadAhead` reads ``[start, end)`` in fixed chunks on background
threads, ``depth`` ranged reads in flight at once, and hands them over in
order, so fetching overlaps decoding and several requests overlap each other
(on S3 through s3fs one request at a time left the connection idle between
a response and the next request, and the decoder waiting on both: see
``benchmarks/README.md`` at a731c64).

Streaming uses it for sources that say their reads may come from another
thread (``RangeSource.read_ahead``, true for remote fsspec and obstore
files). The reads are the source's own ``read(start, end)``, or its
``read_buffer(start, end)`` where it has one (obstore: a view of the
response's buffer, no 8 MiB copy per chunk, ~5 % less CPU and ~10 % less
wall time per stream on the benchmarks' moto server): one ranged request
each, no file object and no size request. Three or four reads in flight
instead of two measured the same there (the server is the limit).
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

from .._types import RangeSource

__all__ = [
    "READ_AHEAD_CHUNK",
    "READ_AHEAD_DEPTH",
    "READ_AHEAD_FIRST",
    "ReadAhead",
    "ReadSlots",
    "stream_chunk",
    "wants_read_ahead",
]

READ_AHEAD_CHUNK = 8 * 1024 * 1024
"""Bytes per background read (one ranged request on an object store), once ramped up."""
READ_AHEAD_FIRST = 4 * 1024 * 1024
"""Bytes of the first read; each next one is twice as large, up to ``READ_AHEAD_CHUNK``.

The decoder waits for the whole first chunk before it starts: a smaller one
starts it sooner, but every extra request has a fixed cost (on the
benchmarks' in-process moto server 3-4 ms of CPU: starting at 1 MiB cost
about 10 % more CPU per stream than 8 MiB reads, ``benchmarks/README.md`` at a731c64),
so the first read is half a chunk: one request more per stream.
"""
READ_AHEAD_DEPTH = 2
"""Chunk reads in flight (or done and not yet handed over) at once.

Memory: up to ``depth + 1`` chunks (the one being decoded besides them),
24 MiB with the defaults (a stream of 8 MiB reads, one at a time, held as much).
Streams that share :class:`ReadSlots` hold up to ``slots`` chunks together instead.
"""


def wants_read_ahead(source: object) -> bool:
    """Whether streams of ``source`` should read ahead on a thread (its ``read_ahead`` flag)."""
    return bool(getattr(source, "read_ahead", False))


def stream_chunk(source: object, default: int = READ_AHEAD_CHUNK) -> int:
    """Bytes per read-ahead request for ``source``: its ``stream_chunk`` where it has one (a
    remote store's, sized from its latency and bandwidth), else ``default``."""
    chunk = getattr(source, "stream_chunk", None)
    return default if chunk is None else max(1, int(chunk))


class ReadSlots:
    """Chunk reads that several streams, read one after another, may have in flight together.

    :func:`~shardcat.storage.iter_shards` gives one to the current shard's stream
    and to those opened ahead: a free slot goes to the earliest stream that
    has a chunk left to ask for, so the next shard's reads start as soon as
    the current one has asked for its last chunk, and the streams together
    never have more than ``slots`` reads in flight or waiting to be handed
    over. The connections busy stay ``slots`` across shard boundaries
    instead of doubling at each, idle the rest of the time.
    """

    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)
        self.free = self.slots
        self.cond = threading.Condition(threading.Lock())
        """Guards ``free``, ``streams`` and the submitting state of every stream here."""
        self.streams: list[ReadAhead] = []
        """Streams with chunks left to ask for, in the order they joined."""

    def grant(self) -> None:
        """Hand the free slots out, earliest stream first (``cond`` held)."""
        for stream in list(self.streams):
            if self.free <= 0:
                break
            stream._fill()
        self.cond.notify_all()

    def give_back(self, n: int) -> None:
        with self.cond:
            self.free += n
            self.grant()


class ReadAhead:
    """Bytes ``[start, end)`` of a source, read in chunks by background threads.

    ``read()`` returns the next chunk in file order (at most ``chunk``
    bytes; ``b""`` at the end); the ``size`` argument of a file's ``read``
    is ignored, as a caller that needs more keeps reading. Up to ``depth``
    chunks are read at once, each by one ``source.read`` on a thread of its
    own. A chunk shorter than asked means the file ended there: it is the
    last one delivered, and nothing more is asked after it (reads already in
    flight are dropped). An error of a read is raised by the ``read()``
    that reaches it, as the source raised it (the chunks before it are still
    delivered; errors of reads past the end of the file are never seen).
    :meth:`close` cancels the reads not started and waits for those in
    flight (at most ``depth``): no thread outlives the stream, whether it was
    read to its end, abandoned or failed.
    """

    def __init__(
        self,
        source: RangeSource,
        start: int,
        end: int,
        chunk: int = READ_AHEAD_CHUNK,
        depth: int = READ_AHEAD_DEPTH,
        first: int = READ_AHEAD_FIRST,
        slots: ReadSlots | None = None,
    ) -> None:
        self._source = source
        # A source with ``read_buffer`` (obstore) hands over its own buffer: no copy.
        self._read = getattr(source, "read_buffer", None) or source.read
        self._end = end
        self._max = max(1, chunk)
        self._chunk = max(1, min(first, self._max))  # the size of the next read
        self._next = start  # where the next read to submit starts
        self._pending: deque[tuple[int, Future[bytes | memoryview]]] = deque()
        self._done = False
        self._slots = slots
        depth = max(1, depth if slots is None else slots.slots)
        self._pool = ThreadPoolExecutor(
            max_workers=depth, thread_name_prefix=f"shardcat-read-ahead {source.name}"
        )
        if slots is None:
            for _ in range(depth):
                self._submit()
        else:
            with slots.cond:
                slots.streams.append(self)
                slots.grant()

    def _fill(self) -> None:
        """Ask for chunks while the shared slots allow (their ``cond`` held); leave the
        slots' queue once every chunk was asked for."""
        slots = self._slots
        assert slots is not None
        while slots.free > 0 and not self._done and self._next < self._end:
            self._submit()
            slots.free -= 1
        if (self._done or self._next >= self._end) and self in slots.streams:
            slots.streams.remove(self)

    def _submit(self) -> None:
        if self._next >= self._end:
            return
        start = self._next
        stop = min(start + self._chunk, self._end)
        self._next = stop
        self._chunk = min(2 * self._chunk, self._max)
        self._pending.append((stop - start, self._pool.submit(self._read, start, stop)))

    def read(self, size: int = -1) -> bytes | memoryview:
        """The next chunk, ``b""`` at the end; raises the error of a failed read."""
        slots = self._slots
        if slots is not None:
            with slots.cond:
                # Shared slots: wait until one is ours (the streams before this one
                # have asked for all their chunks, and handed some over).
                while not self._pending and not self._done and self._next < self._end:
                    slots.grant()
                    if not self._pending:
                        slots.cond.wait()
        if self._done or not self._pending:
            self.close()
            return b""
        want, future = self._pending.popleft()
        try:
            data = future.result()
        except BaseException:
            if slots is not None:
                slots.give_back(1)
            self.close()
            raise
        if slots is not None:
            slots.give_back(1)  # handed over: the slot goes to the earliest stream
        if len(data) < want:
            self.close()  # the file ends here: drop the reads past it
            return data
        if slots is None:
            self._submit()  # keep ``depth`` reads going
        return data

    def close(self) -> None:
        """Stop reading ahead and wait for the reads in flight (idempotent)."""
        slots = self._slots
        if slots is None:
            self._done = True
            self._pending.clear()
            self._pool.shutdown(wait=True, cancel_futures=True)
            return
        with slots.cond:
            self._done = True
            if self in slots.streams:
                slots.streams.remove(self)
            held = len(self._pending)
            self._pending.clear()
        # The slots come back once the reads holding them have stopped.
        self._pool.shutdown(wait=True, cancel_futures=True)
        if held:
            slots.give_back(held)

    @property
    def alive(self) -> bool:
        """Whether a background thread is still running (for tests)."""
        return any(t.is_alive() for t in self._pool._threads)
