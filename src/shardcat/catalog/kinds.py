"""Shard kinds: what differs between a native shard and a tar indexed in place, in one place.

A ``shards`` row is either a shardcat shard file (``kind = 'native'``) or a
WebDataset tar registered where it lies (``kind = 'tar'``, revision 0004).
Both register the same ``records`` rows (byte range, per-entry offset, size
and CRC32C in ``spans``, a layout); they differ in four things, each looked
up here by the row's kind and nowhere else:

- the ``shards`` columns a summary gives (a tar has no header or footer);
- how a whole record's bytes become a :class:`~shardcat.format.Record`
  (the native record frame, or the tar payloads at their spans);
- how a file is read again to check it (footer + every CRC, or a re-scan);
- whether deleting a dataset deletes its files by default (tars are the
  user's: only when asked).

Single-entry reads are the same for both (the payload at its span, CRC-checked).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from ..errors import FormatError, ShardcatError, ShardNotFoundError
from ..format import Record, ShardInfo, recordcodec
from ..format.checksums import crc32c
from ..format.footer import EntrySpec
from ..format.spec import NO_SHARD_NUMBER, Codec
from ..storage import open_source
from .results import Problem
from .spans import unpack_spans

# Tar scanning and the URL-aware shard reader load on first use: a native
# point lookup (and a cold first one) needs neither (issue 10).
if TYPE_CHECKING:
    from ..format.tar import TarShardInfo

__all__ = [
    "KINDS",
    "FileCheck",
    "ShardKind",
    "Summary",
    "decode_native",
    "decode_record",
    "kind_of",
    "shard_kind",
]

# A forward reference (Union, not |): the tar module loads lazily.
Summary = Union[ShardInfo, "TarShardInfo"]
"""What registering a shard takes: a native footer's summary or a tar's scan."""

Layout = list[tuple[str, str, Codec]]

FileCheck = tuple[Summary | None, list[Problem], int]
"""What reading one file found: its summary (if readable), problems, records checked."""


@dataclass(frozen=True, slots=True)
class ShardKind:
    """The operations that depend on a shard's kind."""

    name: str
    columns: Callable[[Any], dict[str, Any]]
    """``shards`` columns (besides url, state, job) from the summary."""
    decode: Callable[..., Record]
    """A whole record from its bytes, every entry checked against the row's spans."""
    check: Callable[[str, Any], FileCheck]
    """Read the file again and check every byte it can: ``(summary, problems, records checked)``."""
    summary: Callable[[str, Any], Summary]
    """The summary the catalog rows are rebuilt from (reindex)."""
    owns_files: bool
    """Deleting its dataset deletes the file by default (native shards), else only if asked."""


def _native_columns(info: ShardInfo) -> dict[str, Any]:
    header = info.header
    user = info.metadata.get("user", {})
    return {
        "kind": "native",
        "shard_number": None
        if header.shard_number == NO_SHARD_NUMBER
        else int(header.shard_number),
        "file_id": info.file_id,
        "format_major": int(header.version[0]),
        "format_minor": int(header.version[1]),
        "flags": int(header.flags),
        "created_at": info.created,  # clamped to a valid date, as every reader reports it
        "alignment": int(header.alignment),
        "compression": header.default_codec.label,
        "header_crc": int(header.crc),
        "record_count": len(info.records),
        "entry_count": len(info.entries),
        "size_bytes": int(info.size),
        "payload_bytes": info.payload_bytes(),
        "data_crc": int(info.data_crc),
        "footer_crc": int(info.footer_crc),
        "user_metadata": user if isinstance(user, dict) else {"value": user},
    }


