"""shardcat: numbered binary shards in any object store, found by key through a SQL catalog.

>>> import shardcat
>>> with shardcat.ShardWriter("train-000000.shard") as w:  # doctest: +SKIP
...     w.add("img/0001", {"jpg": jpeg_bytes, "json": {"label": 3}})
>>> shardcat.ShardReader("train-000000.shard").get("img/0001")["json"].decode()  # doctest: +SKIP
{'label': 3}
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._version import __version__
from .errors import (
    CatalogError,
    ChecksumError,
    DuplicateKeyError,
    FormatError,
    KeyNotFoundError,
    KeyOrderUnavailableError,
    KeyTextUnavailableError,
    ShardcatError,
    ShardNotFoundError,
    TruncatedError,
    VersionError,
)

if TYPE_CHECKING:
    from . import catalog as catalog
    from . import format as format
    from . import orchestration as orchestration
    from . import reading as reading
    from . import storage as storage
    from .format import Codec, Entry, Record, ShardInfo, VerifyReport

    # From the defining modules: compact, export, index_tar, read and write are also the
    # names of orchestration's submodules, which mypy may otherwise bind first.
    from .orchestration.compact import compact
    from .orchestration.copy import copy_dataset
    from .orchestration.dataset_writer import DatasetWriter
    from .orchestration.export import export
    from .orchestration.files import from_files
    from .orchestration.groups import add_entries
    from .orchestration.index_columnar import index_directory
    from .orchestration.index_files import index_files
    from .orchestration.index_tar import index_tar
    from .orchestration.keys import delete_keys
    from .orchestration.read import read
    from .orchestration.update_fields import update_fields
    from .orchestration.write import write
    from .readers import to_dask_dataframe
    from .reading import Catalog
    from .storage.shards import RollingShardWriter, ShardReader, ShardWriter, open_shard
    from .storage.streaming import iter_shards

__all__ = [
    "Catalog",
    "CatalogError",
    "ChecksumError",
    "Codec",
    "DatasetWriter",
    "DuplicateKeyError",
    "Entry",
    "FormatError",
    "KeyNotFoundError",
    "KeyOrderUnavailableError",
    "KeyTextUnavailableError",
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
    "add_entries",
    "compact",
    "copy_dataset",
    "delete_keys",
    "export",
    "from_files",
    "index_directory",
    "index_files",
    "index_tar",
    "iter_shards",
    "open_shard",
    "read",
    "to_dask_dataframe",
    "update_fields",
    "write",
]

# Names whose modules load on first use: the shard format (numpy, crc32c), the
# URL-aware readers and writers (fsspec), the catalog (SQLAlchemy) and Dask
# orchestration. `import shardcat.format` then loads none of the others, so code
# that only encodes or decodes shard bytes stays light, and `shardcat --help`
# (which imports shardcat.cli) loads none of them.
_LAZY = {
    "Codec": ".format",
    "Entry": ".format",
    "Record": ".format",
    "ShardInfo": ".format",
    "VerifyReport": ".format",
    "RollingShardWriter": ".storage.shards",
    "ShardReader": ".storage.shards",
    "ShardWriter": ".storage.shards",
    "open_shard": ".storage.shards",
    "iter_shards": ".storage.streaming",
    "Catalog": ".reading",
    "add_entries": ".orchestration",
    "compact": ".orchestration",
    "copy_dataset": ".orchestration",
    "DatasetWriter": ".orchestration",
    "delete_keys": ".orchestration",
    "export": ".orchestration",
    "from_files": ".orchestration",
    "index_directory": ".orchestration",
    "index_files": ".orchestration",
    "index_tar": ".orchestration",
    "read": ".orchestration",
    "update_fields": ".orchestration",
    "write": ".orchestration",
    "to_dask_dataframe": ".readers",
}
_SUBPACKAGES = ("catalog", "config", "format", "orchestration", "readers", "reading", "storage")


def __getattr__(name: str) -> object:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # the next access skips this function
        return value
    if name in _SUBPACKAGES:  # `import shardcat; shardcat.storage.join(...)` keeps working
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'shardcat' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, *_SUBPACKAGES})
