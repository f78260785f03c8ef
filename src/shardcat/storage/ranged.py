"""Batched ranged reads across many files: merge nearby ranges, read concurrently."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from .._ranges import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, Coalesced, coalesce, split
from .._types import ByteRange, StorageOptions
from ..errors import ShardNotFoundError, StorageError
from .fs import is_local, redact, resolve
from .sources import open_source

__all__ = ["fetch_ranges"]


def fetch_ranges(
    requests: Sequence[tuple[str, ByteRange]],
    storage_options: StorageOptions | None = None,
    *,
    max_gap: int = DEFAULT_MAX_GAP,
    max_span: int = DEFAULT_MAX_SPAN,
) -> list[memoryview]:
    """The bytes of each ``(url, range)``, in input order.

    Ranges are grouped by file and merged when their gaps are small; all
    merged reads of a remote store go out in one ``cat_ranges`` call, which
    async filesystems (s3fs, gcsfs) issue concurrently. Local files are read
    with ``os.pread``.
    """
    by_url: dict[str, list[int]] = defaultdict(list)
    for i, (url, _) in enumerate(requests):
        by_url[url].append(i)

    out: list[memoryview | None] = [None] * len(requests)
    # One cat_ranges call per filesystem (normally there is just one).
    remote: dict[int, tuple[Any, list[tuple[str, list[int], list[Coalesced], str]]]] = {}
    for url, idxs in by_url.items():
        ranges = [requests[i][1] for i in idxs]
        merged = coalesce(ranges, max_gap, max_span)
        if is_local(url):
            src = open_source(url)
            try:
                blobs = src.read_ranges([m.range for m in merged])
            finally:
                src.close()
            for i, view in zip(idxs, split(merged, blobs, ranges)):
                out[i] = view
        else:
            fs, path = resolve(url, storage_options)
            remote.setdefault(id(fs), (fs, []))[1].append((url, idxs, merged, path))

    for fs, plan in remote.values():
        paths = [path for _, _, merged, path in plan for _ in merged]
        flat = [m.range for _, _, merged, _ in plan for m in merged]
        try:
            blobs = fs.cat_ranges(
                paths, [r.start for r in flat], [r.end for r in flat], on_error="return"
            )
        except OSError as e:
            raise StorageError(f"ranged reads failed: {e}") from e
        at = 0
        for url, idxs, merged, _ in plan:
            mine = blobs[at : at + len(merged)]
            at += len(merged)
            for blob in mine:
                if isinstance(blob, FileNotFoundError):
                    raise ShardNotFoundError(
                        f"{redact(url)}: no such shard (was it deleted or moved?)"
                    ) from blob
                if isinstance(blob, BaseException):
                    raise StorageError(f"{redact(url)}: {blob}") from blob
            ranges = [requests[i][1] for i in idxs]
            for i, view in zip(idxs, split(merged, [bytes(b) for b in mine], ranges)):
                out[i] = view
    return [v if v is not None else memoryview(b"") for v in out]
