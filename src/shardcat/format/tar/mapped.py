"""Walking a local tar in place: the file mapped read-only, no read copy.

A ``read()`` from the page cache is a memcpy that costs about as much CPU as
the payloads' CRC32C; a mapping lets the walker (and its compiled loop) read
the page cache itself. It pays in page-table updates instead: one fault per
64 KiB of fault-around, or, on Linux 5.14+, one ``MADV_POPULATE_READ`` call
per window (:func:`_populate`). Once the compiled walk grouped
members in C and prefetched ahead of itself (a mapped file's pages are
scattered, and the CPU's prefetcher stops at page boundaries), the mapping
cost less CPU than the read on the 2-core VM measured (0.23 against 0.29 s
per GiB, ``benchmarks/README.md`` at a731c64 2026-11-24), so it is the default
(``map_file=True``; ``False`` reads). :class:`~.walk.TarWalker` maps a
stream, if asked, when it is a regular local file positioned at its start (:func:`map_stream`); anything
else (a pipe, a special file, an fsspec file, a failed ``mmap``) is read as a
stream, as before.

With ``ahead=True`` (``TarWalker``'s default for a mapped file; ``readahead=0``
turns it off) one worker thread populates the *next* window while the walk
reads this one, and drops the page tables of the windows a window behind the
walk (``MADV_DONTNEED``: the page cache keeps the pages; the final ``munmap``
then has little left to undo). Mapping costs about 40 % of a mapped scan's
CPU, and this moves it to the other core: on the 2-core VM a 1 GiB scan's
walking thread went from ~0.27 to ~0.16 s CPU, and the scan ran at the
plain read's speed when the other core was free (no faster than one thread
when it was busy: a task the thread has not started by the time the walk
needs its window is cancelled and mapped by the walk itself).
``docs/IN-PLACE.md`` section 5 has the figures.

A mapped file that shrinks while it is walked would kill the process with
SIGBUS at the first page past its new end, and a user's tar can be cut by
any process at any time. So a file is mapped only under the guard of
:mod:`shardcat.format.mapguard` (never without it: :func:`map_stream` then
returns ``None`` and the file is read): a page found cut reads as zeros
instead of faulting, and :meth:`MappedFile.lost` tells the walker whether
anything it read may have been lost (a page cut, or the file now shorter
than the walk has read); the walker asks before every batch it yields and
when it raises, and reports a cut as a :class:`~.errors.TarTruncatedError`.
Each window is also cut at the size ``os.fstat`` reports just before it is
given to the walk, so a file found shorter ends the walk there.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import logging
import mmap
import os
import stat
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..mapguard import GuardedMap, map_guarded
from ..mapguard import available as mapguard_available

__all__ = ["MappedFile", "can_map", "can_map_ahead", "map_stream"]

_log = logging.getLogger(__name__)
_PAGE = mmap.PAGESIZE
# Linux's MADV_POPULATE_READ (5.14+); Python 3.11's mmap does not name it.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_CAN_POPULATE = sys.platform == "linux" and hasattr(mmap.mmap, "madvise")

_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)

_advise_nogil: Callable[[Any, int, int, int], int] | None
try:  # the compiled walker's madvise without the GIL (a thread holding it would stall the walk)
    _advise_nogil = importlib.import_module(f"{__package__}._ctar").advise
except (ImportError, AttributeError):
    _advise_nogil = None


def _map_and_drop(m: mmap.mmap, start: int, length: int, drop_start: int, drop_length: int) -> int:
    """The thread's task: populate ``[start, start + length)``, then drop the page tables of
    ``[drop_start, drop_start + drop_length)`` (walked: the file's pages stay in the page
    cache, and the final ``munmap`` has less to undo); the populate's errno."""
    advise = _advise_nogil
    if advise is None:  # pragma: no cover - the thread runs only with the compiled module
        return errno.ENOSYS
    err = advise(m, start, length, _MADV_POPULATE_READ)
    if drop_length > 0:
        advise(m, drop_start, drop_length, _MADV_DONTNEED)
    return err


