"""Full verification of a shard: every byte read, every CRC, pad and index row checked."""

from __future__ import annotations

from dataclasses import dataclass

from .._types import RangeSource
from ..errors import ChecksumError, FormatError
from .checksums import crc32c, key_hash
from .codecs import check_frame
from .footer import Footer
from .header import Header
from .spec import ENTRY_DESC_STRUCT, HEADER_SIZE, RECORD_HEAD_STRUCT, Codec, data_start
from .stream import stream_records

__all__ = ["VerifyReport", "verify_shard"]


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What a full verification checked."""

    path: str
    records: int
    entries: int
    bytes: int
    data_crc: int


def verify_shard(
    source: RangeSource, header: Header, footer: Footer, *, path: str, size: int
) -> VerifyReport:
    """Read every byte of the shard and check it against its header and footer.

    ``header`` and ``footer`` are the shard's own, already decoded and
    checked against each other (as :class:`~shardcat.format.ShardReader`
    holds them); ``size`` is the file size the trailer describes. The data
    region is streamed once (:func:`~shardcat.format.stream.stream_records`),
    so memory stays bounded whatever the shard's size.

    Raises
    ------
    FormatError
        The first problem found (a CRC, pad, index row or size), naming the offset.
    """
    f = footer
    t = f.trailer
    start = data_start(header.alignment)
    first = int(f.records[0]["offset"]) if len(f.records) else t.footer_offset
    if first != start:
        raise FormatError(
            f"data region should start at {start} for alignment {header.alignment}, "
            f"the index starts it at {first}",
            path=path,
        )
    actual_size = source.size()
    if actual_size != size:
        raise FormatError(f"file is {actual_size} bytes, its trailer describes {size}", path=path)
    data_crc = crc32c(bytes(start - HEADER_SIZE))  # the padding after the header, checked zero
    starts = f.entry_starts
    n_entries = 0
    i = -1
    records = stream_records(source, path, t.footer_offset, None, t.header_crc, verify=True)
    for i, (view, rec) in enumerate(records):
        data_crc = crc32c(view, data_crc)
        if i >= len(f.records):
            raise FormatError(
                f"more records in the data region than the footer's {len(f.records)}",
                path=path,
                offset=rec.offset,
            )
        row = f.records[i]
        key = rec.key.encode("utf-8")
        if (
            int(row["offset"]) != rec.offset
            or int(row["length"]) != rec.length
            or key != f.key_bytes(i)
            or int(row["key_hash"]) != key_hash(key)
            or RECORD_HEAD_STRUCT.unpack_from(view)[3] != int(row["key_hash"])
            or int(row["entry_count"]) != len(rec.entries)
        ):
            raise FormatError(
                f"index row {i} disagrees with the record it points at (key {rec.key!r})",
                path=path,
                offset=rec.offset,
            )
        first = int(starts[i])
        for j, (name, entry) in enumerate(rec.entries.items()):
            e = f.entries[first + j]
            spec = f.specs[int(e["spec"])]
            # The descriptor's CRC was checked against the payload by decode_record.
            p_off, p_size, p_crc = ENTRY_DESC_STRUCT.unpack_from(view, 32 + 32 * j)[:3]
            if (
                spec.name != name
                or spec.content_type != entry.content_type
                or spec.codec != entry.codec
                or (int(e["offset"]), int(e["size"]), int(e["crc"])) != (p_off, p_size, p_crc)
            ):
                raise FormatError(
                    f"entry row {first + j} disagrees with entry {name!r} of record {rec.key!r}",
                    path=path,
                    offset=rec.offset,
                )
            if entry.codec is not Codec.NONE and entry.codec.known:
                # Its frame header must declare a size a reader will accept; the
                # frame itself is not decompressed (verification stays I/O-bound).
                check_frame(
                    entry._stored,  # type: ignore[arg-type]
                    entry.codec,
                    name=name,
                    path=path,
                    offset=rec.offset + p_off,
                )
        n_entries += len(rec.entries)
    if i + 1 != len(f.records):
        raise FormatError(f"found {i + 1} records, the footer lists {len(f.records)}", path=path)
    if data_crc != t.data_crc:
        raise ChecksumError(
            f"data region CRC32C mismatch (stored {t.data_crc:#010x}, computed {data_crc:#010x})",
            path=path,
            offset=HEADER_SIZE,
        )
    return VerifyReport(path, len(f.records), n_entries, size, data_crc)
