"""Reading a tar stream in large chunks, optionally one step ahead in a thread.

The walker (:class:`~.walk.TarWalker`) asks for the stream's next chunk and
gets a buffer of ``headroom + chunk_size`` bytes holding it from
``headroom`` on: the headroom takes the few bytes of the previous chunk the
walker still needs (less than one header), so a chunk is never copied once
it has been read. Buffers come from a small pool and are reused.

:class:`ChunkReader` reads the first chunk when asked and, if the stream
goes on, the next ``readahead`` chunks ahead in a thread (``readinto``
releases the GIL, and so does the compiled walker's loop), so on two cores
the read of the next chunk runs while the current one is walked. An error raised by the stream in the
thread is raised again, the same exception, by :meth:`~ChunkReader.next` in
the walker's thread, where the synchronous reader would have raised it:
after the chunks read before it. :meth:`~ChunkReader.close` stops and joins
the thread; it is safe to call twice.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from typing import Any

import numpy as np

__all__ = ["THREAD_NAME", "ChunkReader", "Slot", "is_local_file", "open_reader"]

THREAD_NAME = "shardcat-tar-reader"
"""The name of every read-ahead thread (tests check none is left behind)."""


class Slot:
    """One reusable buffer: the bytearray, a memoryview of it, a uint8 array over it."""

    __slots__ = ("array", "buf", "view")

    def __init__(self, size: int) -> None:
        self.buf = bytearray(size)
        self.view = memoryview(self.buf)
        self.array = np.frombuffer(self.buf, dtype=np.uint8)


def _read_fully(stream: Any, readinto: Any, view: memoryview) -> int:
    """Fill ``view`` from ``stream``; fewer bytes only at the stream's end."""
    got = 0
    want = len(view)
    while got < want:
        if readinto is not None:
            n = readinto(view[got:]) or 0
        else:
            data = stream.read(want - got)
            n = len(data)
            view[got : got + n] = data
        if n == 0:
            break
        got += n
    return got


class ChunkReader:
    """Reads the next chunk when asked, or (``readahead`` > 0) ahead of time in a thread.

    The first chunk is read in the caller's thread; the thread starts only if
    it was full, so a tar smaller than one chunk never starts one. Then the
    thread reads up to ``readahead`` chunks ahead of the walker, and ends at
    the stream's end, at an error (kept for :meth:`next`) or at :meth:`close`.
    Buffers are allocated as needed: at most 2 without the thread,
    ``readahead + 1`` with it.

    Parameters
    ----------
    stream:
        Anything with ``read(n)``; ``readinto`` is used when present.
    chunk_size, headroom:
        Bytes per chunk, and bytes kept free in front of each.
    readahead:
        Chunks read ahead by the thread; 0: no thread.
    """

    def __init__(self, stream: Any, chunk_size: int, headroom: int, readahead: int = 0) -> None:
        if readahead < 0:
            raise ValueError(f"readahead must be 0 or more, not {readahead}")
        self.stream = stream
        self.chunk_size = chunk_size
        self.headroom = headroom
        self.readahead = readahead
        self._readinto = getattr(stream, "readinto", None)
        self._free: list[Slot] = []
        self._done = False  # next() returns (None, 0)
        self._last = False  # the stream ended after the chunk handed out last
        self._thread: threading.Thread | None = None
        self._pool: queue.SimpleQueue[Slot | None] = queue.SimpleQueue()
        self._filled: queue.SimpleQueue[tuple[Slot | None, int, BaseException | None]] = (
            queue.SimpleQueue()
        )
        self._closing = False

    @property
    def thread(self) -> threading.Thread | None:
        """The read-ahead thread, once started."""
        return self._thread

    def next(self) -> tuple[Slot | None, int]:
        """The next chunk's buffer and its length; ``(None, 0)`` once the stream has ended.

        Raises
        ------
        Exception
            Whatever the stream's read raised (in the thread: the same exception).
        """
        if self._done:
            return None, 0
        if self._thread is not None:
            slot, n, error = self._filled.get()
            if error is not None:
                self._done = True
                raise error
            if slot is None:
                self._done = True
            return slot, n
        if self._last:
            self._done = True
            return None, 0
        slot = self._free.pop() if self._free else Slot(self.headroom + self.chunk_size)
        try:
            n = _read_fully(self.stream, self._readinto, slot.view[self.headroom :])
        except BaseException:
            self._done = True
            raise
        if n == 0:
            self._done = True
            return None, 0
        if n < self.chunk_size:
            self._last = True
        elif self.readahead:
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()
        return slot, n

    def release(self, slot: Slot) -> None:
        """Give back a buffer the walker no longer reads."""
        if self._thread is not None:
            self._pool.put(slot)
        else:
            self._free.append(slot)

    def _run(self) -> None:
        allocated = 0
        try:
            while True:
                if allocated < self.readahead:
                    slot: Slot | None = Slot(self.headroom + self.chunk_size)
                    allocated += 1
                else:
                    slot = self._pool.get()
                if slot is None or self._closing:
                    return
                n = _read_fully(self.stream, self._readinto, slot.view[self.headroom :])
                if n == 0:
                    self._filled.put((None, 0, None))
                    return
                self._filled.put((slot, n, None))
                if n < self.chunk_size:
                    self._filled.put((None, 0, None))
                    return
        except BaseException as e:  # handed to the walker's thread, raised there
            self._filled.put((None, 0, e))

    def close(self) -> None:
        """Stop the thread and wait for it (a read in progress finishes first); idempotent."""
        self._done = True
        self._closing = True
        self._free.clear()
        thread = self._thread
        if thread is not None:
            self._pool.put(None)  # wakes a thread waiting for a free buffer
            if thread is not threading.current_thread():
                thread.join()


def is_local_file(stream: Any) -> bool:
    """Whether ``stream`` reads a regular local file (``fileno()`` of one): no thread pays for it.

    A page-cache read is a memcpy: a thread moves it to the other core but
    adds hand-offs; on a loaded 2-core VM, ``bench_tar`` measured 1 GiB in
    0.36 s CPU without the thread and 0.43 s with it, and no faster in wall
    time. Pipes, sockets, in-memory and remote streams keep the thread.
    """
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return False
    try:
        return stat.S_ISREG(os.fstat(fileno()).st_mode)
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return False


def open_reader(stream: Any, chunk_size: int, headroom: int, readahead: int) -> ChunkReader:
    """A :class:`ChunkReader` (kept for the walker's one call site)."""
    return ChunkReader(stream, chunk_size, headroom, readahead)