def tar_file_id(info: TarShardInfo) -> str:
    """A tar's id: BLAKE2b-128 of its record and entry rows (keys' hashes, offsets, sizes, CRCs).

    A tar has no id of its own; this one changes whenever a payload, a key or
    a member's place changes, so ``verify`` reports a rewritten tar as such.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(info.records).tobytes())
    h.update(np.ascontiguousarray(info.entries).tobytes())
    return h.hexdigest()


def _tar_columns(info: TarShardInfo) -> dict[str, Any]:
    crcs = np.ascontiguousarray(info.entries["crc"], dtype="<u4")
    return {
        "kind": "tar",
        "shard_number": info.shard_number,
        "file_id": tar_file_id(info),
        "format_major": 0,
        "format_minor": 0,
        "flags": 0,
        "created_at": dt.datetime.now(dt.UTC),  # when it was indexed: a tar has no writer clock
        "alignment": 1,
        "compression": "none",
        "header_crc": 0,
        "record_count": len(info.records),
        "entry_count": len(info.entries),
        "size_bytes": int(info.size),
        "payload_bytes": info.payload_bytes(),
        "data_crc": crc32c(crcs.tobytes()),
        "footer_crc": 0,
        "user_metadata": {
            "tar": {
                "end_offset": int(info.end_offset),
                "member_count": int(info.member_count),
                "skipped": int(info.skipped),
            }
        },
    }


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


def _tar_decode(
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
    # A tar sample has no frame: the layout names the entries, the spans place them.
    names = layout()
    try:
        located = unpack_spans(spans, len(names))
    except ValueError as e:
        raise FormatError(
            f"catalog row is inconsistent: {e}; re-index the tar", path=url, offset=offset
        ) from e
    specs = [EntrySpec(name, ctype, codec) for name, ctype, codec in names]
    from ..format.tar import read_tar_record

    return read_tar_record(view, key, specs, located, path=url, offset=offset)


def _native_check(url: str, storage_options: Any) -> FileCheck:
    try:
        from ..storage.shards import ShardReader

        reader = ShardReader(url, storage_options=storage_options)
    except ShardNotFoundError as e:
        return None, [Problem(url, "missing", f"the shard file does not exist: {e}")], 0
    except (ShardcatError, OSError) as e:
        return None, [Problem(url, "unreadable", str(e))], 0
    with reader:
        try:
            info = reader.info
        except (ShardcatError, OSError) as e:
            return None, [Problem(url, "unreadable", str(e))], 0
        try:
            checked = reader.verify().records
        except (FormatError, OSError) as e:
            # The footer is still compared with the catalog.
            return info, [Problem(url, "corrupt", str(e))], 0
    return info, [], checked


def _native_summary(url: str, storage_options: Any) -> Summary:
    from ..storage.shards import ShardReader

    with ShardReader(url, storage_options=storage_options) as reader:
        return reader.info


def scan_tar_url(url: str, storage_options: Any) -> TarShardInfo:
    """Scan the tar at ``url`` once, streaming (one request per 8 MiB, never one per member).

    Raises
    ------
    ShardNotFoundError
        No file at ``url``.
    TarError
        The tar is damaged (the error names the file and the byte offset).
    """
    from ..format.tar import scan_tar

    source = open_source(url, storage_options)
    try:
        size = source.size()
        stream = source.open_stream()
        try:
            return scan_tar(stream, url, size=size)
        finally:
            stream.close()
    finally:
        source.close()


def _tar_check(url: str, storage_options: Any) -> FileCheck:
    # Scanning reads every byte and checks every header; the payload CRCs it
    # computes are then compared with the rows (a changed payload is a mismatch).
    try:
        info = scan_tar_url(url, storage_options)
    except ShardNotFoundError as e:
        return None, [Problem(url, "missing", f"the tar does not exist: {e}")], 0
    except FormatError as e:
        return None, [Problem(url, "corrupt", f"the tar cannot be scanned: {e}")], 0
    except (ShardcatError, OSError) as e:
        return None, [Problem(url, "unreadable", str(e))], 0
    return info, [], len(info.records)


NATIVE = ShardKind("native", _native_columns, _native_decode, _native_check, _native_summary, True)
TAR = ShardKind("tar", _tar_columns, _tar_decode, _tar_check, scan_tar_url, False)

KINDS: dict[str, ShardKind] = {k.name: k for k in (NATIVE, TAR)}


def shard_kind(name: str) -> ShardKind:
    """The kind of a ``shards`` row.

    Raises
    ------
    FormatError
        The catalog names a kind this shardcat does not know (a newer catalog).
    """
    kind = KINDS.get(name)
    if kind is None:
        raise FormatError(
            f"shard kind {name!r} is unknown to this shardcat (known: {', '.join(KINDS)}); "
            "upgrade shardcat"
        )
    return kind


def kind_of(info: Summary) -> ShardKind:
    """The kind of a summary: a tar scan or a native footer."""
    from ..format.tar import TarShardInfo

    return TAR if isinstance(info, TarShardInfo) else NATIVE


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
    """
    return shard_kind(kind).decode(
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
