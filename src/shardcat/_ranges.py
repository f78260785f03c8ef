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

from ._types import ByteRange

__all__ = ["DEFAULT_MAX_GAP", "DEFAULT_MAX_SPAN", "LOCAL_MAX_GAP", "Coalesced", "coalesce", "split"]

DEFAULT_MAX_GAP = 64 * 1024
"""Read through gaps up to this size rather than issue another request."""
LOCAL_MAX_GAP = 8 * 1024
"""Local files: another ``pread`` costs microseconds, reading through a gap costs bandwidth."""
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
    coalesced: Sequence[Coalesced], blobs: Sequence[bytes], ranges: Sequence[ByteRange]
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
