"""Dask orchestration: parallel shard writes committed at once, and parallel reads."""

from __future__ import annotations

from .files import FileSource, from_files
from .progress import WriteProgress, WriteProgressCallback
from .progress_bar import WriteProgressBar
from .read import iter_shard, open_registered, read
from .write import WriteSummary, write

__all__ = [
    "FileSource",
    "WriteProgress",
    "WriteProgressBar",
    "WriteProgressCallback",
    "WriteSummary",
    "from_files",
    "iter_shard",
    "open_registered",
    "read",
    "write",
]
