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
from functools import partial
from typing import Any

from ..catalog.kinds import shard_kind
from ..catalog.spans import unpack_spans
from ..errors import FormatError
from ..format import Record, recordcodec
from ..format.footer import EntrySpec
from ..format.spec import Codec

__all__ = ["DECODERS", "Layout", "decode_native", "decode_record"]

Layout = list[tuple[str, str, Codec]]


def decode_native(
    view: memoryview,
    key: str,
    length: int,
    url: str,
    offset: int,
    alignment: int,
    spans: bytes,
    text_cache: dict[Any, Any],
) -> Record:
    """A native record from its bytes: the frame names its entries, the row's spans check them.

    The point lookup calls the record codec's ``decode_spanned`` itself for
    native rows (no dispatch, no layout, no frame of this function).
    """
    return recordcodec.decode_spanned(
        view, key, length, url, offset, alignment, spans, unpack_spans, text_cache
    )


def _native_decode(
    view: memoryview,
    *,
    key: str,
    length: int,
    url: str,
    offset: int,
    alignment: int,
    spans: bytes,
    layout: Callable[[], Layout],
    text_cache: dict[Any, Any],
) -> Record:
    return decode_native(view, key, length, url, offset, alignment, spans, text_cache)


def _ranges_decode(
    view: memoryview,
    *,
    key: str,
    length: int,
    url: str,
    offset: int,
    alignment: int,
    spans: bytes,
    layout: Callable[[], Layout],
    text_cache: dict[Any, Any],
    fix: str = "re-index the tar",
    holder: str = "tar",
) -> Record:
    # A tar sample (an MDS or LitData sample) has no frame: the layout names the
    # entries, the spans place them inside the sample's range of the file.
    names, located = _placed(layout, spans, url, offset, fix)
    specs = [EntrySpec(name, ctype, codec) for name, ctype, codec in names]
    # Tar reading loads on first use: a native lookup needs none of it.
    from ..format.tar import read_tar_record

    return read_tar_record(view, key, specs, located, path=url, offset=offset, holder=holder)


def _files_decode(
    view: memoryview,
    *,
    key: str,
    length: int,
    url: str,
    offset: int,
    alignment: int,
    spans: bytes,
    layout: Callable[[], Layout],
    text_cache: dict[Any, Any],
) -> Record:
    # A folder's record is its files end to end (reading/folder.py): each entry is checked
    # as a tar payload is, and an error names the entry's own file.
    from ..format.folder import checked_file, entry_path, folder_of

    names, located = _placed(layout, spans, url, offset, "index the folder again")
    folder = folder_of(url)
    record = Record(key, {}, -1, offset, len(view))
    for (name, ctype, codec), (at, size, crc) in zip(names, located):
        path = entry_path(folder, key, name)
        spec = EntrySpec(name, ctype, codec)
        record.entries[name] = checked_file(view[at : at + size], key, spec, size, crc, path)
    return record


def _placed(
    layout: Callable[[], Layout], spans: bytes, url: str, offset: int, fix: str
) -> tuple[Layout, list[tuple[int, int, int]]]:
    """A frame-less record's entries (its layout) and where each lies (its row's spans)."""
    names = layout()
    try:
        return names, unpack_spans(spans, len(names))
    except ValueError as e:
        raise FormatError(
            f"catalog row is inconsistent: {e}; {fix}", path=url, offset=offset
        ) from e


DECODERS: dict[str, Callable[..., Record]] = {
    "native": _native_decode,
    "tar": _ranges_decode,
    "files": _files_decode,
    "mds": partial(_ranges_decode, fix="index the MDS directory again", holder="MDS shard"),
    "litdata": partial(
        _ranges_decode, fix="index the LitData directory again", holder="LitData chunk"
    ),
}
"""Shard kind -> how a whole record of it is decoded (every kind of :data:`~shardcat.catalog.kinds.KINDS`)."""


def decode_record(
    kind: str,
    view: memoryview,
    *,
    key: str,
    length: int,
    url: str,
    offset: int,
    alignment: int,
    spans: bytes,
    layout: Callable[[], Layout],
    text_cache: dict[Any, Any],
) -> Record:
    """A whole record of a shard of ``kind`` from its bytes, checked (the lookup dispatch).

    ``layout`` is called only by kinds that need it (tar samples have no frame).

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
    return decode(
        view,
        key=key,
        length=length,
        url=url,
        offset=offset,
        alignment=alignment,
        spans=spans,
        layout=layout,
        text_cache=text_cache,
    )
