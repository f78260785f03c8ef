"""Open shards kept by URL for one thread: the one way lookups read bytes.

A :class:`SourceCache` holds the sources :func:`~shardcat.storage.open_source`
opens: local files stay open and are read with ``os.pread`` (no open or
close per read, and none per batch); remote files keep their fsspec
filesystem (a forked child drops them and resolves its own). Point reads are one request; batched reads merge nearby
ranges per file and send every remote range of a filesystem in one
``cat_ranges`` call, which async stores (s3fs, gcsfs) issue concurrently
(s3fs: as many at once as its pool, sized to ``remote_in_flight``), and
every obstore range of all files at once, ``remote_in_flight`` in flight
(:mod:`.fanout`).

Errors name the file as data (``error.path``, credentials removed), so a
caller knows which shard failed without parsing messages. A forked child
closes the descriptors it inherited (:func:`os.register_at_fork`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
import weakref
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

from .. import config
from .._ranges import (
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_SPAN,
    LOCAL_MAX_GAP,
    Coalesced,
    MergedReads,
    coalesce,
    merge_sorted,
    split,
)
from .._types import ByteRange, RangeSource, StorageOptions
from .._units import parse_size
from ..errors import SettingError, StorageError
from ..format import sources as _sources
from ..format.sources import FileSource
from . import gap as _gap
from .fanout import Job, read_across
from .objstore import ObstoreSource
from .sources import FsspecSource, in_flight, open_source, retried
from .translate import is_backend_error, translate

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "REMOTE_MAX_GAP_ENV",
    "SourceCache",
    "fetch_ranges",
    "resolve_max_open",
    "resolve_remote_max_gap",
]

REMOTE_MAX_GAP_ENV = config.env_var("remote_max_gap")
"""Environment variable: the default gap merged on object stores (bytes, or e.g. ``256KiB``)."""

DEFAULT_MAX_OPEN = 64
"""Sources a cache keeps open when not told (the least recently used is closed beyond this)."""

MAX_OPEN_AUTO = (64, 4096)
"""``max_open_shards = "auto"``: the process's budget of open files, within these bounds."""

MIN_SHARE = 8
"""Files a cache may keep open however many caches share the process's budget."""

ONE_PREAD = 1 << 20
"""Reads up to this size try one ``os.pread`` first (a short one takes the general path)."""

_live: weakref.WeakSet[SourceCache] = weakref.WeakSet()
_REMOTE = (FsspecSource, ObstoreSource)


