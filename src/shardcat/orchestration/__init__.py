"""Dask orchestration: parallel shard writes, tar, folder, MDS and LitData indexing committed at once, parallel reads, exports."""

from __future__ import annotations

from .cluster import ClientChoice, DaskCluster, client_for
from .compact import CompactSummary, compact
from .copy import CopySummary, copy_dataset
from .dataset_writer import DatasetWriter
from .export import ExportSummary, export
from .files import FileSource, from_files
from .groups import add_entries
from .index_columnar import IndexColumnarSummary, index_directory
from .index_files import FileFailure, IndexFilesSummary, index_files
from .index_tar import IndexTarSummary, TarFailure, index_tar
from .keys import delete_keys
from .progress import WriteProgress, WriteProgressCallback
from .progress_bar import WriteProgressBar
from .read import (
    iter_row_records,
    iter_shard,
    iter_tar_records,
    iter_tar_shard,
    open_registered,
    read,
    tar_rows,
)
from .update_fields import update_fields
from .verify import verify
from .write import WriteSummary, write

__all__ = [
    "ClientChoice",
    "CompactSummary",
    "CopySummary",
    "DaskCluster",
    "DatasetWriter",
    "ExportSummary",
    "FileFailure",
    "FileSource",
    "IndexColumnarSummary",
    "IndexFilesSummary",
    "IndexTarSummary",
    "TarFailure",
    "WriteProgress",
    "WriteProgressBar",
    "WriteProgressCallback",
    "WriteSummary",
    "add_entries",
    "client_for",
    "compact",
    "copy_dataset",
    "delete_keys",
    "export",
    "from_files",
    "index_directory",
    "index_files",
    "index_tar",
    "iter_row_records",
    "iter_shard",
    "iter_tar_records",
    "iter_tar_shard",
    "open_registered",
    "read",
    "tar_rows",
    "update_fields",
    "verify",
    "write",
]
