"""What ``shardcat serve`` answers, as JSON: datasets, versions, samples, entries, errors.

Every document is built here from shardcat's own values, field by field:
nothing is dumped whole, so a store URL (a dataset's ``root_url``, a shard's
``url``) can only reach a response by being named here, and none is.
Errors are ``{"error": type name, "message": ..., "hint": ...}`` with the
status :func:`error_status` gives; a server-side failure (storage, a corrupt
shard) says what failed without its message, whose paths stay in the log.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import crc32c

from .. import errors as e
from ..catalog.results import DatasetSummary, EntryInfo, VersionInfo
from ..format import Entry, Record
from ..format.entries import guess_content_type

__all__ = [
    "INLINE_MAX",
    "OCTET",
    "content_type_of",
    "crc_of",
    "dataset_json",
    "described_json",
    "dumps",
    "entry_json",
    "error_body",
    "error_status",
    "etag_of",
    "json_cell",
    "sample_json",
    "version_json",
    "wants_bytes",
]

INLINE_MAX = 64 * 1024
"""Text and JSON entries up to this size are inlined in a sample's document."""
OCTET = "application/octet-stream"
_INLINE_TYPES = ("application/json", "text/")


def dumps(doc: Any) -> bytes:
    """``doc`` as compact UTF-8 JSON (non-ASCII kept; NaN refused: :func:`json_cell` first)."""
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def json_cell(value: Any) -> Any:
    """A SQL value as JSON has it: bytes as base64, times as ISO 8601, NaN and infinities as None."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [json_cell(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): json_cell(v) for k, v in value.items()}
    return str(value)  # Decimal, UUID, ...


def _time(value: dt.datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:  # SQLite keeps UTC without a zone
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.isoformat()


# --- datasets and versions ---------------------------------------------------------------


def dataset_json(
    catalog: str, summary: DatasetSummary, version: int, tags: Mapping[str, int]
) -> dict[str, Any]:
    """A dataset as listed: its catalog, name, version, counts, sizes and tags (no root URL)."""
    return {
        "catalog": catalog,
        "name": summary.name,
        "version": version,
        "record_count": summary.record_count,
        "shard_count": summary.shard_count,
        "size_bytes": summary.size_bytes,
        "tags": dict(sorted(tags.items())),
        "created_at": _time(summary.created_at),
    }


def version_json(v: VersionInfo) -> dict[str, Any]:
    """One kept version, as ``shardcat log`` lists it."""
    return {
        "number": v.number,
        "created_at": _time(v.created_at),
        "operation": v.operation,
        "records_added": v.records_added,
        "records_removed": v.records_removed,
        "bytes_added": v.bytes_added,
        "bytes_removed": v.bytes_removed,
        "message": v.message,
        "total_records": v.total_records,
        "total_bytes": v.total_bytes,
        "tags": list(v.tags),
    }


# --- samples and entries -----------------------------------------------------------------


def content_type_of(name: str, stored: str) -> str:
    """The type an entry is served as: the one it was written with, else its name's extension's.

    ``jpg``/``png``/``webp`` are images, ``json`` JSON, ``txt``/``text``/``cls``
    text, ``npy`` NumPy, ``mp4`` video, ``wav`` audio (``format.entries``);
    anything unknown is ``application/octet-stream``.
    """
    if stored and stored != OCTET:
        return stored
    return guess_content_type(name)


def crc_of(view: memoryview | bytes) -> int:
    """CRC32C of an entry's bytes as served (decompressed), the same check the format uses."""
    return int(crc32c.crc32c(view))


def etag_of(crc: int, size: int) -> str:
    """The quoted ETag of an entry: the CRC32C and length of its stored bytes, in hex."""
    return f'"{crc:08x}-{size:x}"'


def entry_json(name: str, entry: Entry, href: str, *, data: bool = False) -> dict[str, Any]:
    """An entry: name, content type, size, CRC32C, its bytes' URL, and small text or JSON inline.

    ``data``: the bytes too, base64-encoded (the batch endpoint's ``"data": true``).
    """
    view = entry.view
    kind = content_type_of(name, entry.content_type)
    doc: dict[str, Any] = {
        "name": name,
        "content_type": kind,
        "size": view.nbytes,
        "crc32c": f"{crc_of(view):08x}",
        "href": href,
    }
    if view.nbytes <= INLINE_MAX and kind.startswith(_INLINE_TYPES):
        try:
            text = bytes(view).decode("utf-8")
            doc["inline"] = json.loads(text) if kind.startswith("application/json") else text
        except ValueError:  # not UTF-8, not JSON: the bytes are at href
            pass
    if data:
        doc["data"] = base64.b64encode(view).decode("ascii")
    return doc


