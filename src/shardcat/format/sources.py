"""RangeSource implementations that need no IO library: bytes and open files.

Fsspec URLs are :mod:`shardcat.storage`'s: it builds on these for local files.
"""

from __future__ import annotations

import errno
import importlib
import io
import os
import threading
from collections.abc import Callable, Sequence
from typing import BinaryIO

from .._forks import fork_generation
from .._pread import pread_full
from .._types import ByteRange, RangeSource

__all__ = ["BytesSource", "FileSource", "as_source"]

_CLAMP_ABOVE = 16 << 20
"""Reads larger than this are first clamped to the file's size (one fstat)."""
_HAS_PREAD = hasattr(os, "pread")


def _pread_linked(fd: int, n: int, offset: int) -> bytes | None:
    """Up to ``n`` bytes of ``fd`` at ``offset`` (one ``os.pread``), or None if the file has no name left.

    The point lookup reads a cached descriptor with it: a file deleted or
    replaced since it was opened (``st_nlink`` 0) is never read through the
    stale descriptor. The compiled record codec has the same function
    without the ``stat_result`` and with the GIL released once
    (``_ccodec.pread_linked``); this is its reference and its fallback.

    Raises
    ------
    OSError
        As ``os.fstat`` or ``os.pread``.
    """
    if not os.fstat(fd).st_nlink:
        return None
    return os.pread(fd, n, offset)


pread_linked: Callable[[int, int, int], bytes | None]
try:
    pread_linked = importlib.import_module(f"{__package__}._ccodec").pread_linked
except (ImportError, AttributeError):  # not built, or a platform without pread
    pread_linked = _pread_linked


class BytesSource:
    """A shard held in memory."""

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<bytes>") -> None:
        self._data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def size(self) -> int:
        return len(self._data)

    def read(self, start: int, end: int) -> bytes:
        return bytes(self._data[start:end])

    def read_suffix(self, length: int) -> bytes:
        return bytes(self._data[max(0, len(self._data) - length) :])

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        return [bytes(self._data[r.start : r.end]) for r in ranges]

    def open_stream(self, start: int = 0) -> BinaryIO:
        stream = io.BytesIO(self._data)
        stream.seek(start)
        return stream

    def close(self) -> None:
        pass


class _Held:
    """The descriptor of a :class:`FileSource`, kept open from ``__enter__`` to ``__exit__``."""

    __slots__ = ("_source",)

    def __init__(self, source: FileSource) -> None:
        self._source = source

    def __enter__(self) -> int:
        return self._source._hold()

    def __exit__(self, *exc: object) -> None:
        self._source._release()


