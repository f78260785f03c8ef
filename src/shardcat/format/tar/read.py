"""Reading one sample of a tar back: one ranged read, every payload's CRC32C checked.

This is the lookup path for tar shards. The catalog knows a sample's byte
range in the tar and, per entry, where its payload lies inside that range,
its size and CRC32C (computed at indexing); the bytes of the range are read
in one request and each entry is checked before it is returned, exactly as
for native shards.

The point lookup calls :func:`tar_record`, :func:`read_tar_record` with the
catalog row's packed spans, which returns None where that function raises
(the lookup then asks again on its Python path, which raises the typed
error); its compiled twin (``format/ccodec/tar_record.c``) takes the same
arguments (``tests/format/tar/test_ctar_record.py`` and
``tests/fuzz/test_fuzz_codec.py`` hold the two to the same records).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._types import ByteRange, RangeSource
from ...errors import ChecksumError, ShardcatError, TruncatedError
from ..checksums import crc32c
from ..entries import Entry, Record
from ..footer import EntrySpec
from ..spans import unpack_spans
from ..spec import Codec
from .info import TarShardInfo

__all__ = ["read_tar_record", "read_tar_sample", "tar_record"]


def read_tar_record(
    data: bytes | bytearray | memoryview,
    key: str,
    layout: Sequence[EntrySpec],
    spans: Sequence[tuple[int, int, int]],
    *,
    path: str | None = None,
    offset: int = 0,
    index: int = -1,
    holder: str = "tar",
) -> Record:
    """The entries of one sample from the bytes of its range, each CRC-checked.

    Parameters
    ----------
    data:
        The sample's byte range as read from the tar (``length`` bytes from ``offset``).
    key:
        The sample's key.
    layout:
        Name and content type of each entry, in order (the catalog's layout).
    spans:
        ``(offset in the range, size, crc32c)`` of each entry, in the same order.
    path, offset:
        The tar's URL and the range's offset in it, named in errors.
    index:
        The record's position, kept on the returned :class:`Record`.
    holder:
        What holds the payloads, named in errors (``"tar"``; a folder's ``"file"``).

    Returns
    -------
    Record
        Entries whose bytes are views of ``data`` (nothing is copied).

    Raises
    ------
    ChecksumError
        A payload's CRC32C is not the one recorded at indexing: the tar
        changed (or was damaged) after it was indexed.
    TruncatedError
        ``data`` is shorter than an entry's span.
    ValueError
        ``layout`` and ``spans`` have different lengths.
    """
    if len(layout) != len(spans):
        raise ValueError(f"{len(layout)} entry specs for {len(spans)} spans of key {key!r}")
    view = memoryview(data).cast("B")
    entries: dict[str, Entry] = {}
    for spec, (at, size, crc) in zip(layout, spans):
        if at + size > len(view):
            raise TruncatedError(
                f"entry {spec.name!r} of key {key!r} needs bytes up to {at + size} of the "
                f"sample, only {len(view)} were read; the {holder} is shorter than when it was indexed",
                path=path,
                offset=offset + at,
            )
        payload = view[at : at + size]
        actual = crc32c(payload)
        if actual != crc:
            raise ChecksumError(
                f"entry {spec.name!r} of key {key!r}: CRC32C {actual:#010x}, indexed as "
                f"{crc:#010x}; the {holder} was changed or damaged after indexing (re-index it)",
                path=path,
                offset=offset + at,
            )
        entries[spec.name] = Entry.from_stored(payload, spec.content_type, Codec.NONE)
    return Record(key, entries, index, offset, len(view))


def tar_record(
    data: bytes,
    key: str,
    specs: tuple[tuple[str, str], ...],
    spans: bytes,
    offset: int,
    record: type[Record],
) -> Record | None:
    """:func:`read_tar_record` of a catalog row, or None where it raises (the compiled twin's contract).

    ``specs`` are the layout's ``(name, content_type)`` pairs, ``spans`` the
    row's packed spans, ``record`` the class of the result (made as
    ``record(key, entries, -1, offset, len(data))``).
    """
    if type(data) is not bytes or type(specs) is not tuple or type(spans) is not bytes:
        return None
    try:
        layout = [EntrySpec(name, ctype, Codec.NONE) for name, ctype in specs]
        rec = read_tar_record(data, key, layout, unpack_spans(spans, len(specs)), offset=offset)
    except (ShardcatError, ValueError, TypeError):
        return None
    if record is Record:
        return rec
    return record(key, rec.entries, -1, offset, len(data))


def read_tar_sample(source: RangeSource, info: TarShardInfo, index: int) -> Record:
    """Record ``index`` of a scanned tar, read with one ranged read of its byte range.

    Raises
    ------
    ChecksumError, TruncatedError
        As :func:`read_tar_record`.
    """
    offset = int(info.records["offset"][index])
    length = int(info.records["length"][index])
    (data,) = source.read_ranges([ByteRange(offset, offset + length)])
    return read_tar_record(
        data,
        info.keys[index],
        info.layout(index),
        info.spans(index),
        path=source.name,
        offset=offset,
        index=index,
    )
