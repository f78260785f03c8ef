"""A tar as iTar (TARIDX's reference implementation) sees it: every header, named by its stem.

iTar walks a tar header by header and gives each 512-byte header a row,
whatever it is (a file, a directory, a pax or GNU long-name header, a file
without an extension), until a zero block. A row's stem is the part of the
header's 100-byte name field after its last ``/``, up to the first ``.``;
the extension is the rest, lower-cased. Folders are not part of the stem, so
``train/0007.jpg`` and ``val/0007.jpg`` share the stem ``0007``, where
WebDataset (and shardcat's catalog) keys them ``train/0007`` and ``val/0007``.

A scan keeps only the members that are sample entries. Rebuilding iTar's
view from a scan (or from catalog rows) therefore needs the tar only where
the entries do not tile it: a gap between one entry's padded end and the
next entry's header holds headers the scan skipped, and is read from the
tar, header by header, together with the header of the entry after it
(whose name field may differ from its key after a pax or long-name header).
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..._types import ByteRange, RangeSource
from ..sources import FileSource
from .errors import TaridxError
from .headers import parse_number
from .info import TarShardInfo
from .spec import BLOCK, SIZE_AT, SIZE_LEN, blocks

__all__ = ["TarHeaders", "header_gaps", "itar_split", "tar_headers"]

_PREFETCH = 64 << 10
"""Bytes read at once from the start of a gap (most gaps are a pax header and its payload)."""
_MERGE_GAP = 256 << 10
"""Gaps closer than this are read in one request (a request costs more than these bytes)."""
_MAX_READ = 8 << 20
_ZERO_BLOCK = bytes(BLOCK)


def itar_split(name: str) -> tuple[str, str]:
    """``(stem, extension)`` of a member name by iTar's rule.

    The stem is the name after its last ``/`` up to the first ``.`` of that
    part; the extension is what follows that dot, lower-cased (``""`` when
    there is no dot): ``a/b.c/x0001.SEG.png`` -> ``("x0001", "seg.png")``.
    """
    base = name[name.rfind("/") + 1 :]
    stem, dot, ext = base.partition(".")
    return stem, ext.lower() if dot else ""


@dataclass(frozen=True, slots=True)
class TarHeaders:
    """Every header of one tar that iTar gives a row, in tar order."""

    offsets: list[int]
    """The header's first byte."""
    sizes: list[int]
    """Its size field (payload bytes)."""
    names: list[str]
    """Its name field, as iTar reads it (or the entry's ``key.name`` where the two agree)."""
    entry: list[int]
    """Position of the header among the scan's entries, -1 for a header the scan skipped."""

    def __len__(self) -> int:
        return len(self.offsets)


def header_gaps(info: TarShardInfo) -> list[tuple[int, int]]:
    """Byte ranges ``[start, stop)`` of ``info``'s tar that hold headers its entries do not.

    ``stop`` is the next entry's header offset, or the end-of-archive offset
    for the tail (``info.end_offset`` 0 means unknown: the tail runs to the
    file's size, and the walk stops at the zero block).
    """
    offsets = (info.payload_offsets() - BLOCK).tolist() if len(info.entries) else []
    sizes = info.entries["size"].tolist()
    gaps: list[tuple[int, int]] = []
    pos = 0
    for off, size in zip(offsets, sizes):
        if off != pos:
            gaps.append((pos, off))
        pos = off + BLOCK + blocks(size)
    end = info.end_offset if info.end_offset >= pos and info.end_offset else info.size
    if end > pos:
        gaps.append((pos, end))
    return gaps


def tar_headers(info: TarShardInfo, source: RangeSource | None = None) -> TarHeaders:
    """iTar's headers of a scanned tar: the scan's entries plus the headers between them.

    ``source`` is read only where :func:`header_gaps` finds a gap (by
    default ``info.path``, when that is a local file).

    Raises
    ------
    TaridxError
        There is a gap and no ``source``; or the tar no longer has a header
        where its scan put an entry (it changed since it was scanned).
    """
    counts = info.records["entry_count"].tolist()
    spec_names = [s.name for s in info.specs]
    keys = [k for k, c in zip(info.keys, counts) for _ in range(c)]
    entry_names = [f"{k}.{spec_names[s]}" for k, s in zip(keys, info.entries["spec"].tolist())]
    offsets = (info.payload_offsets() - BLOCK).tolist() if len(info.entries) else []
    sizes = info.entries["size"].tolist()
    gaps = header_gaps(info)
    if not gaps:
        return TarHeaders(offsets, sizes, entry_names, list(range(len(offsets))))
    if source is None and os.path.isfile(info.path):
        with contextlib.closing(FileSource(info.path)) as local:
            return tar_headers(info, local)
    if source is None:
        raise TaridxError(
            f"the tar has headers outside its samples ({len(gaps)} gap(s), the first at byte "
            f"{gaps[0][0]}): they are TARIDX rows too, so the tar must be read",
            path=info.path,
            offset=gaps[0][0],
        )
    entry_at = {off: i for i, off in enumerate(offsets)}
    # Each gap is read with the header after it (the entry's own name field), and
    # nearby gaps in one request: a pax header before every member is common.
    end = info.size or gaps[-1][1] + BLOCK
    wanted = [ByteRange(a, max(a, min(b + BLOCK, a + _PREFETCH, end))) for a, b in gaps]
    ranges = _merged(wanted)
    reader = _Reader(source, ranges, source.read_ranges(ranges))
    out = TarHeaders([], [], [], [])
    pos = 0
    for a, b in gaps:
        _copy_entries(out, offsets, sizes, entry_names, pos, a)
        pos = _walk(out, reader, a, b, entry_at, info)
    _copy_entries(out, offsets, sizes, entry_names, pos, None)
    return out


