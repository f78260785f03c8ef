"""Dask orchestration: parallel shard writes committed at once, and parallel reads."""

from __future__ import annotations

from .files import FileSource, from_files
from .keys import delete_keys
from .progress import WriteProgress, WriteProgressCallback
from .progress_bar import WriteProgressBar
from .read import iter_shard, read
from .write import WriteSummary, write

__all__ = [
    "FileSource",
    "WriteProgress",
    "WriteProgressBar",
    "WriteProgressCallback",
    "WriteSummary",
    "delete_keys",
    "from_files",
    "iter_shard",
    "read",
    "write",
]
