"""shardcat: numbered binary shards in any object store, found by key through a SQL catalog.

>>> import shardcat
>>> with shardcat.ShardWriter("train-000000.shard") as w:  # doctest: +SKIP
...     w.add("img/0001", {"jpg": jpeg_bytes, "json": {"label": 3}})
>>> shardcat.ShardReader("train-000000.shard").get("img/0001")["json"].decode()  # doctest: +SKIP
{'label': 3}
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import (
    CatalogError,
    ChecksumError,
    DuplicateKeyError,
    FormatError,
    KeyNotFoundError,
    ShardcatError,
    ShardNotFoundError,
    TruncatedError,
    VersionError,
)
from .format import Codec, Entry, Record, ShardInfo, VerifyReport
from .storage.shards import RollingShardWriter, ShardReader, ShardWriter, open_shard

__all__ = [
    "Catalog",
    "CatalogError",
    "ChecksumError",
    "Codec",
    "DuplicateKeyError",
    "Entry",
    "FormatError",
    "KeyNotFoundError",
    "Record",
    "RollingShardWriter",
    "ShardInfo",
    "ShardNotFoundError",
    "ShardReader",
    "ShardWriter",
    "ShardcatError",
    "TruncatedError",
    "VerifyReport",
    "VersionError",
    "__version__",
    "open_shard",
    "read",
    "write",
]


def __getattr__(name: str) -> object:
    # The catalog (SQLAlchemy) and Dask orchestration load on first use, so
    # `import shardcat` stays fast for code that only reads shards.
    if name == "Catalog":
        from .catalog import Catalog

        return Catalog
    if name in ("write", "read"):
        from . import orchestration

        return getattr(orchestration, name)
    raise AttributeError(f"module 'shardcat' has no attribute {name!r}")