class FileSource:
    """A seekable binary file object, shared under a lock; or a local path, read with pread.

    A path is opened unbuffered: every read is one positional ``os.pread``
    (continued if short, :func:`~shardcat._pread.pread_full`), so one open
    file serves any number of threads without a lock.

    Its descriptor is closed only when no read is using it: a read holds it
    (:meth:`held`) and :meth:`close` in another thread meanwhile defers the
    ``close(2)`` to the last holder. ``pread`` runs without the GIL; a
    descriptor closed under it, and its number reused by another open, would
    read another file's bytes. The holders are counted in a list
    (``append``/``pop`` are atomic under the GIL): a lock taken twice per
    read cost more than the read's own Python.
    """

    def __init__(self, file: BinaryIO | str | os.PathLike[str], name: str | None = None) -> None:
        self._lock = threading.Lock()
        self._users: list[None] = []  # one item per read holding the descriptor (held())
        self._closing = False  # close() asked: the last holder closes
        self._forks = fork_generation()  # a forked child's holders are not its own (close)
        if isinstance(file, (str, os.PathLike)):
            self._path: str | None = os.fspath(file)
            # Unbuffered where reads are preads (they bypass the file object, and a
            # raw file closes without a lock, safe in a forked child); buffered
            # otherwise, since a raw read may return fewer bytes than asked.
            buffering = 0 if _HAS_PREAD else -1
            self._file: BinaryIO = open(self._path, "rb", buffering=buffering)  # noqa: SIM115 - closed in close()
            self._owned = True
        else:
            self._path = None
            self._file = file
            self._owned = False
        self._name = name or self._path or getattr(file, "name", None) or "<file>"
        try:
            self._fd: int | None = self._file.fileno()
        except (OSError, AttributeError, io.UnsupportedOperation):
            self._fd = None

    @property
    def name(self) -> str:
        return str(self._name)

    @property
    def pread_fd(self) -> int | None:
        """The descriptor every read is an ``os.pread`` on, or None (a file object read under a
        lock, or closed). Code that reads it without the GIL holds it meanwhile (:meth:`held`)."""
        return self._fd if _HAS_PREAD and not self._closing else None

    def held(self) -> _Held:
        """``with source.held() as fd:`` the descriptor, not closed (by any thread) until the block ends.

        Raises
        ------
        OSError
            ``EBADF``: the source is closed, or has no descriptor.
        """
        return _Held(self)

    # Why this order is enough: a reader counts itself, then looks at _closing;
    # close() sets _closing, then looks at the count. Whichever looks second
    # sees the other, so close(2) never runs between a reader's look and its
    # release, and the last to leave after close() closes (FileIO.close() is
    # idempotent and does not release the GIL).
    def _hold(self) -> int:
        self._users.append(None)
        if self._closing or self._fd is None:
            self._release()
            raise OSError(errno.EBADF, f"{self._name}: the file is closed")
        return self._fd

    def _release(self) -> None:
        users = self._users
        users.pop()
        if self._closing and not users:
            self._file.close()

    def size(self) -> int:
        if self._fd is not None:
            fd = self._hold()
            try:
                return os.fstat(fd).st_size
            finally:
                self._release()
        with self._lock:
            here = self._file.tell()
            end = self._file.seek(0, os.SEEK_END)
            self._file.seek(here)
            return end

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        if end - start > _CLAMP_ABOVE:
            # pread and read allocate the requested size before reading: never ask
            # for more than the file has, whatever a damaged index claims.
            end = min(end, max(start, self.size()))
            if end <= start:
                return b""
        if self._fd is not None and _HAS_PREAD:
            # _hold() and _release() inline: this is every random read's path.
            users = self._users
            users.append(None)
            try:
                if self._closing:
                    raise OSError(errno.EBADF, f"{self._name}: the file is closed")
                return pread_full(self._fd, end - start, start)
            finally:
                users.pop()
                if self._closing and not users:
                    self._file.close()
        with self._lock:
            self._file.seek(start)
            return self._file.read(end - start)

    def read_suffix(self, length: int) -> bytes:
        size = self.size()
        return self.read(max(0, size - length), size)

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        return [self.read(r.start, r.end) for r in ranges]

    def read_many(self, starts: Sequence[int], ends: Sequence[int]) -> list[bytes]:
        """Bytes ``[starts[i], ends[i])`` for each ``i``; fewer only where the file ends.

        The batch path's reads, in the order given (sorted, ideally): one
        plain ``os.pread`` each; a short one (end of file, a signal) is
        continued by :meth:`read`, and so is a read over 16 MiB (clamped to
        the file size first).
        """
        if self._fd is None or not _HAS_PREAD:
            return [self.read(a, b) for a, b in zip(starts, ends)]
        pread = os.pread
        with self.held() as fd:
            out = [
                pread(fd, b - a, a) if 0 < b - a <= _CLAMP_ABOVE else b""
                for a, b in zip(starts, ends)
            ]
        for i, (a, b) in enumerate(zip(starts, ends)):
            if len(out[i]) != max(0, b - a):
                out[i] = self.read(a, b)
        return out

    def open_stream(self, start: int = 0) -> BinaryIO:
        if self._path is not None:
            stream: BinaryIO = open(self._path, "rb")  # noqa: SIM115 - caller closes
            stream.seek(start)
            return stream
        # Buffered, so sequential readers make few positional reads.
        return io.BufferedReader(_SharedFileStream(self, start), 1 << 20)

    def unlinked(self) -> bool:
        """Whether the open file has no name left: deleted, or replaced by a rename over it.

        Such a file stays readable through the open descriptor; a cache of
        open sources asks this to reopen the path instead of serving it.
        """
        if self._fd is None:
            return False
        fd = self._hold()
        try:
            return os.fstat(fd).st_nlink == 0
        finally:
            self._release()

    def close(self) -> None:
        """Close the file now, or when the last read holding it ends (idempotent)."""
        if not self._owned:
            return
        if self._forks != fork_generation():
            # A forked child: the holders counted were its parent's threads, not here.
            self._users, self._forks = [], fork_generation()
        self._closing = True
        if not self._users:
            self._file.close()


class _SharedFileStream(io.RawIOBase):
    """A sequential view of a FileSource that does not move other readers' position."""

    def __init__(self, source: FileSource, start: int) -> None:
        self._source = source
        self._pos = start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._source.read(self._pos, self._pos + len(buffer))
        n = len(data)
        memoryview(buffer)[:n] = data
        self._pos += n
        return n


def as_source(
    source: RangeSource | BinaryIO | bytes | bytearray | memoryview | str | os.PathLike[str],
    name: str | None = None,
) -> tuple[RangeSource, bool]:
    """Wrap what the caller passed as a RangeSource; the flag says whether we own it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesSource(source, name or "<bytes>"), True
    if isinstance(source, (str, os.PathLike)):
        return FileSource(source, name), True
    if isinstance(source, RangeSource):
        return source, False
    if hasattr(source, "read") and hasattr(source, "seek"):
        return FileSource(source, name), False
    raise TypeError(f"cannot read a shard from a {type(source).__name__}")
