"""The fsspec boundary: URLs, open sources and batched reads, write-once puts, URL-aware shards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from .atomic import PendingFile, open_pending
    from .cache import (
        REMOTE_MAX_GAP_ENV,
        SourceCache,
        fetch_ranges,
        resolve_max_open,
        resolve_remote_max_gap,
    )
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
    from .locations import GROUPS_FOLDER, dataset_prefix, first_free, is_group_shard, shard_name
    from .retry import gave_up
    from .shards import open_writer
    from .sources import FsspecSource, open_source, retried
    from .streaming import iter_shards
    from .transport import TRANSPORT_ENV, TransportChoice, choose_transport

__all__ = [
    "GROUPS_FOLDER",
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
    "is_group_shard",
    "is_local",
    "iter_shards",
    "join",
    "local_path",
    "open_pending",
    "open_source",
    "open_writer",
    "redact",
    "resolve",
    "resolve_max_open",
    "resolve_remote_max_gap",
    "retried",
    "shard_name",
]

# Names whose modules load on first use: a lookup of a local shard needs the
# source cache and URL helpers, not the object-store clients (obstore, ssl),
# the writers or the streaming readers behind the other names.
_LAZY = {
    "PendingFile": ".atomic",
    "open_pending": ".atomic",
    "REMOTE_MAX_GAP_ENV": ".cache",
    "SourceCache": ".cache",
    "fetch_ranges": ".cache",
    "resolve_max_open": ".cache",
    "resolve_remote_max_gap": ".cache",
    "brace_patterns": ".fs",
    "brace_range": ".fs",
    "expand_braces": ".fs",
    "is_local": ".fs",
    "join": ".fs",
    "local_path": ".fs",
    "redact": ".fs",
    "resolve": ".fs",
    "LocalShardCache": ".local_cache",
    "GROUPS_FOLDER": ".locations",
    "dataset_prefix": ".locations",
    "first_free": ".locations",
    "is_group_shard": ".locations",
    "shard_name": ".locations",
    "gave_up": ".retry",
    "open_writer": ".shards",
    "FsspecSource": ".sources",
    "open_source": ".sources",
    "retried": ".sources",
    "iter_shards": ".streaming",
    "TRANSPORT_ENV": ".transport",
    "TransportChoice": ".transport",
    "choose_transport": ".transport",
}


__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
