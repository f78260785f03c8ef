"""Merging nearby byte ranges into fewer, larger reads (dependency-free).

Kept instead of ``fsspec.utils.merge_offset_ranges`` because the format
layer (``ShardReader.take``) merges ranges too and may not import fsspec
(an import-linter contract), and because a caller needs to know which
inputs each merged read serves, which fsspec's function does not return.
Speed is not the reason: ``benchmarks/bench_ranges.py`` (fsspec's function
plus a bisect per input to find each input's read, vs ``coalesce``) measured
fsspec / shardcat = 0.77 (100 ranges), 0.35 (1,000) and 0.95 (10,000) on a
2-core VM under heavy load (2026-11-23): not slower, often faster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._types import ByteRange

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "DEFAULT_MAX_GAP",
    "DEFAULT_MAX_SPAN",
    "LOCAL_MAX_GAP",
    "Coalesced",
    "MergedReads",
    "coalesce",
    "furthest_ends",
    "merge_sorted",
    "split",
]

DEFAULT_MAX_GAP = 64 * 1024
"""Read through gaps up to this size rather than issue another request."""
LOCAL_MAX_GAP = 8 * 1024
"""Local files: another ``pread`` costs microseconds, reading through a gap costs bandwidth.

(Object stores' gap is derived from their measured latency and bandwidth:
``shardcat.storage.gap``.)"""
DEFAULT_MAX_SPAN = 16 * 1024 * 1024
"""Never merge into one request larger than this."""


@dataclass(frozen=True, slots=True)
class Coalesced:
    """One merged read and the original ranges it serves."""

    range: ByteRange
    members: tuple[int, ...]
    """Indices into the input sequence of the ranges inside ``range``."""


def coalesce(
    ranges: Sequence[ByteRange], max_gap: int = DEFAULT_MAX_GAP, max_span: int = DEFAULT_MAX_SPAN
) -> list[Coalesced]:
    """Merge ranges whose gaps are at most ``max_gap``, keeping merged reads under ``max_span``.

    Input order does not matter; each input index appears in exactly one
    output. Overlapping and duplicate ranges are served by the same read.
    """
    order = sorted(range(len(ranges)), key=lambda i: (ranges[i].start, ranges[i].end))
    out: list[Coalesced] = []
    start = end = -1
    members: list[int] = []
    for i in order:
        r = ranges[i]
        if members and r.start - end <= max_gap and max(end, r.end) - start <= max_span:
            end = max(end, r.end)
            members.append(i)
            continue
        if members:
            out.append(Coalesced(ByteRange(start, end), tuple(members)))
        start, end, members = r.start, r.end, [i]
    if members:
        out.append(Coalesced(ByteRange(start, end), tuple(members)))
    return out


def split(
    coalesced: Sequence[Coalesced],
    blobs: Sequence[bytes | memoryview],
    ranges: Sequence[ByteRange],
) -> list[memoryview]:
    """Cut the merged reads back into one view per original range, in input order."""
    out: list[memoryview | None] = [None] * len(ranges)
    for c, blob in zip(coalesced, blobs):
        view = memoryview(blob)
        base = c.range.start
        for i in c.members:
            r = ranges[i]
            piece = view[r.start - base : r.end - base]
            out[i] = piece
    return [v if v is not None else memoryview(b"") for v in out]


@dataclass(frozen=True, slots=True)
class MergedReads:
    """The reads that serve ranges sorted by (file, start), as arrays."""

    read: np.ndarray
    """int64, per input range: which read serves it."""
    file: np.ndarray
    """int64, per read: its file."""
    start: np.ndarray
    """int64, per read: its first byte."""
    end: np.ndarray
    """int64, per read: one past its last byte."""

    def __len__(self) -> int:
        return len(self.start)


def furthest_ends(file: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per range (sorted by file): the furthest end so far in its file (a range may end
    inside the one before it), where the next range's gap is measured from."""
    import numpy as np

    n = len(end)
    reach = np.empty(n, dtype=np.int64)
    bounds = np.flatnonzero(np.diff(file)) + 1
    for a, b in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [n]))):
        np.maximum.accumulate(end[a:b], out=reach[a:b])
    return reach


def merge_sorted(
    file: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    max_gap: np.ndarray,
    max_span: int = DEFAULT_MAX_SPAN,
) -> MergedReads:
    """:func:`coalesce` for many ranges at once, already sorted by ``(file, start)``.

    One vectorised pass over all files: a range joins the read before it when
    it is in the same file and starts at most ``max_gap[file]`` bytes after
    the furthest end so far; a read is split again where it would pass
    ``max_span`` (only such reads are walked in Python). Each input index is
    served by exactly one read; overlapping and duplicate ranges share one.
    """
    import numpy as np

    n = len(start)
    file = np.asarray(file, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    if n == 0:
        empty = np.zeros(0, dtype=np.int64)
        return MergedReads(empty, empty, empty, empty)
    if np.any(file[1:] < file[:-1]) or np.any((file[1:] == file[:-1]) & (start[1:] < start[:-1])):
        raise ValueError("merge_sorted: ranges must be sorted by (file, start)")
    reach = furthest_ends(file, end)
    gaps = np.asarray(max_gap, dtype=np.int64)[file]
    new = np.ones(n, dtype=bool)
    new[1:] = (file[1:] != file[:-1]) | (start[1:] - reach[:-1] > gaps[1:])
    firsts = np.flatnonzero(new)
    r_end = np.maximum.reduceat(end, firsts)
    for i in np.flatnonzero(r_end - start[firsts] > max_span):
        # Rare (max_span is many records long): walk this read and cut it.
        a = int(firsts[i])
        b = int(firsts[i + 1]) if i + 1 < len(firsts) else n
        lo, hi = int(start[a]), int(end[a])
        for j in range(a + 1, b):
            if max(hi, int(end[j])) - lo > max_span:
                new[j] = True
                lo, hi = int(start[j]), int(end[j])
            else:
                hi = max(hi, int(end[j]))
    firsts = np.flatnonzero(new)
    read = np.cumsum(new, dtype=np.int64) - 1
    return MergedReads(read, file[firsts], start[firsts], np.maximum.reduceat(end, firsts))