class _OpenCount:
    """Sources all caches of the process keep open, against :func:`open_files_budget`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0

    def add(self, n: int) -> int:
        with self.lock:
            self.total = max(0, self.total + n)
            return self.total


_opened = _OpenCount()


def _close_inherited() -> None:
    # A forked child shares its parent's descriptors (and their file offsets'
    # owners): it closes its copies, never the parent's files, and reopens on use.
    # Its count starts again (a parent's thread may have held the lock at the fork).
    global _opened
    _opened = _OpenCount()
    for cache in list(_live):
        cache.close()
    _opened = _OpenCount()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited)


def resolve_max_open(value: int | str | None = None) -> int:
    """Local files a cache keeps open: ``value``, else the ``max_open_shards`` setting.

    ``"auto"`` (the default) is the process's budget (:func:`open_files_budget`,
    half its soft limit of open files) within :data:`MAX_OPEN_AUTO`: a dataset's
    shards stay open across lookups up to thousands of files (a lookup in a file
    not open pays an ``open``). Whatever this says, the caches alive at once
    share the budget (:attr:`SourceCache.max_open`): each thread's lookups have
    a cache, and ten threads must not open ten budgets' worth of files.

    Raises
    ------
    ValueError
        Not a whole number of at least 1 nor ``"auto"``.
    """
    source = "max_open_shards"
    if value is None:
        value = config.get("max_open_shards")
        source = (
            f"the setting max_open_shards (${config.env_var('max_open_shards')}, "
            "or the config file's max_open_shards)"
        )
    if isinstance(value, str) and value.strip().lower() == "auto":
        return _auto_max_open()
    try:
        count = int(value) if isinstance(value, str | int) and not isinstance(value, bool) else 0
    except ValueError:
        count = 0
    if count < 1:
        raise SettingError(
            f"{source} must be a whole number of files (1 or more) or 'auto', not {value!r}"
        )
    return count


def _out_of_descriptors(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the process or the system out of open files."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return True
        seen = seen.__cause__
    return False


def _auto_max_open() -> int:
    low, high = MAX_OPEN_AUTO
    return max(low, min(high, open_files_budget()))


def open_files_budget() -> int:
    """Files all caches of the process may keep open together: half its soft limit.

    The other half is the rest of the process's (sockets, the catalog's
    database files, a data loader's pipes). No limit known (Windows, or
    unlimited): :data:`MAX_OPEN_AUTO`'s upper bound.
    """
    try:
        import resource
    except ImportError:  # Windows: no RLIMIT_NOFILE
        return MAX_OPEN_AUTO[1]
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_AUTO[1]
    return max(MIN_SHARE, soft // 2)


def resolve_remote_max_gap(value: int | str | None = None) -> int | None:
    """The gap batch reads of remote files read through: ``value``, else the setting; None: derived.

    ``value`` and the ``remote_max_gap`` setting (``SHARDCAT_REMOTE_MAX_GAP``,
    docs/CONFIG.md) are bytes, a size such as ``"256KiB"`` (0 merges only
    adjacent or overlapping ranges), or ``"auto"`` (the default): None, the
    gap derived per store from its measured latency and bandwidth and held
    to the batch's read budget (:mod:`shardcat.storage.gap`).

    Raises
    ------
    ValueError
        Not a size nor ``"auto"``, or negative.
    """
    source = "remote_max_gap"
    if value is None:
        raw = config.get("remote_max_gap")
        if isinstance(raw, str):
            raw = raw.strip()
            raw = int(raw) if raw.isdigit() else raw
        if raw is None or raw == "":
            return None
        value, source = raw, REMOTE_MAX_GAP_ENV
    if isinstance(value, str) and value.strip().lower() == "auto":
        return None
    if isinstance(value, bool):
        raise SettingError(f"{source} must be a size in bytes or 'auto', not {value!r}")
    if value == 0:
        return 0
    try:
        return parse_size(value)
    except ValueError as e:
        raise SettingError(
            f"{source}={value!r} is not a size: {e} (write e.g. auto, 1MiB, 262144 or 0)"
        ) from None


class SourceCache:
    """Sources opened by URL and kept open, least recently used closed first.

    One cache serves one thread at a time (a lookup owns one per thread).
    A local file that was deleted or replaced since it was opened (its
    descriptor has no name left) is reopened by path, so a stale descriptor
    never serves a file the path no longer names.

    Parameters
    ----------
    storage_options:
        fsspec options for remote URLs (credentials, endpoint, ...).
    max_open:
        Sources kept open, at most: while several caches are alive (one per
        thread's lookups), each keeps at most its share of the process's
        budget (:attr:`max_open`).
    remote_max_gap:
        Batched reads of remote files read through gaps up to this many bytes
        rather than send another request (:func:`resolve_remote_max_gap`:
        derived per store from its measured latency and bandwidth, unless
        ``SHARDCAT_REMOTE_MAX_GAP`` says otherwise; :mod:`.gap`). Local
        files merge gaps up to 8 KiB, whatever this says.
    """

    def __init__(
        self,
        storage_options: StorageOptions | None = None,
        max_open: int = DEFAULT_MAX_OPEN,
        *,
        remote_max_gap: int | str | None = None,
    ) -> None:
        self.storage_options = storage_options
        self.asked_open = max(1, max_open)
        """Sources kept open at most, as asked (see :attr:`max_open`)."""
        self._budget = open_files_budget()
        self._evictions = 0
        """Sources closed to keep within the limits: a batch that saw one close reopens as it reads."""
        self.remote_max_gap = resolve_remote_max_gap(remote_max_gap)
        self._open: OrderedDict[str, RangeSource] = OrderedDict()
        # The descriptors of the open local files, for point reads' one-pread path.
        self._fds: dict[str, int] = {}
        self.local_fds: Mapping[str, int] = self._fds
        """URL → descriptor of each open local file: a point lookup reads one
        with ``pread_linked`` (and calls :meth:`touch`) without :meth:`read`'s
        frame, and falls back to :meth:`read` when that returns None or short.
        The same dict, kept up to date; never changed by callers."""
        self.touch: Callable[[str], None] = self._open.move_to_end
        """Mark ``url`` (open) as used now: the cache closes the least recently used first."""
        _live.add(self)

    @property
    def max_open(self) -> int:
        """Sources kept open now: as asked, within this cache's share of the process's budget.

        The share is the budget (half the open-file limit) over the caches alive,
        at least :data:`MIN_SHARE`: one rule for the point path, the batch path
        (which takes every file's descriptor at once only when they fit) and
        the closing of the least recently used.
        """
        return min(self.asked_open, max(MIN_SHARE, self._budget // max(1, len(_live))))

    def source(self, url: str) -> RangeSource:
        """The open source of ``url``, opened now if it is not cached.

        Raises
        ------
        ShardNotFoundError
            A local file does not exist (remote files are found missing on first read).
        StorageError
            The URL cannot be opened (unknown scheme, missing backend package, ...).
        """
        src = self._open.get(url)
        if src is not None and not (isinstance(src, FileSource) and src.unlinked()):
            self._open.move_to_end(url)
            return src
        if src is not None:
            self.forget(url)
        try:
            src = open_source(url, self.storage_options)
        except StorageError as e:
            if not _out_of_descriptors(e) or not self._open:
                raise
            # Out of descriptors (other code holds them): give back this cache's older half.
            self._close_oldest(len(self._open) - len(self._open) // 2)
            src = open_source(url, self.storage_options)
        self._open[url] = src
        total = _opened.add(1)
        if isinstance(src, FileSource) and src.pread_fd is not None:
            self._fds[url] = src.pread_fd
        # Within this cache's share, and the process within its budget: a cache that finds
        # the budget spent (by caches opened before the others came) closes its own older
        # sources, never another thread's, and keeps the one just opened.
        excess = max(len(self._open) - self.max_open, total - self._budget)
        self._close_oldest(min(excess, len(self._open) - 1))
        return src

    def _close_oldest(self, count: int) -> None:
        """Close the ``count`` least recently used sources (none if ``count`` <= 0).

        A source a read holds (``FileSource.held``) closes when that read ends.
        """
        count = max(0, count)
        for _ in range(count):
            old_url, old = self._open.popitem(last=False)
            self._fds.pop(old_url, None)
            _close_quietly(old)
        self._evictions += count
        _opened.add(-count)

    def read(self, url: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of ``url`` in one request; fewer only where the file ends.

        Raises
        ------
        ShardNotFoundError
            The file does not exist (``error.path`` names it).
        StorageError
            The store failed to read it (``error.path`` names it).
        """
        try:
            fd = self._fds.get(url)
            # The point lookup's path: one pread on the open descriptor, if the
            # file still has a name (else None, and it is reopened below).
            if fd is not None and 0 < end - start <= ONE_PREAD:
                data = _sources.pread_linked(fd, end - start, start)
                if data is not None and len(data) == end - start:
                    self._open.move_to_end(url)
                    return data
            return self.source(url).read(start, end)
        except Exception as e:
            if not is_backend_error(e):
                raise
            self._raise_failed(url, e)

    def read_batch(
        self,
        requests: Sequence[tuple[str, ByteRange]],
        *,
        max_gap: int | None = None,
        max_span: int = DEFAULT_MAX_SPAN,
    ) -> list[memoryview]:
        """The bytes of each ``(url, range)``, in input order; fewer only where a file ends.

        Ranges of one file are merged across gaps of up to ``max_gap`` bytes
        (by default 8 KiB for local files, where another ``pread`` costs
        microseconds, and the cache's ``remote_max_gap`` for remote ones,
        where it costs a round trip) into reads of at most ``max_span`` bytes. Local files are read
        with ``os.pread`` on their cached descriptor; all remote reads of one
        filesystem go out in one ``cat_ranges`` call.

        Raises
        ------
        ShardNotFoundError
            A file does not exist (``error.path`` names it).
        StorageError
            The store failed to read a file (``error.path`` names it, when one failed alone).
        """
        by_url: dict[str, list[int]] = defaultdict(list)
        for i, (url, _) in enumerate(requests):
            by_url[url].append(i)
        out: list[memoryview | None] = [None] * len(requests)
        # Remote reads, one plan per filesystem: (url, indices, merged reads, path).
        remote: dict[int, tuple[Any, list[tuple[str, list[int], list[Coalesced], str]]]] = {}
        opened: list[tuple[str, list[int], RangeSource]] = []
        for url, idxs in by_url.items():
            try:
                opened.append((url, idxs, self.source(url)))
            except OSError as e:
                self._raise_failed(url, e)
        cap = _NO_CAP
        if max_gap is None and self.remote_max_gap is None:
            cap = _budget(
                [[requests[i][1] for i in idxs] for _, idxs, src in opened if _remote(src)]
            )
        # obstore files, read all at once: (url, indices, merged reads), and the jobs.
        across: list[tuple[str, list[int], list[Coalesced]]] = []
        jobs: list[Job] = []
        for url, idxs, src in opened:
            ranges = [requests[i][1] for i in idxs]
            gap = self._gap(src, max_gap)
            merged = coalesce(ranges, min(cap, gap) if _remote(src) else gap, max_span)
            if isinstance(src, FsspecSource):
                remote.setdefault(id(src.fs), (src.fs, []))[1].append((url, idxs, merged, src.path))
                continue
            if isinstance(src, ObstoreSource):
                across.append((url, idxs, merged))
                jobs.append((src, [m.range.start for m in merged], [m.range.end for m in merged]))
                continue
            try:
                blobs = src.read_ranges([m.range for m in merged])
            except OSError as e:
                self._raise_failed(url, e)
            for i, view in zip(idxs, split(merged, blobs, ranges)):
                out[i] = view
        if jobs:

            def failed(k: int, e: BaseException) -> NoReturn:
                self._raise_failed(across[k][0], e)

            for (_, idxs, merged), views in zip(across, read_across(jobs, failed)):
                ranges = [requests[i][1] for i in idxs]
                for i, view in zip(idxs, split(merged, views, ranges)):
                    out[i] = view
        for fs, plan in remote.values():
            self._read_remote(fs, plan, requests, out)
        return [v if v is not None else memoryview(b"") for v in out]

    def read_sorted(
        self,
        urls: Sequence[str],
        file: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        *,
        max_gap: int | None = None,
        max_span: int = DEFAULT_MAX_SPAN,
    ) -> tuple[list[bytes | memoryview], MergedReads]:
        """Read many ranges given as arrays sorted by ``(file, start)``; ``urls[file]`` names each file.

        The batch path of lookups: ranges are merged in one vectorised pass
        (:func:`~shardcat._ranges.merge_sorted`, gaps as in
        :meth:`read_batch`), local files are read with ``os.pread`` on their
        cached descriptor, and every remote read of one filesystem goes out in
        one ``cat_ranges`` call (concurrent on async stores). Returns one
        read-only buffer per merged read and the merge: range ``i`` is
        ``buffers[merged.read[i]][start[i] - merged.start[merged.read[i]]:]``.
        A buffer is shorter than its read only where the file ends.

        Raises
        ------
        ShardNotFoundError
            A file does not exist (``error.path`` names it).
        StorageError
            The store failed to read a file (``error.path`` names it, when one failed alone).
        """
        import numpy as np

        sources: list[RangeSource] = []
        evictions = self._evictions
        for url in urls:
            try:
                sources.append(self.source(url))
            except OSError as e:
                self._raise_failed(url, e)
        # Opening the last ones closed others (more files than the cache keeps open, or
        # the process's budget spent): each is asked for again (reopened) before its reads.
        reopen = self._evictions != evictions
        gaps = np.array([self._gap(src, max_gap) for src in sources], dtype=np.int64)
        if max_gap is None and self.remote_max_gap is None:
            # Derived gaps are held to the batch's read budget (gap.budget_gap).
            is_remote = np.array([_remote(src) for src in sources], dtype=bool)
            mine = is_remote[np.asarray(file, dtype=np.int64)] if is_remote.any() else None
            if mine is not None and mine.any():
                cap = _gap.budget_gap(file[mine], start[mine], end[mine])
                gaps[is_remote] = np.minimum(gaps[is_remote], cap)
        merged = merge_sorted(file, start, end, gaps, max_span)
        out: list[bytes | memoryview] = [b""] * len(merged)
        # Remote reads, per filesystem: (read indices, paths, starts, ends).
        remote: dict[int, tuple[Any, list[int], list[str], list[int], list[int]]] = {}
        # obstore reads, of all files at once: (first read, last read + 1, url), and the jobs.
        across: list[tuple[int, int, str]] = []
        jobs: list[Job] = []
        files, starts, ends = merged.file.tolist(), merged.start.tolist(), merged.end.tolist()
        i = 0
        while i < len(files):
            f = files[i]
            j = i
            while j < len(files) and files[j] == f:
                j += 1
            src = sources[f]
            if reopen and isinstance(src, FileSource):
                try:
                    src = self.source(urls[f])
                except OSError as e:
                    self._raise_failed(urls[f], e)
            if isinstance(src, FsspecSource):
                plan = remote.setdefault(id(src.fs), (src.fs, [], [], [], []))
                plan[1].extend(range(i, j))
                plan[2].extend([src.path] * (j - i))
                plan[3].extend(starts[i:j])
                plan[4].extend(ends[i:j])
            elif isinstance(src, ObstoreSource):
                across.append((i, j, urls[f]))
                jobs.append((src, starts[i:j], ends[i:j]))
            else:
                try:
                    if isinstance(src, FileSource):
                        blobs = src.read_many(starts[i:j], ends[i:j])
                    else:
                        blobs = [src.read(a, b) for a, b in zip(starts[i:j], ends[i:j])]
                except OSError as e:
                    self._raise_failed(urls[f], e)
                out[i:j] = blobs  # bytes: no GC-tracked object per read
            i = j
        if jobs:

            def failed(k: int, e: BaseException) -> NoReturn:
                self._raise_failed(across[k][2], e)

            for (a, b, _), views in zip(across, read_across(jobs, failed)):
                out[a:b] = views
        for fs, at, paths, r_starts, r_ends in remote.values():
            try:
                # Keywords and lists, never positional ranges (s3fs's cat_file takes
                # a version id second); on_error="return" tells which file failed.
                started = time.perf_counter()
                blobs = retried(
                    fs, "cat_ranges", urls[files[at[0]]], paths, r_starts, r_ends, on_error="return"
                )
            except Exception as e:
                if not is_backend_error(e):
                    raise
                self._raise_failed(urls[files[at[0]]], e)
            for k, blob in zip(at, blobs):
                if isinstance(blob, BaseException):
                    self._raise_failed(urls[files[k]], blob)
                out[k] = memoryview(bytes(blob))
            _measured(fs, blobs, started)
        return out, merged

    def _read_remote(
        self,
        fs: Any,
        plan: list[tuple[str, list[int], list[Coalesced], str]],
        requests: Sequence[tuple[str, ByteRange]],
        out: list[memoryview | None],
    ) -> None:
        paths = [path for _, _, merged, path in plan for _ in merged]
        flat = [m.range for _, _, merged, _ in plan for m in merged]
        try:
            # Keywords and lists, never positional ranges: s3fs's cat_file takes a
            # version id second. on_error="return" tells which file failed.
            started = time.perf_counter()
            blobs = retried(
                fs,
                "cat_ranges",
                plan[0][0],
                paths,
                [r.start for r in flat],
                [r.end for r in flat],
                on_error="return",
            )
        except Exception as e:
            if not is_backend_error(e):
                raise
            # The whole call failed (no credentials, no endpoint): named by its first file.
            self._raise_failed(plan[0][0], e)
        if not any(isinstance(b, BaseException) for b in blobs):
            _measured(fs, blobs, started)
        at = 0
        for url, idxs, merged, _ in plan:
            mine = blobs[at : at + len(merged)]
            at += len(merged)
            for blob in mine:
                if isinstance(blob, BaseException):
                    self._raise_failed(url, blob)
            ranges = [requests[i][1] for i in idxs]
            views = split(merged, [bytes(b) for b in mine], ranges)
            if sum(map(len, mine)) > 2 * sum(r.length for r in ranges):
                # Mostly gaps read through (remote_max_gap): copy the wanted bytes
                # out, so that what the caller keeps does not hold the gaps.
                views = [memoryview(bytes(v)) for v in views]
            for i, view in zip(idxs, views):
                out[i] = view

    def _gap(self, src: RangeSource, max_gap: int | None) -> int:
        """The gap ``src``'s ranges are merged across: ``max_gap``, else LOCAL_MAX_GAP for a local
        file, else ``remote_max_gap``, else the one derived for its store."""
        if max_gap is not None:
            return max_gap
        if not _remote(src):
            return LOCAL_MAX_GAP
        if self.remote_max_gap is not None:
            return self.remote_max_gap
        return _gap.gap_for(src.store_key, src.in_flight)  # type: ignore[attr-defined]

    def _raise_failed(self, url: str, e: BaseException) -> NoReturn:
        """Raise ``e`` as shardcat's error naming the file; the file is reopened on next use."""
        src = self._open.get(url)
        self.forget(url)
        error = translate(e, url, fs=src.fs if isinstance(src, FsspecSource) else None)
        if error is e:
            raise error
        raise error from e

    def forget(self, url: str) -> None:
        """Close and drop the source of ``url``, if it is open (the next read reopens it)."""
        self._fds.pop(url, None)
        src = self._open.pop(url, None)
        if src is not None:
            _close_quietly(src)
            _opened.add(-1)

    def close(self) -> None:
        """Close every source this cache opened (idempotent; the cache stays usable)."""
        self._fds.clear()
        closed = len(self._open)
        while self._open:
            _, src = self._open.popitem()
            _close_quietly(src)
        _opened.add(-closed)

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, url: object) -> bool:
        return url in self._open

    def __enter__(self) -> SourceCache:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_NO_CAP = 1 << 62  # no cap: an explicit gap is used as it is


def _remote(src: RangeSource) -> bool:
    return isinstance(src, _REMOTE)


def _budget(groups: list[list[ByteRange]]) -> int:
    """:func:`.gap.budget_gap` of ranges given per file, in any order."""
    import numpy as np

    if not groups:
        return _NO_CAP
    file = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
    start = np.fromiter((r.start for g in groups for r in g), dtype=np.int64, count=len(file))
    end = np.fromiter((r.end for g in groups for r in g), dtype=np.int64, count=len(file))
    order = np.lexsort((start, file))
    return _gap.budget_gap(file[order], start[order], end[order])


def _measured(fs: Any, blobs: Sequence[Any], started: float) -> None:
    """Report one ``cat_ranges`` call of ``fs`` that began at ``started`` to its store's estimate."""
    nbytes = sum(len(b) for b in blobs if not isinstance(b, BaseException))
    _gap.record(_gap.fsspec_store_key(fs), len(blobs), nbytes, started, in_flight(fs))


def _close_quietly(src: RangeSource) -> None:
    # Closing can fail (a network filesystem): there is nothing left to release then.
    with contextlib.suppress(OSError):
        src.close()


def fetch_ranges(
    requests: Sequence[tuple[str, ByteRange]],
    storage_options: StorageOptions | None = None,
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    max_span: int = DEFAULT_MAX_SPAN,
) -> list[memoryview]:
    """The bytes of each ``(url, range)``, in input order, through a cache of its own.

    For one-off batches; code that reads repeatedly keeps a :class:`SourceCache`
    (files stay open between batches). Ranges of a file are merged across
    gaps of up to ``max_gap`` bytes, local and remote alike.

    Raises
    ------
    ShardNotFoundError, StorageError
        As :meth:`SourceCache.read_batch`.
    """
    with SourceCache(storage_options) as cache:
        return cache.read_batch(requests, max_gap=max_gap, max_span=max_span)
