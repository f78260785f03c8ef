"""Dask orchestration: parallel shard writes committed at once, and parallel reads."""

from __future__ import annotations

from .read import iter_shard, read
from .write import WriteSummary, write

__all__ = ["WriteSummary", "iter_shard", "read", "write"]
