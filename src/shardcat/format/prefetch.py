"""Reading the next chunk of a stream while the current one is decoded.

A stream from an object store waits one round trip plus the transfer for
every chunk. Read in the decoding thread, that wait and the decoding add up;
:class:`ReadAhead` reads ``[start, end)`` in fixed chunks on a background
thread, up to ``depth`` chunks ahead, so fetching overlaps decoding (on S3
through s3fs the decoder spends most of a chunk's wall time waiting for it
otherwise: see ``benchmarks/README.md``).

Streaming uses it for sources that say their reads may come from another
thread (``RangeSource.read_ahead``, true for remote fsspec files). The
reads are the source's own ``read(start, end)``: one ranged request each,
no file object and no size request.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from .._types import RangeSource

__all__ = ["READ_AHEAD_CHUNK", "READ_AHEAD_DEPTH", "ReadAhead", "wants_read_ahead"]

READ_AHEAD_CHUNK = 8 * 1024 * 1024
"""Bytes per background read (one ranged request on an object store)."""
READ_AHEAD_DEPTH = 2
"""Chunks read ahead of the one being decoded (memory: up to ``depth + 1`` chunks)."""

_END = object()
_POLL = 0.05  # seconds between checks of the stop flag while the consumer is behind


def wants_read_ahead(source: object) -> bool:
    """Whether streams of ``source`` should read ahead on a thread (its ``read_ahead`` flag)."""
    return bool(getattr(source, "read_ahead", False))


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ReadAhead:
    """Bytes ``[start, end)`` of a source, read in chunks by a background thread.

    ``read()`` returns the next chunk (at most ``chunk`` bytes; ``b""`` at
    the end); the ``size`` argument of a file's ``read`` is ignored, as a
    caller that needs more keeps reading. A chunk shorter than asked means
    the file ended there: nothing is read after it. An error of a read is
    raised by the ``read()`` that reaches it, as the source raised it (the
    chunks before it are still delivered). :meth:`close` stops the thread
    and waits for it (at most the read in flight): no thread outlives the
    stream, whether it was read to its end, abandoned or failed.
    """

    def __init__(
        self,
        source: RangeSource,
        start: int,
        end: int,
        chunk: int = READ_AHEAD_CHUNK,
        depth: int = READ_AHEAD_DEPTH,
    ) -> None:
        self._source = source
        self._start = start
        self._end = end
        self._chunk = max(1, chunk)
        # The thread holds one chunk in flight besides the queued ones.
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth - 1))
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(
            target=self._run, name=f"shardcat-read-ahead {source.name}", daemon=True
        )
        self._thread.start()

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        pos, end, chunk = self._start, self._end, self._chunk
        try:
            while pos < end and not self._stop.is_set():
                want = min(chunk, end - pos)
                data = self._source.read(pos, pos + want)
                if data and not self._put(data):
                    return
                if len(data) < want:
                    break  # the file ends here
                pos += want
        except BaseException as e:  # handed to the consumer, raised there
            self._put(_Failed(e))
            return
        self._put(_END)

    def read(self, size: int = -1) -> bytes:
        """The next chunk, ``b""`` at the end; raises the error of a failed read."""
        if self._done:
            return b""
        item = self._queue.get()
        if item is _END:
            self._finish()
            return b""
        if isinstance(item, _Failed):
            self._finish()
            raise item.error
        return item  # type: ignore[no-any-return]

    def _finish(self) -> None:
        self._done = True
        self._thread.join()

    def close(self) -> None:
        """Stop reading ahead and wait for the thread (idempotent)."""
        self._done = True
        self._stop.set()
        # Free a put blocked on a full queue at once, rather than after its poll.
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def alive(self) -> bool:
        """Whether the background thread is still running (for tests)."""
        return self._thread.is_alive()