def described_json(info: EntryInfo, href: str) -> dict[str, Any]:
    """An uncompressed entry known from its catalog row only (its bytes were not read)."""
    return {
        "name": info.name,
        "content_type": content_type_of(info.name, info.content_type),
        "size": info.size,
        "crc32c": f"{info.crc32c:08x}",
        "href": href,
    }


def wants_bytes(info: EntryInfo) -> bool:
    """Whether a sample's document needs an entry's bytes: text or JSON to inline, or a
    compressed entry, whose size and CRC once read the catalog row does not hold."""
    if info.codec != "none":
        return True
    kind = content_type_of(info.name, info.content_type)
    return info.size <= INLINE_MAX and kind.startswith(_INLINE_TYPES)


def sample_json(
    catalog: str,
    dataset: str,
    record: Record,
    version: int | str | None,
    href: Callable[[str], str],
    *,
    data: bool = False,
    described: Sequence[EntryInfo] | None = None,
) -> dict[str, Any]:
    """A sample: its key, the version asked for, and each of its entries (:func:`entry_json`).

    ``described``: every entry of the record from its catalog row, in record
    order; those ``record`` lacks (not read) are listed from the row.
    """
    if described is None:
        entries = [entry_json(n, e, href(n), data=data) for n, e in record.items()]
    else:
        entries = [
            entry_json(i.name, record[i.name], href(i.name), data=data)
            if i.name in record
            else described_json(i, href(i.name))
            for i in described
        ]
    return {
        "catalog": catalog,
        "dataset": dataset,
        "key": record.key,
        "version": version,
        "entries": entries,
    }


# --- errors --------------------------------------------------------------------------------

_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (e.AccessDeniedError, 401),
    (e.RateLimitedError, 429),
    (e.RequestTooLargeError, 413),
    (e.QueryTimeoutError, 504),
    (e.QueryLimitError, 413),
    (e.QueryError, 400),  # the user's SQL (QueryRefusedError among them)
    (e.DatasetNotFoundError, 404),
    (e.VersionNotFoundError, 404),
    (e.KeyNotFoundError, 404),
    (e.EntryNotFoundError, 404),
    (e.TokenNotFoundError, 404),
    (e.KeyOrderUnavailableError, 400),  # keys listed from a dataset without key order or text
    (e.InvalidKeyError, 400),  # InvalidNameError too: a NUL on PostgreSQL, a surrogate
    (e.BadRequestError, 400),
    (e.CatalogLockedError, 503),
    (e.CatalogUnreachableError, 503),
    (e.DecompressionLimitError, 413),
    (e.StorageError, 502),
    (e.ShardNotFoundError, 502),
    (e.FormatError, 502),
)

_SERVER_SIDE = (e.StorageError, e.ShardNotFoundError, e.FormatError)
"""Failures of the stores or the shards: their messages name paths, which stay in the log."""


def error_status(error: BaseException) -> int:
    """The HTTP status of an error (500: anything not a known client or store error)."""
    if isinstance(error, e.AccessDeniedError):
        return error.status
    if isinstance(error, e.DecompressionLimitError):
        return 413
    if isinstance(error, e.SampleDecodeError):
        return 502
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


def error_body(error: BaseException, scrub: Callable[[str], str]) -> dict[str, Any]:
    """``{"error", "message", "hint"}`` for ``error``, its text passed through ``scrub``.

    A store's or a shard's failure, and anything that is not a ShardcatError,
    is described without its message (which may name paths): the server's log has it.
    """
    name = type(error).__name__
    status = error_status(error)
    hint: str | None
    if isinstance(error, _SERVER_SIDE) and not isinstance(error, e.DecompressionLimitError):
        message = (
            "the server could not read this sample from its store "
            f"({name}); the server's log says why"
        )
        hint = (
            # The bytes are there but not what the catalog says: waiting will not change them.
            "the sample's shard no longer matches the catalog: tell the server's operator "
            "(`shardcat verify` lists what is damaged)"
            if isinstance(error, e.FormatError)
            else "retry later; if it persists, tell the server's operator"
        )
    elif isinstance(error, e.ShardcatError) and status != 500:
        message = error.message
        hint = error.hint.cli if error.hint is not None else None
    else:
        message = f"the server failed ({name}); its log says why"
        hint = None
    return {"error": name, "message": scrub(message), "hint": scrub(hint) if hint else None}
