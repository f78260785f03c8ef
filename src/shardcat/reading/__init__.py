"""Reading records by key: the public :class:`Catalog`, the lookups behind it, and file checks.

The layer above the SQL catalog (:mod:`shardcat.catalog`) and storage
(:mod:`shardcat.storage`): a lookup is one SQL query, then one ranged read,
decoded and checked against the catalog's row. See docs/CATALOG.md.

>>> from shardcat import Catalog
>>> with Catalog("sqlite:///shardcat.db") as cat:  # doctest: +SKIP
...     cat.create_dataset("train", "s3://bucket/train/", exist_ok=True)
...     cat.register_shard("train", info)
...     record = cat.get("train", "img/00412345")
"""

from __future__ import annotations

from .catalog import Catalog, CatalogHandle
from .dataset import Dataset, DatasetStats
from .history import HistoryRebuild, HistoryWrite, has_history

__all__ = [
    "Catalog",
    "CatalogHandle",
    "Dataset",
    "DatasetStats",
    "HistoryRebuild",
    "HistoryWrite",
    "has_history",
]
