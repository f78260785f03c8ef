"""A shard's two ends, read for the quick verify: its size, and a native shard's header and trailer.

``verify(quick=True)`` reads no record: per shard one size and, for a native
shard, its first and last 64 bytes (two ranged reads, or one request each on
an object store). The header names the file (its random ``file_id``) and its
CRC; the trailer, whose own CRC32C is checked as it is decoded, holds the
record and entry counts, the CRCs of the data and the footer, and where the
footer starts. :func:`shardcat.catalog.quickcheck.compare_ends` then compares
them, and the rows' counts and spans, with the catalog. A file indexed in place
(a tar, an MDS shard, a LitData chunk) has its size read; a folder group's
files are checked by the full verify only.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .._types import ByteRange
from ..catalog.kinds import RANGES_OF_FILE, Ends, EndsCheck
from ..catalog.results import Problem
from ..errors import FormatError, ShardcatError, ShardNotFoundError
from ..format.header import Header, Trailer
from ..format.spec import HEADER_SIZE, TRAILER_SIZE
from ..storage import open_source

if TYPE_CHECKING:
    from ..catalog.models import Shard

__all__ = ["ENDS_READ", "read_ends"]

ENDS_READ = frozenset({"native"}) | RANGES_OF_FILE
"""Kinds whose files the quick verify reads (their size; a native shard's header and trailer)."""


def _ends(shard: Shard, storage_options: Any) -> Ends:
    source = open_source(shard.url, storage_options)
    try:
        size = source.size()
        if shard.kind != "native" or size < HEADER_SIZE + TRAILER_SIZE:
            return Ends(size)  # a native file this short is reported by its size
        head, tail = source.read_ranges(
            [ByteRange(0, HEADER_SIZE), ByteRange(size - TRAILER_SIZE, size)]
        )
    finally:
        source.close()
    header = Header.decode(head, path=shard.url, warn=False)
    trailer = Trailer.decode(tail, path=shard.url, file_offset=size - TRAILER_SIZE)
    return Ends(size, header, trailer, HEADER_SIZE + TRAILER_SIZE)


def _check(shard: Shard, storage_options: Any) -> EndsCheck:
    url = shard.url
    try:
        return _ends(shard, storage_options), []
    except ShardNotFoundError as e:
        return None, [Problem(url, "missing", f"the shard file does not exist: {e}")]
    except FormatError as e:  # a bad magic, a newer format, a CRC at either end
        return None, [
            Problem(url, "unreadable", f"the shard's header or trailer cannot be decoded: {e}")
        ]
    except (ShardcatError, OSError) as e:
        return None, [Problem(url, "unreadable", str(e))]


def read_ends(
    shards: list[Shard],
    storage_options: Any,
    *,
    workers: int,
    on_shard: Callable[[str, int], None] | None = None,
) -> list[EndsCheck]:
    """Each shard's :class:`Ends` (None for a kind not in :data:`ENDS_READ`), or its problems.

    No SQL: outside any transaction. ``on_shard(url, total)`` is called as each finishes.
    """

    def one(shard: Shard) -> EndsCheck:
        try:
            if shard.kind not in ENDS_READ:
                return None, []
            return _check(shard, storage_options)
        except Exception as e:
            # As the full check's last line of defence: whatever one shard's store does (an
            # unknown protocol, a backend not installed), it is reported, the others checked.
            return None, [Problem(shard.url, "unreadable", f"{type(e).__name__}: {e}")]
        finally:
            if on_shard is not None:
                on_shard(shard.url, len(shards))

    if len(shards) > 1 and workers > 1:
        with ThreadPoolExecutor(max_workers=min(workers, len(shards))) as pool:
            return list(pool.map(one, shards))
    return [one(s) for s in shards]
