"""``shardcat.index_directory``: MDS and LitData directories registered in place.

The client reads the directory's ``index.json`` (:mod:`shardcat.reading.columnar`):
its files and their layout, which is refused here, typed, before a cluster
starts, if the files are compressed or of a layout shardcat cannot read
from byte ranges. One Dask task per file reads it whole (one request),
computes every column's CRC32C while scanning its samples, and stages it
under the job as a shard of kind ``mds`` or ``litdata``: each sample a
record whose byte range is its range in the file, each column an entry.
When every task has reported, the client commits the job in one
transaction (:func:`~shardcat.orchestration.in_place.run_in_place`), as
for tars: a bad file fails the job (``on_error="fail"``, nothing visible)
or is reported and left out (``"skip"``). No file is ever written or
deleted here, and ``gc`` and ``delete`` never delete them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._units import count_of
from ..errors import FormatError, ShardNotFoundError
from ..format.columnar import ColumnFile, ColumnLayout
from ..reading.columnar import directory_files, scan_file
from ..storage import is_local, local_path, redact
from .cluster import ClientChoice
from .in_place import InPlaceTasks, run_in_place
from .index_tar import OnError, TarFailure, TarResult, registered_urls, split_results
from .reach import refuse_in_memory
from .tasks import catalog_for
from .throughput import Throughput
from .watch import TaskProgressCallback

if TYPE_CHECKING:
    from ..reading import Catalog, CatalogHandle

__all__ = ["IndexColumnarSummary", "index_directory"]

log = logging.getLogger(__name__)

_NAMES = {"mds": ("MDS", "shard"), "litdata": ("LitData", "chunk")}


@dataclass(frozen=True)
class IndexColumnarSummary(Throughput):
    """What a committed MDS or LitData indexing job registered (``failed``: files left out)."""

    dataset: str
    job_id: int
    kind: str
    """``mds`` or ``litdata``."""
    directory: str
    seconds: float
    files: list[str]
    """The files registered, and their samples and bytes."""
    records: int
    bytes: int
    failed: list[TarFailure] = field(default_factory=list)

    @classmethod
    def of(
        cls, dataset: str, job_id: int, kind: str, directory: str, seconds: float,
        results: list[TarResult],
    ) -> IndexColumnarSummary:  # fmt: skip
        """The summary of the tasks' ``results`` (the files left out logged)."""
        done, failed = split_results(results)
        files = [r.url for r in done]
        records, size = sum(r.records for r in done), sum(r.bytes for r in done)
        return cls(dataset, job_id, kind, directory, seconds, files, records, size, failed)

    def __str__(self) -> str:
        fmt, unit = _NAMES[self.kind]
        skipped = f", {count_of(len(self.failed), unit)} skipped" if self.failed else ""
        return (
            f"indexed {count_of(self.records, 'sample')} in {count_of(len(self.files), fmt + ' ' + unit)} "
            f"of {self.directory} into {self.dataset!r} (job {self.job_id}, "
            f"{self.volume}{skipped})"
        )


def index_columnar_task(
    file: ColumnFile,
    layout: ColumnLayout,
    number: int,
    storage_options: dict[str, Any],
    catalog: CatalogHandle,
    dataset: str,
    job_id: int,
    on_error: OnError,
) -> TarResult:
    """Read one file, scan it and stage it in the job (runs on a worker).

    Raises
    ------
    ColumnarError, ShardNotFoundError, StorageError
        With ``on_error="fail"``; with ``"skip"`` the result carries the failure instead.
    """
    try:
        info = scan_file(file, layout, storage_options, number)
    except (FormatError, ShardNotFoundError) as e:
        if on_error == "fail":
            raise
        return TarResult(file.url, failure=TarFailure(redact(file.url), type(e).__name__, str(e)))
    catalog_for(catalog).register_shard(dataset, info, job=job_id)
    return TarResult(redact(file.url), len(info.records), info.size)


def index_directory(
    source: str | os.PathLike[str],
    *,
    catalog: Catalog | str | None = None,
    dataset: str,
    format: Literal["mds", "litdata"] | None = None,
    key_column: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    client: ClientChoice = None,
    on_error: OnError = "fail",
    retries: int = 2,
    progress: TaskProgressCallback | None = None,
) -> IndexColumnarSummary:
    """Register an MDS or LitData directory in place, committed as one job.

    Every sample gets a key lookup (one SQL query, one ranged read of its
    bytes in its file), each column an entry, CRC32C-checked on every read.
    An MDS column becomes an entry of its name; a LitData sample's leaf one
    named by its path in the sample's tree (``image``, ``meta.a``).

    Parameters
    ----------
    source:
        The directory holding ``index.json`` and its files (MDS shards,
        LitData chunks): a local path or any fsspec URL.
    catalog:
        A :class:`~shardcat.Catalog` or its URL (default: the default catalog).
    dataset:
        The dataset to add the samples to (created if missing, rooted at the
        directory; removed again if this first job fails).
    format:
        ``"mds"`` (MosaicML Streaming's ``MDSWriter``) or ``"litdata"``
        (``litdata.optimize``); by default what ``index.json`` is.
    key_column:
        The column whose values are the keys (text or integer; it is then no
        entry). By default a sample's key is its index in the directory
        (``"0"``, ``"1"``...: the index the library's ``StreamingDataset`` gives it).
    storage_options:
        fsspec options for reading the directory (never stored).
    client:
        As for :func:`shardcat.index_tar`.
    on_error:
        ``"fail"``: a damaged or missing file fails the job (nothing is
        committed); ``"skip"``: it is reported in
        :attr:`IndexColumnarSummary.failed` and left out.
    retries:
        Dask retries per task (a killed worker's task runs again).
    progress:
        Called as ``progress(done, total)`` with the files indexed so far.

    Raises
    ------
    CompressedShardsError
        The files are compressed (or LitData's encrypted); the error names how.
    ColumnarError
        ``index.json`` is not an index of ``format`` (of LitData's default item
        loader), a file is damaged (``on_error="fail"``), or ``key_column``
        is not a text or integer column.
    ColumnarTruncatedError
        A file is shorter than its offset table or ``index.json`` says.
    DuplicateKeyError
        A key repeats, or exists among committed records (nothing committed).
    ShardNotFoundError, StorageError
        ``index.json`` or a file cannot be read.
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout`` seconds.
    """
    from ..reading import Catalog

    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    opts = dict(storage_options or {})
    url = os.fspath(source)
    # Local directories are stored as absolute paths, as tars are: what lookups open with pread.
    root = os.path.abspath(local_path(url)) if is_local(url) else url.rstrip("/")
    layout, files = directory_files(format, root, opts, key_column)
    with Catalog.opened(catalog, storage_options=opts) as cat:
        refuse_in_memory(cat)

        def submit(dask_client: Any, tasks: InPlaceTasks) -> list[Any]:
            work = [
                (f, layout, i, opts, tasks.handle, dataset, tasks.job_id, on_error)
                for i, f in enumerate(files)
            ]
            return tasks.submit(dask_client, index_columnar_task, work, retries)

        job_id, results, seconds = run_in_place(
            cat,
            what=f"index-{layout.kind}",
            dataset=dataset,
            root=root,
            folders={root: opts},
            client=client,
            near=root,
            properties={"files": len(files), "key_column": key_column},
            storage_options=opts,
            submit=submit,
            progress=progress,
            manifest=registered_urls,
        )
    summary = IndexColumnarSummary.of(dataset, job_id, layout.kind, redact(root), seconds, results)
    log.info("%s", summary)
    return summary
