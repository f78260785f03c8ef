"""The fsspec boundary: URLs, open sources and batched reads, write-once puts, URL-aware shards."""

from __future__ import annotations

from .atomic import PendingFile, open_pending
from .cache import REMOTE_MAX_GAP_ENV, SourceCache, fetch_ranges, resolve_remote_max_gap
from .fs import (
    brace_patterns,
    brace_range,
    expand_braces,
    is_local,
    join,
    local_path,
    redact,
    resolve,
)
from .local_cache import LocalShardCache
from .locations import dataset_prefix, first_free, shard_name
from .retry import gave_up
from .shards import open_writer
from .sources import FsspecSource, open_source, retried
from .streaming import iter_shards
from .transport import TRANSPORT_ENV, TransportChoice, choose_transport

__all__ = [
    "REMOTE_MAX_GAP_ENV",
    "TRANSPORT_ENV",
    "FsspecSource",
    "LocalShardCache",
    "PendingFile",
    "SourceCache",
    "TransportChoice",
    "brace_patterns",
    "brace_range",
    "choose_transport",
    "dataset_prefix",
    "expand_braces",
    "fetch_ranges",
    "first_free",
    "gave_up",
    "is_local",
    "iter_shards",
    "join",
    "local_path",
    "open_pending",
    "open_source",
    "open_writer",
    "redact",
    "resolve",
    "resolve_remote_max_gap",
    "retried",
    "shard_name",
]
