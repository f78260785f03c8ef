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

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from .catalog import Catalog, CatalogHandle
from .dataset import Dataset, DatasetStats

if TYPE_CHECKING:
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

# History (manifests in the store: the storage writers) loads on first use: a lookup needs none of it.
_LAZY = {"HistoryRebuild": ".history", "HistoryWrite": ".history", "has_history": ".history"}


__getattr__ = lazy_names(__name__, _LAZY)
