"""Declared fields' values of one registered shard, of any kind, from a JSON entry of each record.

``shardcat.write(fields=)`` stores the values as it writes; everything that
registers shards already written (``index_tar(fields=)``, ``taridx
import``) or fills fields afterwards (:func:`shardcat.readers.index_fields`)
reads them here, one shard at a time, whatever its kind:

- a native shard: its records' ``entry`` through the footer, one sequential read;
- a folder indexed in place: its record rows from the catalog, and only the
  ``entry`` file of each sample, checked against its CRC32C;
- a tar, MDS shard or LitData chunk indexed in place (no footer): its record rows from the catalog, and
  only the ``entry`` payload of each sample, in ranges coalesced across
  small gaps (8 KiB locally, ``remote_max_gap`` on object stores), each
  checked against the CRC32C computed when the tar was indexed.

A record whose entry is missing, is not a JSON object or lacks a field has
no value there (NULL), as in ``shardcat.write``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._ranges import LOCAL_MAX_GAP, coalesce, split
from .._types import ByteRange
from ..catalog import internal
from ..catalog.kinds import shard_kind
from ..format.footer import EntrySpec
from ..format.spec import Codec
from ..format.tar import read_tar_record
from ..storage import is_local, open_source, redact, resolve_remote_max_gap
from ..storage.gap import gap_for
from .read import iter_folder_records, open_registered
from .tasks import field_values

if TYPE_CHECKING:
    from ..catalog.results import RecordRow, ShardRow
    from ..reading import Catalog

__all__ = ["shard_field_values", "store_shard_fields"]

# Rows whose payloads are fetched in one call of read_ranges: bounds the bytes held at once.
_ROWS_PER_READ = 4096


def shard_field_values(
    catalog: Catalog,
    shard: ShardRow,
    fields: Sequence[str],
    entry: str,
    storage_options: Mapping[str, Any],
) -> list[tuple[int, dict[str, Any]]]:
    """``(byte_offset, {field: value})`` of every record of ``shard`` (any state) with a value.

    Raises
    ------
    ChecksumError
        The file changed since it was registered (a tar: a payload's CRC32C).
    ShardNotFoundError, FormatError, TruncatedError
        The file is gone or cannot be read as registered.
    """
    names = tuple(fields)
    out: list[tuple[int, dict[str, Any]]] = []
    if shard_kind(shard.kind).ranges_of_file:  # samples are byte ranges of the file, no footer
        rows = internal.record_rows(catalog, shard.id)
        for offset, value in _tar_entries(shard.url, rows, entry, storage_options):
            found = field_values({entry: value}, names, entry)
            if found:
                out.append((offset, found))
        return out
    if shard.kind == "files":  # a folder group: only the entry's files are read
        rows = internal.record_rows(catalog, shard.id)
        for rec in iter_folder_records(shard.url, rows, (entry,), storage_options):
            if entry in rec.entries:
                found = field_values({entry: rec[entry].decode()}, names, entry)
                if found:
                    out.append((rec.offset, found))
        return out
    expect = (shard.file_id, shard.footer_crc)
    with open_registered(shard.url, storage_options, expect) as reader:
        for rec in reader.iter_records((entry,)):
            if entry not in rec:
                continue
            found = field_values({entry: rec[entry].decode()}, names, entry)
            if found:
                out.append((rec.offset, found))
    return out


def store_shard_fields(
    catalog: Catalog,
    dataset: str,
    shard: ShardRow,
    fields: Sequence[str],
    entry: str,
    storage_options: Mapping[str, Any],
) -> int:
    """Replace the declared ``fields``' values of one shard's records; returns the values stored.

    Raises
    ------
    CatalogError
        A field is not declared, or a value does not fit its declared type.
    ChecksumError, ShardNotFoundError, FormatError
        As :func:`shard_field_values`.
    """
    values = shard_field_values(catalog, shard, fields, entry, storage_options)
    return catalog.store_fields(dataset, shard.id, values)


def _tar_entries(
    url: str, rows: Sequence[RecordRow], entry: str, storage_options: Mapping[str, Any]
) -> Iterator[tuple[int, Any]]:
    """``(record offset, decoded entry)`` of the rows that have ``entry``, in file order."""
    wanted = []
    for row in rows:
        for (name, content_type, _), span in zip(row.entries, row.spans):
            if name == entry:
                wanted.append((row, EntrySpec(name, content_type, Codec.NONE), span))
                break
    # The batch reads' gap policy: read through small gaps rather than issue another request.
    source = open_source(url, dict(storage_options))
    gap = LOCAL_MAX_GAP if is_local(url) else resolve_remote_max_gap()
    if gap is None:  # derived from the store's measured latency and bandwidth
        gap = gap_for(source.store_key, source.in_flight)  # type: ignore[attr-defined]
    try:
        for i in range(0, len(wanted), _ROWS_PER_READ):
            part = wanted[i : i + _ROWS_PER_READ]
            ranges = [
                ByteRange(row.offset + at, row.offset + at + size) for row, _, (at, size, _) in part
            ]
            merged = coalesce(ranges, max_gap=gap)
            blobs = source.read_ranges([c.range for c in merged])
            for (row, spec, (at, size, crc)), data in zip(part, split(merged, blobs, ranges)):
                record = read_tar_record(
                    data,
                    row.key,
                    [spec],
                    [(0, size, crc)],
                    path=redact(url),
                    offset=row.offset + at,
                )
                yield row.offset, record[entry].decode()
    finally:
        source.close()
