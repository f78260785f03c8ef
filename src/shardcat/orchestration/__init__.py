"""Dask orchestration: parallel shard writes committed at once, and parallel reads."""

from __future__ import annotations

from .copy import CopySummary, copy_dataset
from .files import FileSource, from_files
from .progress import WriteProgress, WriteProgressCallback
from .progress_bar import WriteProgressBar
from .read import iter_shard, read
from .write import WriteSummary, write

__all__ = [
    "CopySummary",
    "FileSource",
    "WriteProgress",
    "WriteProgressBar",
    "WriteProgressCallback",
    "WriteSummary",
    "copy_dataset",
    "from_files",
    "iter_shard",
    "read",
    "write",
]
