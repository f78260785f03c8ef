"""A whole record's bytes become a :class:`~shardcat.format.Record`, by the shard's kind.

A native shard's record frame names its entries; a tar sample has no frame,
so its layout names the entries and the row's spans place them. Either way
every entry is checked against what the catalog registered (the spans'
offsets, sizes and CRCs), not only against the shard's own CRCs. The kinds
themselves (what a ``shards`` row is) are the catalog's
(:mod:`shardcat.catalog.kinds`); this is how each is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeAlias

from ..catalog.kinds import shard_kind
from ..errors import FormatError
from ..format import Record, recordcodec
from ..format.footer import EntrySpec
from ..format.spans import unpack_spans
from ..format.spec import Codec

__all__ = [
    "DECODERS",
    "Decoder",
    "Layout",
    "RowAt",
    "decode_native",
    "decode_record",
    "inconsistent_row",
    "row_spans",
]

Layout = list[tuple[str, str, Codec]]


@dataclass(slots=True)
class RowAt:
    """A catalog row's record as a decoder is given it, beside the record's bytes.

    Attributes
    ----------
    key, length, url, offset, alignment, spans:
        The row's: the record's key, its bytes, the shard's URL, where the
        record starts in it, the shard's alignment, its packed spans.
    layout:
        The row's layout (entry names, content types, codecs); called only by
        kinds that need it (tar samples have no frame).
    text_cache:
        Decoded texts shared between records (the record codec's cache).
    """

    key: str
    length: int
    url: str
    offset: int
    alignment: int
    spans: bytes
    layout: Callable[[], Layout]
    text_cache: dict[Any, Any]


Decoder: TypeAlias = Callable[[memoryview, RowAt], Record]
"""How a whole record of one shard kind is decoded from its bytes and its row."""


def decode_native(view: memoryview, row: RowAt) -> Record:
    """A native record from its bytes: the frame names its entries, the row's spans check them.

    The point lookup calls the record codec's ``decode_spanned`` itself for
    native rows (no dispatch, no layout, no frame of this function).
    """
    return recordcodec.decode_spanned(
        view,
        row.key,
        row.length,
        row.url,
        row.offset,
        row.alignment,
        row.spans,
        unpack_spans,
        row.text_cache,
    )


def _ranges_decode(
    view: memoryview, row: RowAt, fix: str = "re-index the tar", holder: str = "tar"
) -> Record:
    # A tar sample (an MDS or LitData sample) has no frame: the layout names the
    # entries, the spans place them inside the sample's range of the file.
    names = row.layout()
    located = row_spans(row.spans, len(names), row.url, fix, row.offset)
    specs = [EntrySpec(name, ctype, codec) for name, ctype, codec in names]
    # Tar reading loads on first use: a native lookup needs none of it.
    from ..format.tar import read_tar_record

    return read_tar_record(
        view, row.key, specs, located, path=row.url, offset=row.offset, holder=holder
    )


def _files_decode(view: memoryview, row: RowAt) -> Record:
    # A folder's record is its files end to end (reading/folder.py): each entry is checked
    # as a tar payload is, and an error names the entry's own file.
    from ..format.folder import checked_file, entry_path, folder_of

    key, names = row.key, row.layout()
    located = row_spans(row.spans, len(names), row.url, "index the folder again", row.offset)
    folder = folder_of(row.url)
    record = Record(key, {}, -1, row.offset, len(view))
    for (name, ctype, codec), (at, size, crc) in zip(names, located):
        path = entry_path(folder, key, name)
        spec = EntrySpec(name, ctype, codec)
        record.entries[name] = checked_file(view[at : at + size], key, spec, size, crc, path)
    return record


def inconsistent_row(
    error: ValueError, url: str, fix: str, offset: int | None = None
) -> FormatError:
    """The error of a catalog row that does not fit its layout or shard; ``fix``: what to do."""
    return FormatError(f"catalog row is inconsistent: {error}; {fix}", path=url, offset=offset)


def row_spans(
    spans: bytes, count: int, url: str, fix: str, offset: int | None = None
) -> list[tuple[int, int, int]]:
    """Where each of a row's ``count`` entries lies: ``(offset, size, crc)`` from its spans.

    Raises
    ------
    FormatError
        The spans do not hold ``count`` entries (:func:`inconsistent_row`).
    """
    try:
        return unpack_spans(spans, count)
    except ValueError as e:
        raise inconsistent_row(e, url, fix, offset) from e


DECODERS: dict[str, Decoder] = {
    "native": decode_native,
    "tar": _ranges_decode,
    "files": _files_decode,
    "mds": partial(_ranges_decode, fix="index the MDS directory again", holder="MDS shard"),
    "litdata": partial(
        _ranges_decode, fix="index the LitData directory again", holder="LitData chunk"
    ),
}
"""Shard kind -> how a whole record of it is decoded (every kind of :data:`~shardcat.catalog.kinds.KINDS`)."""


def decode_record(kind: str, view: memoryview, row: RowAt) -> Record:
    """A whole record of a shard of ``kind`` from its bytes, checked (the lookup dispatch).

    Raises
    ------
    FormatError
        The catalog names a kind this shardcat does not know, or the row and
        the bytes disagree.
    """
    decode = DECODERS.get(kind)
    if decode is None:
        shard_kind(kind)  # the catalog's error for a kind it does not know
        raise FormatError(f"shard kind {kind!r} has no decoder")  # KINDS and DECODERS differ
    return decode(view, row)
