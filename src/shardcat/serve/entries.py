"""An entry's bytes over HTTP: content type, ETag, conditional requests, ``Range`` and caching.

* ``ETag``: the CRC32C and length of the stored bytes, from the catalog's row
  (:func:`.encoding.etag_of`): the bytes' own for an uncompressed entry.
  ``If-None-Match`` with it (or ``*``) answers 304 without a body, and
  without reading the shard.
* ``Range: bytes=a-b``, ``a-`` or ``-n`` (one range) answers 206 with
  ``Content-Range``, reading only that range of an uncompressed entry
  (:meth:`Catalog.read_part <shardcat.Catalog.read_part>`: a seek in a video
  costs the bytes sent, not the video; such a part is not CRC-checked, the
  whole entry is); a range that starts past the end answers 416 with
  ``Content-Range: bytes */size``. Several ranges, or a header that is not
  a byte range, are ignored (the whole entry, 200), as RFC 9110 allows;
  ``If-Range`` with another ETag asks for the whole entry too.
* ``Cache-Control``: an entry addressed at a version number never changes
  (``max-age=31536000, immutable``); at the latest version or a tag (which
  ``shardcat tag --move`` may move) it is ``no-cache``: kept, but checked
  with its ETag each time (a 304 costs a catalog query and no transfer).
  ``private`` whenever a token was needed, so that no shared cache hands
  one caller's bytes to another; ``public`` on an anonymous server.
* The bytes are data, never a page of this site: ``nosniff``, and a
  sandboxing ``Content-Security-Policy`` in case an entry is HTML or SVG.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import Response

from .limits import check_bytes

__all__ = [
    "ByteSpan",
    "Reader",
    "Unsatisfiable",
    "cache_control",
    "entry_response",
    "if_none_match",
    "not_modified",
    "parse_range",
]

_RANGE = re.compile(r"\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*", re.IGNORECASE)
_SAFE = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; sandbox",
    "Accept-Ranges": "bytes",
}


@dataclass(frozen=True, slots=True)
class ByteSpan:
    """Bytes ``[start, end)`` of an entry."""

    start: int
    end: int


class Unsatisfiable(Exception):
    """A range that selects no byte of the entry (HTTP 416)."""


def parse_range(header: str | None, size: int) -> ByteSpan | None:
    """The one byte range a ``Range`` header asks for (None: send everything).

    Raises
    ------
    Unsatisfiable
        If the range starts at or past ``size``, or is a suffix of zero bytes.
    """
    if not header or "," in header:
        return None  # none, or several ranges: the whole entry (RFC 9110 §14.2 allows it)
    m = _RANGE.fullmatch(header)
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if not first and not last:
        return None
    if not first:  # a suffix: the last n bytes
        n = int(last)
        if n == 0 or size == 0:
            raise Unsatisfiable
        return ByteSpan(max(0, size - n), size)
    start = int(first)
    end = size if not last else min(size, int(last) + 1)
    if last and int(last) < start:
        return None  # invalid: ignored
    if start >= size:
        raise Unsatisfiable
    return ByteSpan(start, end)


def cache_control(*, pinned: bool, private: bool) -> str:
    """``Cache-Control`` of an entry: immutable when ``pinned`` to a version number."""
    scope = "private" if private else "public"
    return f"{scope}, max-age=31536000, immutable" if pinned else f"{scope}, no-cache"


def if_none_match(header: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header matches ``etag`` (or is ``*``): answer 304."""
    if header is None:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def _headers(etag: str, *, pinned: bool, private: bool) -> dict[str, str]:
    return {**_SAFE, "ETag": etag, "Cache-Control": cache_control(pinned=pinned, private=private)}


def not_modified(etag: str, *, pinned: bool, private: bool) -> Response:
    """304: the client's copy is current (no body)."""
    return Response(status_code=304, headers=_headers(etag, pinned=pinned, private=private))


Reader = Callable[["ByteSpan | None"], "memoryview | bytes"]
"""Reads the entry's bytes: all of them (None), or one span of them."""


def entry_response(
    size: int,
    read: Reader,
    content_type: str,
    etag: str,
    *,
    pinned: bool,
    private: bool,
    range_header: str | None,
    if_range: str | None,
    max_bytes: int = 0,
    what: str = "the entry",
) -> Response:
    """The response for an entry of ``size`` bytes (``etag``: its validator), given the
    request's range headers (``If-None-Match`` is :func:`if_none_match`'s, before the bytes are
    read). ``read`` is called once, after the limits are checked, for what is sent: a range
    of a large entry costs a read of that range.

    Raises
    ------
    RequestTooLargeError
        If the bytes to send (the entry, or the range asked for) are more than
        ``max_bytes`` (0: no limit); a 416 is answered whatever the size.
    """
    headers = _headers(etag, pinned=pinned, private=private)
    if if_range is not None and if_range.strip() != etag:
        range_header = None  # the client's copy is another version: send it all
    try:
        span = parse_range(range_header, size)
    except Unsatisfiable:
        return Response(
            status_code=416,
            headers={**headers, "Content-Range": f"bytes */{size}"},
        )
    if max_bytes:
        # Checked before the bytes are copied into the response.
        if span is None:
            check_bytes(size, max_bytes, what, ranged=True)
        else:
            check_bytes(span.end - span.start, max_bytes, "the range", ranged=True)
    if span is None:
        return Response(
            bytes(read(None)), status_code=200, media_type=content_type, headers=headers
        )
    return Response(
        bytes(read(span)),
        status_code=206,
        media_type=content_type,
        headers={**headers, "Content-Range": f"bytes {span.start}-{span.end - 1}/{size}"},
    )
