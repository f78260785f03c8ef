"""The SQL catalog: datasets, shards, jobs, versions and where every record is.

See docs/CATALOG.md for the schema, how lookups work and example queries.
Reading records by key is the layer above (:mod:`shardcat.reading`), whose
:class:`~shardcat.reading.Catalog` (``shardcat.Catalog``) adds it to
:class:`SqlCatalog`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .catalog import SqlCatalog
from .migrate import check, current, downgrade, head_revision, upgrade, verify_schema
from .partitions import partition_records
from .results import (
    BatchResult,
    CatalogReport,
    DatasetInfo,
    DatasetSummary,
    EntryInfo,
    EntryKind,
    GroupInfo,
    JobInfo,
    Location,
    Problem,
    ShardRow,
    VersionDiff,
    VersionInfo,
)
from .session import DEFAULT_URL, catalog_exists, create_catalog_engine, display_url

if TYPE_CHECKING:
    from .fields import kind_of
    from .selection import SAMPLE_COLUMNS, Selection
    from .versions import ExpireResult

# Names whose modules load the ORM models: imported on first use, so that
# opening a catalog for lookups does not.
_LAZY = {
    "SAMPLE_COLUMNS": ".selection",
    "Selection": ".selection",
    "ExpireResult": ".versions",
    "kind_of": ".fields",
}

# Names that moved up to shardcat.reading (the layers forbid importing them back here).
_MOVED = frozenset({"Catalog", "CatalogHandle"})


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # the next access skips this function
        return value
    if name in _MOVED:
        # An ImportError, not an AttributeError: `from shardcat.catalog import Catalog`
        # shows this message instead of Python's bare "cannot import name".
        raise ImportError(
            f"shardcat.catalog.{name} moved: the catalog package holds the SQL only, and the "
            f"public {name} (SQL plus reads) is in the read layer; use "
            f"`from shardcat import {name}` (or `from shardcat.reading import {name}`)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_URL",
    "SAMPLE_COLUMNS",
    "BatchResult",
    "CatalogReport",
    "DatasetInfo",
    "DatasetSummary",
    "EntryInfo",
    "EntryKind",
    "ExpireResult",
    "GroupInfo",
    "JobInfo",
    "Location",
    "Problem",
    "Selection",
    "ShardRow",
    "SqlCatalog",
    "VersionDiff",
    "VersionInfo",
    "catalog_exists",
    "check",
    "create_catalog_engine",
    "current",
    "display_url",
    "downgrade",
    "head_revision",
    "kind_of",
    "partition_records",
    "upgrade",
    "verify_schema",
]
