"""Positional reads that return every byte asked for (no fsspec; used by format and catalog)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


__all__ = ["PREAD_MAX", "packed_runs", "pread_file", "pread_full", "read_packed", "read_whole"]

PREAD_MAX = 0x7FFFF000
"""Linux returns at most this many bytes from one read call (2 GiB − 4 KiB), whatever was asked."""


def pread_full(fd: int, length: int, offset: int) -> bytes:
    """``length`` bytes of ``fd`` from ``offset``, or fewer only where the file ends.

    One ``os.pread`` is the common case. A short read (the kernel's per-call
    cap, a signal, a network filesystem) is continued, so a short result
    always means end of file — never "the file changed".
    """
    data = os.pread(fd, min(length, PREAD_MAX), offset)
    if len(data) == length or not data:
        return data
    parts = [data]
    got = len(data)
    while got < length:
        more = os.pread(fd, min(length - got, PREAD_MAX), offset + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def pread_file(path: str, length: int, offset: int) -> bytes:
    """Up to ``length`` bytes of the file ``path`` from ``offset``: open, one ``pread``, close.

    A short read is the file's end (a read that asks one byte past where a
    file should end learns whether it grew); reads above :data:`PREAD_MAX`
    are continued (:func:`pread_full`).

    Raises
    ------
    OSError
        As ``os.open`` or ``os.pread`` raise it.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        if length > PREAD_MAX:
            return pread_full(fd, length, offset)
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def not_a_regular_file(path: str) -> OSError:
    """The error for a path that is not a regular file: shardcat packs and indexes files only."""
    return OSError(
        errno.EINVAL,
        "not a regular file (a folder, FIFO, socket or device): shardcat reads regular files "
        "only; move it out of the folder",
        path,
    )


def read_whole(path: str) -> bytes:
    """A whole file's bytes: ``os.open``, one ``fstat``, one read of its size and one more byte.

    Half the cost of ``open(path, "rb").read()`` per small file (no file
    object, one stat instead of two, no second read to find the end): what
    indexing and reading folders of small files spend most on. A file that
    grows while it is read is read to its end.

    Raises
    ------
    OSError
        As ``os.open`` or ``os.read`` raise it (``FileNotFoundError``, ``IsADirectoryError``...).
    """
    # O_NONBLOCK: opening a FIFO for reading would wait for a writer, for ever.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_a_regular_file(path)
        size = st.st_size
        data = os.read(fd, min(size + 1, PREAD_MAX))
        if len(data) <= size and len(data) < PREAD_MAX:
            return data  # the common case: a regular file's short read is its end
        parts = [data]
        while more := os.read(fd, PREAD_MAX):
            parts.append(more)
        return b"".join(parts)
    finally:
        os.close(fd)


def packed_runs(table: np.ndarray, max_gap: int) -> list[tuple[int, int, int, int, int]]:
    """The reads :func:`read_packed` makes: ``(shard, start, end, first, stop)`` each.

    A read covers table rows ``first`` to ``stop - 1``: records of one file,
    each starting at most ``max_gap`` bytes after the end of the one before
    (never before it: overlapping records are read again). The compiled
    ``read_packed`` makes the same reads, one ``preadv`` each, and splits a
    read of more than 1,022 pieces (records and gaps) or 1 GiB in two.
    """
    rows = table[["shard", "length", "offset"]].tolist()
    runs: list[tuple[int, int, int, int, int]] = []
    t = 0
    while t < len(rows):
        shard, length, start = rows[t]
        first, end = t, start + length
        t += 1
        while t < len(rows):
            s, n, offset = rows[t]
            if s != shard or offset < end or offset - end > max_gap:
                break
            end = offset + n
            t += 1
        runs.append((shard, start, end, first, t))
    return runs


def read_packed(
    fds: Sequence[int],
    table: np.ndarray,
    max_gap: int,
    group_bytes: int,
    pool: list[bytes] | None = None,
    pool_max: int = 0,
) -> list[bytes] | None:
    """Every record of a batch table, read into buffers that hold the records alone.

    ``table`` (:data:`~shardcat.format.spec.BATCH_ROW_DTYPE`) is sorted by
    ``(shard, offset)``; ``fds[shard]`` is the open file of each row. The
    reads are :func:`packed_runs` (records at most ``max_gap`` bytes apart
    share one). The records go back to back, in table order, into buffers
    that take records until the next would pass ``group_bytes`` (a larger
    record gets one of its own); each row's ``blob`` and ``at`` are set to
    where its record is. Returns the buffers, or None if a file ends inside
    a record (the caller takes a path that reports it).

    This is the reference of the compiled ``_ccodec.read_packed``, which
    returns the same buffers and table but reads each run with one
    ``preadv`` straight into the buffers (the gaps into scratch space).
    There, ``pool`` (a list the caller keeps, of at most ``pool_max``
    buffers) lends buffers no one else refers to any more, so a batch does
    not fault in new memory, and the groups come back as memoryviews of
    them; here, where bytes cannot be written, the pool is left alone.

    Raises
    ------
    ValueError
        A row names no descriptor, or the table is not sorted.
    OSError
        A read failed.
    """
    import numpy as np

    if not 0 <= max_gap <= 1 << 20 or group_bytes < 1:
        raise ValueError("read_packed: max_gap must be in [0, 1 MiB], group_bytes >= 1")
    if pool is not None and type(pool) is not list:
        raise TypeError("read_packed: pool must be a list or None")
    rows = table[["shard", "length", "offset"]].tolist()
    for t, (shard, _, offset) in enumerate(rows):
        if shard >= len(fds) or (t and (shard, offset) < rows[t - 1][::2]):
            raise ValueError(
                f"read_packed: table row {t} is out of range or out of (shard, offset) order"
            )
    pieces: list[memoryview] = []
    for shard, start, end, first, stop in packed_runs(table, max_gap):
        data = memoryview(pread_full(fds[shard], end - start, start))
        for _, length, offset in rows[first:stop]:
            piece = data[offset - start : offset - start + length]
            if len(piece) != length:
                return None
            pieces.append(piece)
    buffers: list[bytes] = []
    parts: list[memoryview] = []
    blob = np.zeros(len(rows), dtype=np.uint32)
    at = np.zeros(len(rows), dtype=np.uint64)
    size = 0
    for t, piece in enumerate(pieces):
        if size and size + len(piece) > group_bytes:
            buffers.append(b"".join(parts))
            parts, size = [], 0
        blob[t], at[t] = len(buffers), size
        parts.append(piece)
        size += len(piece)
    if rows:
        buffers.append(b"".join(parts))
    table["blob"], table["at"] = blob, at
    return buffers