class MappedFile:
    """A local file mapped read-only, handed to the walk in windows of ``window`` bytes.

    Parameters
    ----------
    guarded:
        The file mapped under the guard (all of it, as large as it was when mapped).
    fd:
        A descriptor of the file this object owns (closed by :meth:`close`),
        asked for the file's current size before each window.
    window:
        Bytes added to the walk per :meth:`extend`.
    ahead:
        Map the next window into the page tables on a second thread while the
        walk reads this one (:func:`can_map_ahead`; otherwise each window is
        mapped by the walk's own thread when it is given).
    """

    __slots__ = (
        "_ahead",
        "_done",
        "_dropped",
        "_fd",
        "_guarded",
        "_pending",
        "map",
        "size",
        "window",
    )

    def __init__(self, guarded: GuardedMap, fd: int, window: int, *, ahead: bool = False) -> None:
        mapping = guarded.map
        self._guarded = guarded
        self.map = mapping
        self.size = len(mapping)
        self.window = window
        self._fd = fd
        self._ahead: ThreadPoolExecutor | None = None
        self._pending: tuple[int, int, int, Future[int]] | None = None
        _advise(mapping, "MADV_SEQUENTIAL", 0, self.size)
        first = min(window, self.size)
        _populate(mapping, 0, first)
        self._done = first  # the file's first bytes mapped (or advised) so far
        self._dropped = 0  # the first bytes whose page tables the thread dropped
        if ahead and first < self.size and can_map_ahead() and _slots.acquire(blocking=False):
            self._ahead = ThreadPoolExecutor(1, thread_name_prefix="shardcat-tar-map")
            self._submit(first, 0)
        else:
            self._read_ahead(first, min(window, self.size - first))

    def lost(self, end: int) -> int | None:
        """The first byte under ``end`` the walk may not have read as the file's, or ``None``.

        Not ``None`` once the file was found cut (a page under the guard read
        as zeros) or is shorter than ``end`` now: what was read from there on
        cannot be trusted (:meth:`.mapguard.GuardedMap.lost`).
        """
        return self._guarded.lost(end)

    @property
    def maps_ahead(self) -> bool:
        """Whether a second thread maps the next window while this one is walked."""
        return self._ahead is not None

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
        if new > end:
            self._map(end, new)
        return new

    def _map(self, end: int, new: int) -> None:
        """Have ``[end, new)`` in the page tables, and the next window on its way."""
        if self._pending is not None:
            start, stop, drop_from, future = self._pending
            self._pending = None
            if future.cancel():
                # The thread has not started it (the other CPU is busy): map it here rather
                # than wait, and leave its pages to drop to the next task.
                self._dropped = drop_from
            elif _result(future) == 0 and start <= self._done:
                # Waited for (its errors are advice too: an unmapped page is a page fault,
                # never a wrong byte).
                self._done = max(self._done, stop)
        if self._done < new:
            # Map the window the walk is given in one call rather than a fault per 64 KiB.
            at = max(end, self._done)
            _populate(self.map, at, new - at)
            self._done = new
        if self._ahead is not None:
            self._submit(new, end)
        else:
            self._read_ahead(new, min(self.window, self.size - new))

    def _read_ahead(self, start: int, length: int) -> None:
        """Ask the kernel to read ``[start, start + length)`` while the walk reads the window
        before it, unless its last page is already in the page cache.

        ``MADV_WILLNEED`` looks up every page of the range even when all are
        cached (~4 % of a warm 1 GiB scan's CPU); one ``RWF_NOWAIT`` read of a
        byte tells a cached window (a file written or read before, front to
        back) from one that is not, for one system call.
        """
        if length <= 0:
            return
        if _cached(self._fd, start + length - 1):
            return
        _advise(self.map, "MADV_WILLNEED", start, length)

    def _submit(self, start: int, end: int) -> None:
        """Queue ``[start, start + window)`` (within the mapping) for the thread to map, and
        the pages a window behind the walk's ``end`` (never read again) to drop."""
        ahead = self._ahead
        stop = min(start + self.window, self.size)
        if ahead is None or stop <= start:
            return
        behind = max(self._dropped, (end - self.window) // _PAGE * _PAGE)
        try:
            future = ahead.submit(
                _map_and_drop, self.map, start, stop - start, self._dropped, behind - self._dropped
            )
        except RuntimeError:
            # No task can be queued (the interpreter is exiting while this walk runs on a
            # thread of its own, or no thread can be started): one thread maps from here on.
            self._ahead = None
            ahead.shutdown(wait=True)
            _slots.release()
            _log.debug("tar mapping thread unavailable; the walk maps its windows", exc_info=True)
            self._read_ahead(start, stop - start)
            return
        self._pending = (start, stop, self._dropped, future)
        self._dropped = behind

    def close(self) -> None:
        """Stop the mapping thread, unmap the file and close the descriptor (safe to call twice).

        A memoryview still alive elsewhere (a traceback's frame, say) keeps
        the mapping: it is then unmapped when the last view goes.
        """
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            # The thread's call holds a view of the mapping: let it finish (a few ms) first.
            try:
                ahead.shutdown(wait=True, cancel_futures=True)
            finally:
                self._pending = None
                _slots.release()
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
        self._guarded.close()


def _result(future: Future[int]) -> int:
    """The thread's errno, or ``-1`` if its task raised (advice: the walk maps the window)."""
    try:
        return future.result()
    except Exception:  # advice never fails the walk
        _log.debug("tar mapping thread failed; the walk maps the window itself", exc_info=True)
        return -1


_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", None)


def _cached(fd: int, offset: int) -> bool:
    """Whether the file's byte at ``offset`` is in the page cache (``False`` when unsure)."""
    if _RWF_NOWAIT is None:
        return False
    try:
        return os.preadv(fd, [bytearray(1)], offset, _RWF_NOWAIT) == 1
    except OSError:  # EAGAIN: not cached; EOPNOTSUPP and others: cannot tell
        return False


def _cpus() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


# Mapping threads at once in this process, all walks together: one per CPU beyond the
# first. A walk that finds none free maps its own windows (many walks at once, on a
# loaded machine, gain nothing from more threads than CPUs).
MAX_MAPPING_THREADS = max(1, _cpus() - 1)
_slots = threading.BoundedSemaphore(MAX_MAPPING_THREADS)


def can_map_ahead() -> bool:
    """Whether :class:`MappedFile` can map windows ahead on a second thread here.

    It needs ``MADV_POPULATE_READ`` (Linux 5.14+), the compiled walker's
    call of it without the GIL, and more than one CPU to run on.
    """
    if not _CAN_POPULATE or _advise_nogil is None:
        return False
    return _cpus() > 1


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
    rest are the grouper's own memory), ``benchmarks/README.md`` at a731c64. Older
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


def map_stream(stream: Any, window: int, *, ahead: bool = False) -> MappedFile | None:
    """``stream``'s file mapped read-only, or ``None`` if it cannot be walked in place.

    Mapped only when ``stream`` has a descriptor (``fileno()``) of a regular,
    non-empty file and stands at its first byte; a stream elsewhere, any
    other file (pipe, device, socket), a remote or in-memory stream, or an
    ``mmap`` that fails is read as a stream instead. ``ahead``: see :class:`MappedFile`.
    """
    if not can_map():
        return None  # never a user's file without the guard: it is read instead
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
    except OSError:
        os.close(fd)
        return None
    guarded = map_guarded(fd, str(getattr(stream, "name", "<stream>")))
    if guarded is None:
        os.close(fd)
        return None
    return MappedFile(guarded, fd, window, ahead=ahead)


def can_map() -> bool:
    """Whether a local tar can be walked in a mapping here (only under the guard)."""
    return mapguard_available()
