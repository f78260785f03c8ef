"""Positional reads that return every byte asked for (dependency-free; used by format and catalog)."""

from __future__ import annotations

import os

__all__ = ["PREAD_MAX", "pread_full"]

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
