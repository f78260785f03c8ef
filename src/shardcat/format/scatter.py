"""Reads laid out in pieces, and CRCs of many spans: the reference of the compiled ones.

A packed batch made straight from a shard's bytes (:mod:`shardcat.readers.direct`)
reads a run of whole records so that each payload lands at its column's
place in shared memory and everything else (record heads, padding, other
entries) in a rest area, then checks every head and payload in one call.
The compiled codec (``ccodec/scatter.c``: ``scatter_read``, ``scatter_copy``,
``crc32c_spans``) does each in one C call; these are the pure-Python
references, chosen with ``SHARDCAT_RECORD_CODEC=python``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .._pread import pread_full
from .checksums import package_crc32c

if TYPE_CHECKING:
    import numpy as np

__all__ = ["crc32c_spans", "gather_copy", "scatter_copy", "scatter_read", "scatter_read_runs"]


def _pieces(positions: np.ndarray, lengths: np.ndarray, size: int) -> list[tuple[int, int]]:
    if positions.shape != lengths.shape:
        raise ValueError("scatter: positions and lengths must be int64 arrays of one length")
    pieces = list(zip(positions.ravel().tolist(), lengths.ravel().tolist()))
    for i, (p, n) in enumerate(pieces):
        if p < 0 or n < 0 or p + n > size:
            raise ValueError(f"scatter: piece {i} ({n} bytes at {p}) is outside the destination")
    return pieces


def scatter_copy(
    src: bytes | memoryview, dest: np.ndarray, positions: np.ndarray, lengths: np.ndarray
) -> None:
    """``src`` in order, piece ``i`` (``lengths[i]`` bytes) copied to ``dest[positions[i]:]``."""
    view = dest.data.cast("B")
    pieces = _pieces(positions, lengths, len(view))
    if sum(n for _, n in pieces) != len(src):
        raise ValueError(
            f"scatter_copy: the pieces hold {int(lengths.sum())} bytes, the source {len(src)}"
        )
    at = 0
    for p, n in pieces:
        view[p : p + n] = src[at : at + n]
        at += n


def scatter_read(
    fd: int, offset: int, dest: np.ndarray, positions: np.ndarray, lengths: np.ndarray
) -> bool:
    """The file's bytes from ``offset``, piece ``i`` read into ``dest[positions[i]:]``; False if it ends first."""
    if fd < 0 or offset < 0:
        raise ValueError("scatter_read: fd and offset must be >= 0")
    view = dest.data.cast("B")
    pieces = _pieces(positions, lengths, len(view))
    buffers = [view[p : p + n] for p, n in pieces if n]
    total = sum(len(b) for b in buffers)
    if hasattr(os, "preadv") and len(buffers) <= 1024 and os.preadv(fd, buffers, offset) == total:
        return True
    at = offset
    for b in buffers:  # short (or no preadv): piece by piece
        data = pread_full(fd, len(b), at)
        if len(data) != len(b):
            return False
        b[:] = data
        at += len(b)
    return True


def scatter_read_runs(
    fds: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray,
    dest: np.ndarray,
    positions: np.ndarray,
    lengths: np.ndarray,
) -> int:
    """Run ``k``: file ``fds[k]`` from ``offsets[k]`` into the next ``counts[k]`` pieces; -1, or the first run cut short."""
    if not fds.shape == offsets.shape == counts.shape:
        raise ValueError(
            "scatter_read_runs: fds, offsets and counts must be int64 arrays of one length"
        )
    positions, lengths = positions.ravel(), lengths.ravel()
    _pieces(positions, lengths, dest.nbytes)
    if int(counts.sum()) != len(positions) or (counts < 0).any():
        raise ValueError(
            f"scatter_read_runs: the runs take {int(counts.sum())} pieces, "
            f"{len(positions)} were given"
        )
    at = 0
    for k, (fd, offset, n) in enumerate(zip(fds.tolist(), offsets.tolist(), counts.tolist())):
        if not scatter_read(fd, offset, dest, positions[at : at + n], lengths[at : at + n]):
            return k
        at += n
    return -1


def gather_copy(
    sources: Sequence[Any],
    which: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray,
    dest: np.ndarray,
    positions: np.ndarray,
    lengths: np.ndarray,
) -> None:
    """Run ``k``: ``sources[which[k]]`` from ``offsets[k]`` into the next ``counts[k]`` pieces."""
    if not which.shape == offsets.shape == counts.shape:
        raise ValueError(
            "gather_copy: which, offsets and counts must be int64 arrays of one length"
        )
    positions, lengths = positions.ravel(), lengths.ravel()
    _pieces(positions, lengths, dest.nbytes)
    if int(counts.sum()) != len(positions) or (counts < 0).any():
        raise ValueError(
            f"gather_copy: the runs take {int(counts.sum())} pieces, {len(positions)} were given"
        )
    at = 0
    for k, (w, offset, n) in enumerate(zip(which.tolist(), offsets.tolist(), counts.tolist())):
        if not 0 <= w < len(sources):
            raise ValueError(f"gather_copy: run {k} (source {w}) is invalid")
        src = memoryview(sources[w]).cast("B")
        want = int(lengths[at : at + n].sum())
        if offset < 0 or offset + want > len(src):
            raise ValueError(
                f"gather_copy: run {k} ({want} bytes at {offset}) is outside source {w} "
                f"({len(src)} bytes)"
            )
        scatter_copy(
            src[offset : offset + want], dest, positions[at : at + n], lengths[at : at + n]
        )
        at += n


def crc32c_spans(
    buf: bytes | memoryview | np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> bytes:
    """The CRC32C of each span ``buf[starts[i] : starts[i] + lengths[i]]``, as little-endian uint32s."""
    import numpy as np

    view = (buf.data if isinstance(buf, np.ndarray) else memoryview(buf)).cast("B")
    pieces = _pieces(starts, lengths, len(view))
    crc32c = package_crc32c()
    crcs = [crc32c(view[p : p + n]) for p, n in pieces]
    return np.asarray(crcs, dtype="<u4").tobytes()
