"""The quick verify's comparison: each shard's ends and its rows' count and span, against the catalog.

``verify(quick=True)`` is for catalogs whose full verify (every record read
back, every CRC, every footer compared row by row) takes hours: it reads no
record. The read layer reads each shard's size and, for a native shard, its
header and trailer (:mod:`shardcat.reading.ends`); here one aggregate over the
dataset's rows, shard by shard in the primary key's order, gives each shard's
row count and the span its rows cover, and both are compared with the shard's
catalog row and its trailer:

- the file's size, its ``file_id`` and header CRC, and the trailer's record and
  entry counts and its data and footer CRCs, against the ``shards`` row, and the
  header's CRC against the trailer's record of it (``shard-mismatch``: the file
  was replaced or rewritten);
- the rows of the shard against its record count (``row-count``);
- every row inside the file's records: after the header and before the footer
  (a file indexed in place: before its end; ``row-out-of-range``).

What it cannot see, the full verify does: a changed payload byte, a row whose
offset, length, key or spans differ from the footer's while the count stays.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..format.spec import HEADER_SIZE
from .kinds import Ends, EndsCheck
from .maintenance import shard_mismatch
from .models import Shard
from .results import CatalogReport, Problem

__all__ = ["compare_ends"]

_ROWS = text(
    "SELECT shard_id, count(*), min(byte_offset), max(byte_offset + byte_length) FROM records "
    "WHERE shard_id IN (SELECT id FROM shards WHERE dataset_id = :dataset) GROUP BY shard_id"
)
"""Each of a dataset's shards' rows: how many, and the span they cover (a range of the
primary key per shard, not a walk of the lookup index)."""

RowSpan = tuple[int, int, int]
"""A shard's rows: how many, the first offset, the end of the last record."""


def compare_ends(
    session: Session, dataset: str, dataset_id: int, shards: list[Shard], checks: list[EndsCheck]
) -> CatalogReport:
    """See :meth:`Catalog.verify` with ``quick=True``: every problem the ends and counts show."""
    rows: dict[int, RowSpan] = {
        int(shard): (int(n), int(first), int(end))
        for shard, n, first, end in session.execute(_ROWS, {"dataset": dataset_id})
    }
    problems: list[Problem] = []
    records = 0
    read = 0
    for shard, (ends, found) in zip(shards, checks):
        problems.extend(found)
        span = rows.get(shard.id, (0, 0, 0))
        records += span[0]
        if ends is not None:
            read += ends.bytes_read
        problems.extend(_compare(shard, ends, span, file_read=not found))
    return CatalogReport(dataset, len(shards), records, read, problems, quick=True)


def _compare(shard: Shard, ends: Ends | None, span: RowSpan, *, file_read: bool) -> list[Problem]:
    url = shard.url
    problems: list[Problem] = []
    count, first, end = span
    if count != shard.record_count:
        problems.append(
            Problem(
                url,
                "row-count",
                f"the catalog has {count} row(s) for the shard's {shard.record_count} "
                "record(s); reindex the shard (its rows are made again from its footer)",
            )
        )
    if ends is None or not file_read:
        return problems  # not read (its kind), or its read problem is reported already
    said = _what_the_file_says(ends)
    diffs = [
        f"{name} (catalog {getattr(shard, name)!r}, file {value!r})"
        for name, value in said.items()
        if getattr(shard, name) != value
    ]
    if ends.header is not None and ends.trailer is not None:
        header, trailer = int(ends.header.crc), int(ends.trailer.header_crc)
        if header != trailer:  # the two ends are not of one file, whatever the row says
            diffs.append(f"header_crc (header {header!r}, trailer {trailer!r})")
    if diffs:
        problems.append(shard_mismatch(url, diffs))
    # Where records may lie: between a native shard's header and its footer, inside a file
    # indexed in place.
    low, high = (HEADER_SIZE, ends.trailer.footer_offset) if ends.trailer else (0, ends.size)
    if count and (first < low or end > high):
        problems.append(
            Problem(
                url,
                "row-out-of-range",
                f"the shard's rows span bytes {first}-{end}, outside its records' {low}-{high}; "
                "reindex the shard",
            )
        )
    return problems


def _what_the_file_says(ends: Ends) -> dict[str, object]:
    said: dict[str, object] = {"size_bytes": ends.size}
    if ends.header is not None:
        said.update(file_id=ends.header.file_id.hex(), header_crc=int(ends.header.crc))
    if ends.trailer is not None:
        t = ends.trailer
        said.update(
            record_count=int(t.record_count),
            entry_count=int(t.entry_count),
            data_crc=int(t.data_crc),
            footer_crc=int(t.footer_crc),
        )
    return said
