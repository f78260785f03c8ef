"""The SQL catalog: datasets, shards and records, found by key in one query plus one read.

See docs/CATALOG.md for the schema, how lookups work and example queries.

>>> from shardcat.catalog import Catalog
>>> with Catalog("sqlite:///shardcat.db") as cat:  # doctest: +SKIP
...     cat.create_dataset("train", "s3://bucket/train/", exist_ok=True)
...     cat.register_shard("train", info)
...     record = cat.get("train", "img/00412345")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .catalog import Catalog, CatalogHandle
from .migrate import check, current, downgrade, head_revision, upgrade, verify_schema
from .results import (
    BatchResult,
    CatalogReport,
    DatasetInfo,
    DatasetSummary,
    EntryKind,
    JobInfo,
    Location,
    Problem,
    ShardRow,
    VersionDiff,
    VersionInfo,
)
from .session import DEFAULT_URL, catalog_exists, create_catalog_engine, display_url

if TYPE_CHECKING:
    from .selection import SAMPLE_COLUMNS, Selection
    from .versions import ExpireResult

# Names whose modules load the ORM models: imported on first use, so that
# opening a catalog for lookups does not (issue 10).
_LAZY = {"SAMPLE_COLUMNS": ".selection", "Selection": ".selection", "ExpireResult": ".versions"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # the next access skips this function
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_URL",
    "SAMPLE_COLUMNS",
    "BatchResult",
    "Catalog",
    "CatalogHandle",
    "CatalogReport",
    "DatasetInfo",
    "DatasetSummary",
    "EntryKind",
    "ExpireResult",
    "JobInfo",
    "Location",
    "Problem",
    "Selection",
    "ShardRow",
    "VersionDiff",
    "VersionInfo",
    "catalog_exists",
    "check",
    "create_catalog_engine",
    "current",
    "display_url",
    "downgrade",
    "head_revision",
    "upgrade",
    "verify_schema",
]
