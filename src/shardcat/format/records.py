"""Record framing: one self-contained, length-prefixed, CRC-checked block per sample.

A record can be parsed from its own bytes alone: the head gives its length,
its key and its entry descriptors; ``head_crc`` covers the head (and so every
payload CRC), and each payload has its own CRC, so one entry can be read and
checked without the others. Padding is zero and checked.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import ChecksumError, FormatError, TruncatedError
from . import spec
from .checksums import package_crc32c
from .entries import Entry, Record, _CompressedEntry, _StoredEntry
from .spec import (
    ENTRY_DESC_STRUCT,
    RECORD_HEAD_STRUCT,
    RECORD_TAG,
    Codec,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "BatchTable",
    "EncodedRecord",
    "PreparedEntry",
    "add_plain",
    "batch_table",
    "decode_batch",
    "decode_entry",
    "decode_indexed",
    "decode_record",
    "decode_spanned",
    "encode_record",
    "head_end",
    "head_key",
    "key_span",
]


def _first_crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    global crc32c
    crc32c = package_crc32c()
    return crc32c(data, value)


crc32c: Callable[..., int] = _first_crc32c
"""The ``crc32c`` package's C function, which the first call puts here.

This module is a hot path: its checks call the C function itself, not a
wrapper; importing the package waits for the first check (its start-up
cost: :func:`.checksums.package_crc32c`).
"""


_HEAD = RECORD_HEAD_STRUCT.size
_DESC = ENTRY_DESC_STRUCT.size
_ZEROS = bytes(4096)
_DESC_RESERVED = b"\0" * 7
_unpack_head = RECORD_HEAD_STRUCT.unpack_from
_unpack_desc = ENTRY_DESC_STRUCT.unpack_from
# (payload_offset, stored_size, payload_crc): the descriptor's first three fields.
_unpack_payload = struct.Struct(ENTRY_DESC_STRUCT.format[:4]).unpack_from
_NONE = Codec.NONE
_TEXT_CACHE_MAX = 4096
"""Decoded (name, content type, codec) triples a ``text_cache`` holds before it starts over."""


class PreparedEntry(NamedTuple):
    """An entry ready to write: its payload is already compressed and checksummed."""

    name: bytes
    content_type: bytes
    codec: Codec
    payload: bytes | bytearray | memoryview
    crc: int


class EncodedRecord(NamedTuple):
    parts: list[bytes | bytearray | memoryview]
    length: int
    head_length: int
    offsets: list[int]
    """Payload offsets relative to the record start."""


def encode_record(
    key: bytes, key_hash: int, entries: Sequence[PreparedEntry], alignment: int
) -> EncodedRecord:
    """Lay a record out; the caller writes ``parts`` in order.

    Called once per record on the write path, so it is written for speed:
    plain loops, tuples, one pack per structure.
    """
    mask = alignment - 1
    strings = [key]
    strings_len = len(key)
    for e in entries:
        strings.append(e.name)
        strings.append(e.content_type)
        strings_len += len(e.name) + len(e.content_type)
    n = len(entries)
    unpadded = _HEAD + _DESC * n + strings_len
    head_length = (unpadded + mask) & ~mask

    offsets: list[int] = []
    descs: list[bytes] = []
    parts: list[bytes | bytearray | memoryview] = [b""]  # the head goes first
    pos = head_length
    pack_desc = ENTRY_DESC_STRUCT.pack
    for e in entries:
        size = len(e.payload)
        offsets.append(pos)
        descs.append(
            pack_desc(pos, size, e.crc, len(e.name), len(e.content_type), e.codec, _DESC_RESERVED)
        )
        end = pos + size
        pos = (end + mask) & ~mask
        parts.append(e.payload)
        if pos != end:
            parts.append(_ZEROS[: pos - end])
    record_length = pos
    # Bytes 8.. of the head: everything head_crc covers.
    rest = b"".join(
        [
            RECORD_HEAD_STRUCT.pack(
                RECORD_TAG, 0, record_length, key_hash, head_length, len(key), n
            )[8:],
            *descs,
            *strings,
            _ZEROS[: head_length - unpadded],
        ]
    )
    parts[0] = RECORD_TAG + crc32c(rest).to_bytes(4, "little") + rest
    return EncodedRecord(parts, record_length, head_length, offsets)


def add_plain(
    writer: Any,
    key: Any,
    entries: Any,
    key_hash: Any,
    max_key_bytes: int,
    max_entries: int,
    block_bytes: int,
) -> int | None:
    """``ShardWriter.add``'s common case: the twin of the compiled ``add_plain``.

    Compiled, it encodes and appends a record of bytes entries under names the
    writer has seen and returns its index, or returns None for anything else.
    This twin returns None for every record: ``ShardWriter.add``'s own path,
    the reference, then writes it.
    """
    return None


def decode_record(
    view: memoryview,
    *,
    path: str | None,
    offset: int,
    alignment: int,
    index: int = -1,
    names: frozenset[str] | None = None,
    text_cache: dict[object, tuple[str, str, Codec]] | None = None,
    check_padding: bool = False,
) -> Record:
    """Decode one record from ``view`` (its bytes), checking every CRC.

    Padding carries no data, so it is checked (``check_padding``) only by a
    full verification, which also covers it with the data-region CRC.

    This is the streaming hot path: one pass over the descriptors, and the
    decoded (name, content type, codec) of each descriptor is memoised in
    ``text_cache``, since records of a dataset repeat the same few (a cache
    that grows past a few thousand, as a hostile shard's could, starts over).
    """
    if not view.readonly:  # entries must not change under the caller
        view = memoryview(bytes(view))
    size = len(view)
    _, head_crc, length, _, head_length, key_len, n_entries = _head(view, path, offset)
    strings_at = _HEAD + _DESC * n_entries
    if (
        head_length < strings_at + key_len
        or head_length % alignment
        or head_length > length
        or length % alignment
    ):
        raise FormatError(
            f"record head is inconsistent (head_length {head_length}, record_length {length}, "
            f"alignment {alignment}, {n_entries} entries)",
            path=path,
            offset=offset,
        )
    if size < length:
        raise TruncatedError(
            f"record is {length} bytes, only {size} remain", path=path, offset=offset
        )
    _check_head_crc(view, head_crc, head_length, path, offset)
    cache = {} if text_cache is None else text_cache
    entries: dict[str, Entry] = {}
    pos = strings_at + key_len
    expected = head_length
    from_stored = _StoredEntry
    for i in range(n_entries):
        p_off, p_size, crc, name_len, type_len, codec, _ = _unpack_desc(view, _HEAD + _DESC * i)
        end = p_off + p_size
        if p_off != expected or end > length:
            raise FormatError(
                f"entry {i} payload at {p_off}+{p_size} does not follow the layout "
                f"(expected at {expected}, record length {length})",
                path=path,
                offset=offset,
            )
        expected = (end + alignment - 1) & -alignment
        strings_end = pos + name_len + type_len
        if strings_end > head_length:
            raise FormatError("record strings overrun the record head", path=path, offset=offset)
        spec_key = (bytes(view[pos:strings_end]), name_len, codec)
        spec = cache.get(spec_key)
        if spec is None:
            if len(cache) >= _TEXT_CACHE_MAX:
                cache.clear()
            spec = cache[spec_key] = _decode_spec(
                view, pos, name_len, type_len, codec, path, offset
            )
        pos = strings_end
        if check_padding and expected != end and view[end:expected] != _ZEROS[: expected - end]:
            raise FormatError(
                "non-zero padding after an entry payload", path=path, offset=offset + end
            )
        name = spec[0]
        if names is not None and name not in names:
            continue
        payload = view[p_off:end]
        actual = crc32c(payload)
        if actual != crc:
            raise ChecksumError(
                f"entry {name!r} payload CRC32C mismatch (stored {crc:#010x}, computed {actual:#010x})",
                path=path,
                offset=offset + p_off,
            )
        if spec[2] is _NONE:
            entries[name] = from_stored(payload, spec[1], _NONE)
        else:  # decompressed on first use: keep what its errors must name
            entries[name] = _CompressedEntry(payload, spec[1], spec[2], name, path, offset + p_off)
    if expected != length:
        raise FormatError("record length does not match its payloads", path=path, offset=offset)
    if (
        check_padding
        and pos != head_length
        and view[pos:head_length] != _ZEROS[: head_length - pos]
    ):
        raise FormatError("non-zero padding after the record head", path=path, offset=offset + pos)
    try:
        key = str(view[strings_at : strings_at + key_len], "utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"record key is not valid UTF-8: {e}", path=path, offset=offset) from e
    return Record(key, entries, index, offset, length)


def _decode_spec(
    view: memoryview,
    pos: int,
    name_len: int,
    type_len: int,
    codec: int,
    path: str | None,
    offset: int,
) -> tuple[str, str, Codec]:
    try:
        name = str(view[pos : pos + name_len], "utf-8")
        ctype = str(view[pos + name_len : pos + name_len + type_len], "ascii")
    except UnicodeDecodeError as e:
        raise FormatError(
            f"entry name or content type is not valid text: {e}", path=path, offset=offset
        ) from e
    return name, ctype, _codec(codec, path, offset)


def _codec(value: int, path: str | None, offset: int) -> Codec:
    return Codec(value)  # unknown codecs fail only when the entry is decoded


def decode_indexed(
    view: memoryview,
    *,
    key: str | bytes,
    length: int,
    path: str | None,
    offset: int,
    alignment: int,
    index: int = -1,
    registered: Callable[[int], Sequence[tuple[int, int, int]]] | None = None,
    text_cache: dict[object, tuple[str, str, Codec]] | None = None,
) -> Record:
    """Decode a record read where an index named it, and check it is the record named.

    The one check of every random-access read, whoever holds the index: a
    shard's own footer (:class:`~shardcat.format.ShardReader`) or a catalog
    row (lookups). The index says the record is ``length`` bytes and holds
    ``key`` (text, or its UTF-8 bytes as a footer stores them);
    :func:`decode_record` proves the bytes are a sound record (the head CRC
    covers every descriptor, each payload its own CRC).

    With ``registered`` (a catalog's lookups), ``registered(n)`` gives the
    ``(payload offset, stored size, CRC32C)`` registered for each entry of a
    record of ``n`` entries (raising ValueError if it was registered with
    another count); comparing the record's descriptors with them proves the
    bytes are the ones registered, not another valid record written over them.

    ``text_cache`` is :func:`decode_record`'s: a reader that decodes many
    records keeps one, so entry names and types are decoded once, not per record.

    Raises
    ------
    TruncatedError
        Fewer than ``length`` bytes were read.
    FormatError
        The bytes are not a record, or hold another key.
    ChecksumError
        A CRC fails, or the record's entries differ from the registered ones.
    """
    if len(view) != length:
        raise TruncatedError(
            f"record {_name(index, key)} needs {length} bytes, the shard has {len(view)} there",
            path=path,
            offset=offset,
        )
    record = decode_record(
        view, path=path, offset=offset, alignment=alignment, index=index, text_cache=text_cache
    )
    if (record.key if isinstance(key, str) else record.key.encode("utf-8")) != key:
        raise FormatError(
            f"record {_name(index, key)} holds key {record.key!r} where the index expects {key!r}",
            path=path,
            offset=offset,
        )
    if registered is not None:
        _check_registered(view, record.key, registered, path, offset)
    return record


def decode_spanned(
    view: bytes | memoryview,
    key: str | bytes,
    length: int,
    path: str | None,
    offset: int,
    alignment: int,
    spans: bytes,
    unpack: Callable[[bytes, int], Sequence[tuple[int, int, int]]],
    text_cache: dict[object, tuple[str, str, Codec]] | None,
    /,
) -> Record:
    """:func:`decode_indexed` of a point lookup: positional arguments, the spans as stored.

    ``view`` is the record's bytes (``bytes`` or a memoryview), ``spans`` the
    record's registered spans as the catalog stores them and ``unpack(spans,
    n)`` what unpacks them (``registered`` is ``partial(unpack, spans)``).
    The compiled codec's version takes the same arguments, positionally only
    (no keyword parsing), and compares ``spans`` with the record's
    descriptors in C; it hands anything else to this function.

    Raises
    ------
    TruncatedError, FormatError, ChecksumError
        As :func:`decode_indexed`.
    TypeError
        Not exactly these nine arguments, given by position.
    """
    return decode_indexed(
        view if isinstance(view, memoryview) else memoryview(view),
        key=key,
        length=length,
        path=path,
        offset=offset,
        alignment=alignment,
        registered=partial(unpack, spans),
        text_cache=text_cache,
    )


class BatchTable(NamedTuple):
    """The rows of a batch query, as :func:`decode_batch` takes them (:func:`batch_table`)."""

    table: np.ndarray
    """:data:`~shardcat.format.spec.BATCH_ROW_DTYPE`, one row per record found, in row order."""
    keys: list[str]
    spans: list[bytes]
    urls: list[str]
    """Per shard, in order of first appearance (``table["shard"]`` indexes them)."""
    alignments: list[int]
    others: list[tuple[int, Any, Any]]
    """``(row, kind, signature)`` of the rows whose kind is not NULL (not native)."""
    seen: dict[str, int]
    """Each key found, and its row."""


def batch_table(rows: Sequence[Sequence[Any]], wanted: dict[str, Any]) -> BatchTable:
    """The rows of a batch query as the batch decoder's table, in one pass.

    ``rows`` are ``(url, offset, length, spans, key, alignment, kind,
    signature)``, ``kind`` NULL (None) for native records. A row counts if
    its key is in ``wanted`` and no row before it had that key (equal hashes,
    another key: a collision, never a match). ``blob`` and ``at`` are left
    zero for the reads to fill. The compiled codec does the same in C.
    """
    import numpy as np

    seen: dict[str, int] = {}
    shard_of: dict[str, int] = {}
    out = BatchTable(np.zeros(0, dtype=spec.BATCH_ROW_DTYPE), [], [], [], [], [], seen)
    fields: list[tuple[int, int, int, int, int, int, int]] = []
    for url, offset, length, spans, key, alignment, kind, signature, *_ in rows:
        if key not in wanted or key in seen:
            continue
        n = seen[key] = len(fields)
        shard = shard_of.get(url)
        if shard is None:
            shard = shard_of[url] = len(out.urls)
            out.urls.append(url)
            out.alignments.append(alignment)
        fields.append((0, shard, n, 0, 0, length, offset))
        out.keys.append(key)
        out.spans.append(spans if type(spans) is bytes else bytes(spans))
        if kind is not None:
            out.others.append((n, kind, signature))
    return out._replace(table=np.array(fields, dtype=spec.BATCH_ROW_DTYPE))


def decode_batch(
    blobs: Sequence[memoryview],
    table: np.ndarray,
    keys: Sequence[str],
    spans: Sequence[bytes],
    paths: Sequence[str],
    alignments: Sequence[int],
    registered: Callable[[bytes, int], Sequence[tuple[int, int, int]]],
    text_cache: dict[object, tuple[str, str, Codec]] | None = None,
    positions: Sequence[int] | None = None,
) -> list[Record | None]:
    """Decode and check every record of a batch of indexed reads.

    ``table`` (:data:`~shardcat.format.spec.BATCH_ROW_DTYPE`) says where each
    record lies: row ``t``'s record is ``blobs[blob][at:at + length]`` of file
    ``paths[shard]`` at ``offset``, and must hold ``keys[row]`` with the
    entries ``registered(spans[row], n)`` gives (as :func:`decode_indexed`).
    The result has one item per key: ``result[row]`` is its record (None for
    a row the table does not name). ``positions`` limits the work to those
    table rows.

    Raises
    ------
    TruncatedError, FormatError, ChecksumError
        As :func:`decode_indexed`, for the first failing record in table order.
    """
    out: list[Record | None] = [None] * len(keys)
    rows = table.tolist()  # tuples of Python ints: one conversion, not one per field
    for t in range(len(rows)) if positions is None else positions:
        blob, shard, row, _, at, length, offset = rows[t]
        view = memoryview(blobs[blob])[at : at + length]
        out[row] = decode_indexed(
            view,
            key=keys[row],
            length=length,
            path=paths[shard],
            offset=offset,
            alignment=alignments[shard],
            registered=partial(registered, spans[row]),
            text_cache=text_cache,
        )
    return out


def _name(index: int, key: str | bytes) -> str:
    """How an error names the record: by index in its shard if known, else by key."""
    return str(index) if index >= 0 else repr(key)


def _check_registered(
    view: memoryview,
    key: str,
    registered: Callable[[int], Sequence[tuple[int, int, int]]],
    path: str | None,
    offset: int,
) -> None:
    count = _unpack_head(view)[6]  # entry_count, covered by the head CRC decode_record checked
    try:
        expected = registered(count)
    except ValueError as e:
        raise ChecksumError(
            f"record {key!r} has {count} entries, not as registered ({e}): the shard was rewritten",
            path=path,
            offset=offset,
        ) from e
    stored = [_unpack_payload(view, _HEAD + _DESC * i) for i in range(count)]
    if stored != expected:
        i = next(i for i in range(count) if stored[i] != expected[i])
        raise ChecksumError(
            f"record {key!r} entry {i} is not the one registered (CRC32C {stored[i][2]:#010x}, "
            f"{stored[i][1]} bytes at {stored[i][0]}; registered {expected[i][2]:#010x}, "
            f"{expected[i][1]} bytes at {expected[i][0]}): the shard was rewritten",
            path=path,
            offset=offset,
        )


def decode_entry(
    view: memoryview,
    *,
    name: str,
    content_type: str,
    codec: Codec,
    size: int,
    crc: int,
    path: str | None,
    offset: int,
) -> Entry:
    """One entry's payload, read on its own where an index named it: length and CRC checked.

    ``size`` and ``crc`` are what the index (footer or catalog) holds for the
    payload; ``offset`` is the payload's place in the file, for errors.

    Raises
    ------
    TruncatedError
        Fewer than ``size`` bytes were read.
    ChecksumError
        The payload does not match ``crc``.
    """
    if len(view) != size:
        raise TruncatedError(
            f"entry {name!r} needs {size} bytes, the shard has {len(view)} there",
            path=path,
            offset=offset,
        )
    actual = crc32c(view)
    if actual != crc:
        raise ChecksumError(
            f"entry {name!r} payload CRC32C mismatch (stored {crc:#010x}, computed {actual:#010x})",
            path=path,
            offset=offset,
        )
    return Entry.from_stored(view, content_type, codec, name=name, path=path, offset=offset)


KEY_PEEK = 512
"""Bytes of a record read to find its key: the head and the key of most records."""


def key_span(view: memoryview | bytes, *, path: str | None, offset: int) -> tuple[int, int]:
    """Where a record's key lies in its first bytes: ``(start, end)`` (``view`` holds the head).

    Raises
    ------
    FormatError
        The bytes are not a record head.
    """
    _, _, _, _, _, key_len, n_entries = _head(view, path, offset)
    start = _HEAD + _DESC * n_entries
    return start, start + key_len


def _head(view: memoryview | bytes, path: str | None, offset: int) -> tuple[Any, ...]:
    """A record head's fields, once its length and tag are checked."""
    if len(view) < _HEAD:
        raise TruncatedError(
            f"record head needs {_HEAD} bytes, only {len(view)} remain", path=path, offset=offset
        )
    head = _unpack_head(view)
    if head[0] != RECORD_TAG:
        raise FormatError(
            f"expected a record tag {RECORD_TAG!r}, found {bytes(head[0])!r}",
            path=path,
            offset=offset,
        )
    return head


def _check_head_crc(
    view: memoryview | bytes, head_crc: int, head_length: int, path: str | None, offset: int
) -> None:
    """Raise ChecksumError unless ``head_crc`` is the CRC32C of the head's bytes [8, head_length)."""
    actual = crc32c(view[8:head_length])
    if actual != head_crc:
        raise ChecksumError(
            f"record head CRC32C mismatch (stored {head_crc:#010x}, computed {actual:#010x})",
            path=path,
            offset=offset,
        )


def head_end(view: memoryview | bytes, *, path: str | None, offset: int) -> int:
    """Bytes from a record's start to the end of its head (what ``head_crc`` covers ends there).

    Raises
    ------
    FormatError
        The bytes are not a record head.
    """
    return int(_head(view, path, offset)[4])


def head_key(
    view: memoryview | bytes, *, path: str | None, offset: int, checked: bool = False
) -> str:
    """The key a record's head names (``view``: at least its first :func:`key_span` bytes).

    What a hash-only dataset's lookup compares: the catalog keeps the key's hash,
    the record its text (docs/CATALOG.md, "Hash-only datasets"). A lookup decodes
    and checks the whole record afterwards; ``checked``: the head's CRC is checked
    here (``view`` then holds :func:`head_end` bytes), for a caller that decides on the
    key alone (the commit's duplicate rule).

    Raises
    ------
    FormatError
        The bytes are not a record head, or its key is cut short or not UTF-8.
    ChecksumError
        ``checked`` and the head's bytes are not those written.
    """
    if checked:
        _, head_crc, _, _, length, _, _ = _head(view, path, offset)
        if len(view) < length:
            raise TruncatedError(
                f"record head needs {length} bytes, only {len(view)} remain",
                path=path,
                offset=offset,
            )
        _check_head_crc(view, head_crc, length, path, offset)
    start, end = key_span(view, path=path, offset=offset)
    if len(view) < end:
        raise TruncatedError(
            f"record key needs {end} bytes, only {len(view)} remain", path=path, offset=offset
        )
    try:
        return str(bytes(view[start:end]), "utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"record key is not valid UTF-8: {e}", path=path, offset=offset) from e
