"""The SQL catalog: datasets, shards and records, found by key in one query plus one read.

See docs/CATALOG.md for the schema, how lookups work and example queries.

>>> from shardcat.catalog import Catalog
>>> with Catalog("sqlite:///shardcat.db") as cat:  # doctest: +SKIP
...     cat.create_dataset("train", "s3://bucket/train/", exist_ok=True)
...     cat.register_shard("train", info)
...     record = cat.get("train", "img/00412345")
"""

from __future__ import annotations

from .catalog import Catalog
from .migrate import check, current, downgrade, head_revision, upgrade, verify_schema
from .results import BatchResult, CatalogReport, DatasetInfo, JobInfo, Location, Problem, ShardRow
from .session import DEFAULT_URL, create_catalog_engine

__all__ = [
    "DEFAULT_URL",
    "BatchResult",
    "Catalog",
    "CatalogReport",
    "DatasetInfo",
    "JobInfo",
    "Location",
    "Problem",
    "ShardRow",
    "check",
    "create_catalog_engine",
    "current",
    "downgrade",
    "head_revision",
    "upgrade",
    "verify_schema",
]
