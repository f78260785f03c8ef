"""Walking a local tar in place: the file mapped read-only, no read copy.

A ``read()`` from the page cache is a memcpy that costs about as much CPU as
the payloads' CRC32C; a mapping lets the walker (and its compiled loop) read
the page cache itself. It pays in page-table updates instead: one fault per
64 KiB of fault-around, or, on Linux 5.14+, one ``MADV_POPULATE_READ`` call
per window (:func:`_populate`). Once the compiled walk grouped
members in C and prefetched ahead of itself (a mapped file's pages are
scattered, and the CPU's prefetcher stops at page boundaries), the mapping
cost less CPU than the read on the 2-core VM measured (0.23 against 0.29 s
per GiB, ``benchmarks/README.md`` 2026-11-24), so it is the default
(``map_file=True``; ``False`` reads). :class:`~.walk.TarWalker` maps a
stream, if asked, when it is a regular local file positioned at its start (:func:`map_stream`); anything
else (a pipe, a special file, an fsspec file, a failed ``mmap``) is read as a
stream, as before.

A mapped file that shrinks while it is walked would kill the process with
SIGBUS at the first page past its new end. The walk is therefore given the
mapping one window at a time (:meth:`MappedFile.extend`), and each window is
cut at the size ``os.fstat`` reports just before: a file found shorter than
when it was mapped ends the walk there, and the walker reports the
truncation as it does for a stream that ends early (a typed error with the
path and the offset). Only a file cut again between that ``fstat`` and the
walk's reaching the window (a few milliseconds) can still fault.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
import stat
import sys
from typing import Any

__all__ = ["MappedFile", "map_stream"]

_log = logging.getLogger(__name__)
_PAGE = mmap.PAGESIZE
# Linux's MADV_POPULATE_READ (5.14+); Python 3.11's mmap does not name it.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_CAN_POPULATE = sys.platform == "linux" and hasattr(mmap.mmap, "madvise")


class MappedFile:
    """A local file mapped read-only, handed to the walk in windows of ``window`` bytes.

    Parameters
    ----------
    mapping:
        The mapping (of the whole file, as large as it was at ``fstat``).
    fd:
        A descriptor of the file this object owns (closed by :meth:`close`),
        asked for the file's current size before each window.
    window:
        Bytes added to the walk per :meth:`extend`.
    """

    __slots__ = ("_fd", "map", "size", "window")

    def __init__(self, mapping: mmap.mmap, fd: int, window: int) -> None:
        self.map = mapping
        self.size = len(mapping)
        self.window = window
        self._fd = fd
        _advise(mapping, "MADV_SEQUENTIAL", 0, self.size)
        _populate(mapping, 0, min(window, self.size))
        _advise(mapping, "MADV_WILLNEED", 0, min(2 * window, self.size))

    def extend(self, end: int) -> int:
        """The walk's new end after ``end``: one window more, never past the file's current size.

        Returns ``end`` itself at the mapping's end, or when the file is no
        longer than ``end`` (it was cut while mapped).
        """
        new = min(end + self.window, self.size)
        if new <= end:
            return end
        try:
            current = os.fstat(self._fd).st_size
        except OSError:  # cannot happen while we hold the descriptor; stop rather than fault
            current = end
        new = max(end, min(new, current))
        # Map the window the walk is given in one call rather than a fault per
        # 64 KiB, and ask the kernel to read the one after it while this one is walked.
        _populate(self.map, end, new - end)
        _advise(self.map, "MADV_WILLNEED", new, min(self.window, self.size - new))
        return new

    def close(self) -> None:
        """Unmap the file and close the descriptor (safe to call twice).

        A memoryview still alive elsewhere (a traceback's frame, say) keeps
        the mapping: it is then unmapped when the last view goes.
        """
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        try:
            self.map.close()
        except BufferError:
            _log.debug("tar mapping still exported; it is unmapped when its last view goes")


def _advise(m: mmap.mmap, option: str, start: int, length: int) -> None:
    """``m.madvise`` where the platform has it and ``option``; advice only, never an error."""
    flag = getattr(mmap, option, None)
    if flag is None or not hasattr(m, "madvise") or length <= 0:
        return
    aligned = start - start % _PAGE
    with contextlib.suppress(OSError, ValueError):
        m.madvise(flag, aligned, length + start - aligned)


def _populate(m: mmap.mmap, start: int, length: int) -> None:
    """Map ``[start, start + length)`` into the page tables now (Linux 5.14+), else ask it read.

    ``MADV_POPULATE_READ`` takes the fault path once for the whole window: on
    the 2-core VM a 1 GiB walk went from ~26,000 page faults to ~10,800 (the
    rest are the grouper's own memory), ``benchmarks/README.md``. Older
    kernels answer ``EINVAL`` and get ``MADV_WILLNEED``; a window past the
    file's end (it was cut) answers ``EFAULT``, never ``SIGBUS``.
    """
    global _CAN_POPULATE
    if _CAN_POPULATE and length > 0:
        aligned = start - start % _PAGE
        try:
            m.madvise(_MADV_POPULATE_READ, aligned, length + start - aligned)
            return
        except OSError as e:
            if e.errno == errno.EINVAL:
                _CAN_POPULATE = False
        except ValueError:
            return
    _advise(m, "MADV_WILLNEED", start, length)


def map_stream(stream: Any, window: int) -> MappedFile | None:
    """``stream``'s file mapped read-only, or ``None`` if it cannot be walked in place.

    Mapped only when ``stream`` has a descriptor (``fileno()``) of a regular,
    non-empty file and stands at its first byte; a stream elsewhere, any
    other file (pipe, device, socket), a remote or in-memory stream, or an
    ``mmap`` that fails is read as a stream instead.
    """
    fileno = getattr(stream, "fileno", None)
    tell = getattr(stream, "tell", None)
    if fileno is None or tell is None:
        return None
    try:
        if tell() != 0:
            return None
        fd = os.dup(fileno())
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            os.close(fd)
            return None
        m = mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError):
        os.close(fd)
        return None
    return MappedFile(m, fd, window)