def _copy_entries(
    out: TarHeaders,
    offsets: Sequence[int],
    sizes: Sequence[int],
    names: Sequence[str],
    start: int,
    stop: int | None,
) -> None:
    """Append the entries whose header lies in ``[start, stop)`` (their names are their keys')."""
    # Entries are in offset order, so the ones in range are one slice.
    lo = bisect.bisect_left(offsets, start)
    hi = len(offsets) if stop is None else bisect.bisect_left(offsets, stop)
    for i in range(lo, hi):
        out.offsets.append(offsets[i])
        out.sizes.append(sizes[i])
        out.names.append(names[i])
        out.entry.append(i)


def _walk(
    out: TarHeaders,
    reader: _Reader,
    start: int,
    stop: int,
    entry_at: dict[int, int],
    info: TarShardInfo,
) -> int:
    """Append the headers from ``start`` up to and including the entry at ``stop``; return where the walk ended."""
    off = start
    while off <= stop:
        header = reader.read(off)
        if len(header) < BLOCK or header == _ZERO_BLOCK:
            if stop in entry_at:  # iTar stops at a zero block, the scan found more after it
                raise TaridxError(
                    f"the tar ends at byte {off}, before the entry the scan found at {stop}: "
                    "the tar changed since it was indexed (re-index it)",
                    path=info.path,
                    offset=off,
                )
            return off
        size = _size(header, off, info)
        name = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        out.offsets.append(off)
        out.sizes.append(size)
        out.names.append(name)
        out.entry.append(entry_at.get(off, -1))
        next_off = off + BLOCK + blocks(size)
        if off == stop or (next_off > stop and stop in entry_at):
            if off != stop:
                raise TaridxError(
                    f"the header at byte {off} runs past byte {stop}, where the scan found an "
                    "entry: the tar changed since it was indexed (re-index it)",
                    path=info.path,
                    offset=off,
                )
            return next_off
        off = next_off
    return off


def _size(header: bytes, off: int, info: TarShardInfo) -> int:
    field = header[SIZE_AT : SIZE_AT + SIZE_LEN]
    try:
        return int(field.split(b"\0", 1)[0] or b"0", 8)  # iTar's own reading, and fast
    except ValueError:
        pass
    try:
        return parse_number(field)  # GNU base-256: iTar cannot read it, shardcat can
    except ValueError as e:
        raise TaridxError(
            f"the tar header at byte {off} has no readable size ({e})",
            path=info.path,
            offset=off + SIZE_AT,
        ) from e


def _merged(ranges: list[ByteRange]) -> list[ByteRange]:
    """Sorted ranges, those less than ``_MERGE_GAP`` apart read as one (up to ``_MAX_READ``)."""
    out: list[ByteRange] = []
    for r in ranges:
        last = out[-1] if out else None
        if (
            last is not None
            and r.start - last.end <= _MERGE_GAP
            and r.end - last.start <= _MAX_READ
        ):
            out[-1] = ByteRange(last.start, max(last.end, r.end))
        else:
            out.append(r)
    return out


class _Reader:
    """512-byte reads served from the prefetched buffers, else from the source."""

    def __init__(self, source: RangeSource, ranges: list[ByteRange], data: list[bytes]) -> None:
        self._source = source
        self._starts = [r.start for r in ranges]
        self._data = data

    def read(self, off: int) -> bytes:
        i = bisect.bisect_right(self._starts, off) - 1
        if i >= 0:
            start, data = self._starts[i], self._data[i]
            if off + BLOCK <= start + len(data):
                return data[off - start : off - start + BLOCK]
        return self._source.read(off, off + BLOCK)
