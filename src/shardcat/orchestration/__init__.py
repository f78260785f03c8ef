"""Dask orchestration: parallel shard writes and tar indexing committed at once, and parallel reads."""

from __future__ import annotations

from .files import FileSource, from_files
from .index_tar import IndexTarSummary, TarFailure, index_tar
from .progress import WriteProgress, WriteProgressCallback
from .progress_bar import WriteProgressBar
from .read import iter_shard, iter_tar_shard, read
from .write import WriteSummary, write

__all__ = [
    "FileSource",
    "IndexTarSummary",
    "TarFailure",
    "WriteProgress",
    "WriteProgressBar",
    "WriteProgressCallback",
    "WriteSummary",
    "from_files",
    "index_tar",
    "iter_shard",
    "iter_tar_shard",
    "read",
    "write",
]
