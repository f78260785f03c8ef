"""``shardcat.index_files``: a plain folder of files registered in place, one Dask task per group.

The client lists the folder (a local path, any fsspec URL, a glob or a
brace pattern) and groups its files into samples by the key rule of
``shardcat write SRC`` (:func:`~shardcat.orchestration.files.list_source`:
``a/img1.jpg`` and ``a/img1.json`` are entries ``jpg`` and ``json`` of key
``a/img1``), then cuts the samples into groups. One task per group reads
every file once, computes its CRC32C, and stages the group under the job
as one shard of kind ``files`` (:mod:`shardcat.format.folder`): each sample
a record, each entry a whole file. When every task has reported, the client
commits the job in one transaction: the dataset's new version is exactly
the folder's samples as read (``replace``), so indexing the folder again
picks up added, removed and changed files as a new version, while older
versions still read the files they named (where those are still there).

A file that cannot be read fails the job (``on_error="fail"``: nothing is
visible) or is left out, reported (``"skip"``): its sample keeps the files
that could be read. No file is ever
written or deleted here, and ``gc`` and ``delete`` never delete them.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .._pread import read_whole
from .._units import count_of
from ..errors import ShardNotFoundError, StorageError
from ..format.checksums import crc32c
from ..format.folder import FolderSample, entry_path, folder_info, group_url
from ..reading.folder import read_files
from ..storage import is_local, local_path, redact
from .cluster import ClientChoice
from .files import KeyRule, SampleFiles, from_files, list_source
from .in_place import InPlaceTasks, run_in_place
from .reach import refuse_in_memory
from .tasks import catalog_for, field_values
from .throughput import Throughput
from .watch import TaskProgressCallback

if TYPE_CHECKING:
    from ..reading import Catalog, CatalogHandle

__all__ = ["FileFailure", "IndexFilesSummary", "index_files"]

log = logging.getLogger(__name__)

OnError = Literal["fail", "skip"]

GROUP_FILES = 2048
"""Files per task at most: enough to keep a task's overhead small, few enough to spread."""
GROUP_BYTES = 256 * 2**20
"""Bytes per task at most (a task holds one batch of files at a time, not the group)."""


@dataclass(frozen=True, slots=True)
class FileFailure:
    """A file left out of the job (``on_error="skip"``): which, why, and whether its sample went too."""

    url: str
    """The file, ``FOLDER/KEY.ENTRY`` with FOLDER as :attr:`IndexFilesSummary.folder` (a local
    folder's absolute path, whatever form it was given in; any other store's URL): the name
    the dataset's rows, lookups' errors and ``verify`` give the file."""
    key: str
    error: str
    """The error's class name."""
    message: str
    entry: str = ""
    """The file's entry name in its sample (``jpg`` of ``KEY.jpg``)."""
    sample_left_out: bool = False
    """No file of its sample could be read: the sample is not in the new version."""


@dataclass(frozen=True, slots=True)
class GroupResult:
    """What one task reports back: small, no per-record data."""

    url: str | None
    """The staged group's URL; None if every sample of it failed."""
    records: int = 0
    files: int = 0
    bytes: int = 0
    failures: tuple[FileFailure, ...] = ()


@dataclass(frozen=True)
class IndexFilesSummary(Throughput):
    """What a committed folder indexing job registered."""

    dataset: str
    job_id: int
    folder: str
    groups: int
    records: int
    files: int
    bytes: int
    seconds: float
    failed: list[FileFailure] = field(default_factory=list)
    """Files that could not be read (``on_error="skip"``), one each: their samples were
    indexed with the other files, or left out where none could be read."""
    hidden: int = 0
    """Hidden files (a dot-name in their path) that were not indexed."""
    skipped: list[str] = field(default_factory=list)
    """Files without an entry name skipped on request (``skip_unmatched``)."""

    @property
    def samples_left_out(self) -> int:
        """Samples not indexed because none of their files could be read."""
        return len({f.key for f in self.failed if f.sample_left_out})

    def __str__(self) -> str:
        skipped = ""
        if self.failed:
            left = self.samples_left_out
            partial = len({f.key for f in self.failed}) - left
            skipped = f", {count_of(len(self.failed), 'unreadable file')} skipped: "
            skipped += f"{count_of(partial, 'sample')} indexed without them, {left:,} left out"
        return (
            f"indexed {count_of(self.records, 'sample')} ({count_of(self.files, 'file')}) of "
            f"{self.folder} into {self.dataset!r} (job {self.job_id}, "
            f"{self.volume}{skipped})"
        )


def plan_groups(
    samples: Sequence[SampleFiles], max_files: int = GROUP_FILES, max_bytes: int = GROUP_BYTES
) -> list[list[SampleFiles]]:
    """Samples cut into groups, in listing order, of at most ``max_files`` files or ``max_bytes``.

    A sample is never split; one larger than a group gets a group of its own.
    """
    groups: list[list[SampleFiles]] = []
    current: list[SampleFiles] = []
    files = size = 0
    for sample in samples:
        if current and (files + len(sample.files) > max_files or size + sample.size > max_bytes):
            groups.append(current)
            current, files, size = [], 0, 0
        current.append(sample)
        files += len(sample.files)
        size += sample.size
    if current:
        groups.append(current)
    return groups


@dataclass(frozen=True, slots=True)
class GroupWork:
    """One task's samples, ``(key, entry names)`` each, the files being ``folder/key.entry``.

    A holder rather than the list itself: Dask walks every list and tuple
    of a task's arguments looking for futures, which cost the client
    ~25 ms per group of 2,048 files (half a second for 40,000 files).
    """

    samples: list[tuple[str, tuple[str, ...]]]


# Files read at once by a task: the bytes it holds stay bounded (a group may be 256 MiB).
_READ_FILES = 64


def index_files_task(
    work: GroupWork,
    folder: str,
    group: int,
    storage_options: dict[str, Any],
    catalog: CatalogHandle,
    dataset: str,
    job_id: int,
    on_error: OnError,
    fields: tuple[str, ...] = (),
    fields_entry: str = "json",
) -> GroupResult:
    """Read one group's files, and stage the group in the job (runs on a worker).

    Raises
    ------
    ShardNotFoundError, StorageError
        A file cannot be read (``on_error="fail"``; with ``"skip"`` the file is
        left out and reported).
    CatalogError
        A declared field's value does not fit its type.
    """
    read: list[FolderSample] = []
    failures: list[FileFailure] = []
    values: list[dict[str, Any]] = []
    samples = work.samples
    local = is_local(folder)
    base = local_path(folder) if local else folder
    for i in range(0, len(samples), _READ_FILES):
        part = samples[i : i + _READ_FILES]
        if local:  # read file by file below: no batch to hold, no dict of it
            fetched: Mapping[str, bytes | Exception] = {}
        else:  # an object store's files of these samples, in concurrent requests
            paths = [entry_path(base, key, name) for key, names in part for name in names]
            fetched = read_files(paths, storage_options)
        for key, names in part:
            # A file that cannot be read is left out alone (on_error="skip"): the sample
            # keeps its other files, as a sample that never had that entry would.
            files = []
            lost = []
            label = None
            for name in names:
                path = entry_path(base, key, name)
                if local:
                    try:
                        got: bytes | Exception = read_whole(path)
                    except OSError as e:
                        got = e
                else:
                    got = fetched[path]
                if isinstance(got, Exception):
                    lost.append(_failure(path, key, name, got, on_error))
                    continue
                files.append((name, len(got), crc32c(got)))
                if name == fields_entry:
                    label = got
            if not files:
                failures.extend(replace(f, sample_left_out=True) for f in lost)
                continue
            failures.extend(lost)
            read.append(FolderSample(key, tuple(files)))
            if fields:  # a sample without its fields entry (or with it unreadable) has none
                values.append(
                    {}
                    if label is None
                    else field_values({fields_entry: label}, fields, fields_entry)
                )
    if not read:
        return GroupResult(None, failures=tuple(failures))
    info = folder_info(group_url(folder, job_id, group), read)
    cat = catalog_for(catalog)
    row = cat.register_shard(dataset, info, job=job_id)
    if fields:
        offsets = info.records["offset"].tolist()
        found = [(off, v) for off, v in zip(offsets, values) if v]
        cat.store_fields(dataset, row.id, found)
    return GroupResult(redact(info.path), len(read), len(info.entries), info.size, tuple(failures))


def _failure(path: str, key: str, entry: str, e: Exception, on_error: OnError) -> FileFailure:
    """A file that could not be read: the typed error, raised (``fail``) or reported (``skip``)."""
    shown = redact(path)
    if isinstance(e, FileNotFoundError):
        typed: Exception = ShardNotFoundError(
            f"{shown}: the file of key {key!r} is gone (deleted or moved since the listing?); "
            "index the folder again",
            path=shown,
        )
    else:
        typed = StorageError(f"cannot read {shown} (key {key!r}): {e}", path=shown)
    if on_error == "fail":
        raise typed from e
    return FileFailure(shown, key, type(typed).__name__, str(typed), entry)


def index_files(
    source: str,
    *,
    catalog: Catalog | str | None = None,
    dataset: str,
    storage_options: Mapping[str, Any] | None = None,
    key_rule: KeyRule = "first-dot",
    skip_unmatched: bool = False,
    client: ClientChoice = None,
    on_error: OnError = "fail",
    retries: int = 2,
    fields: Mapping[str, type] | None = None,
    fields_entry: str = "json",
    group_files: int = GROUP_FILES,
    progress: TaskProgressCallback | None = None,
) -> IndexFilesSummary:
    """Register a folder's files in place as a dataset's samples, committed as one new version.

    Parameters
    ----------
    source:
        A local folder, any fsspec URL (``s3://raw/images/``), a glob
        (``s3://raw/*/img*.jpg``) or a brace pattern (``s3://raw/part-{000..009}/``),
        as ``shardcat write SRC`` takes it. Keys are paths relative to the
        pattern's fixed part; hidden files (a dot-name) are never indexed.
    catalog:
        A :class:`~shardcat.Catalog` or its URL (default: the default catalog).
    dataset:
        The dataset (created if missing, rooted at the folder; removed again
        if this first job fails). Its new version is exactly the folder's
        samples: indexing the same folder again picks up added, removed and
        changed files, and older versions still read the files they named.
    storage_options:
        fsspec options for reading the files (never stored).
    key_rule:
        ``"first-dot"`` (WebDataset's: ``a/img1.seg.png`` is entry ``seg.png``
        of key ``a/img1``) or ``"last-dot"``.
    skip_unmatched:
        Skip files with no extension (no entry name) instead of refusing them.
    client:
        As for :func:`shardcat.index_tar`.
    on_error:
        ``"fail"``: a file that cannot be read fails the job (nothing is
        committed); ``"skip"``: the file is left out and reported in
        :attr:`IndexFilesSummary.failed`, and its sample is indexed with its
        other files (as a sample that never had that entry), or left out if
        none could be read (:attr:`IndexFilesSummary.samples_left_out`).
    retries:
        Dask retries per task (a killed worker's task runs again).
    fields:
        Scalar fields to store for ``where=`` filters (``{"label": int}``),
        read from each sample's ``fields_entry`` file (a JSON object) as it is
        indexed.
    fields_entry:
        The JSON entry the fields are read from.
    group_files:
        Files per task (and per catalog shard row) at most.
    progress:
        Called as ``progress(done, total)`` with the groups indexed so far.

    Raises
    ------
    EmptySourceError, UnmatchedFilesError, DuplicateKeyError, StorageError
        The folder holds nothing to index, files without an entry name, or
        two files of one key and entry; or it cannot be listed.
    ShardNotFoundError
        A file is gone when its task reads it (``on_error="fail"``).
    CatalogError
        A field name is not allowed, or a value does not fit its declared type.
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout`` seconds.
    """
    from ..reading import Catalog

    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    if group_files < 1:
        raise ValueError(f"group_files must be at least 1, not {group_files}")
    opts = dict(storage_options or {})
    listed = from_files(
        source, storage_options=opts, key_rule=key_rule, skip_unmatched=skip_unmatched
    )
    listing = list_source(dataclasses.replace(listed, in_place=True))
    # Local folders are stored as paths, as tars are: what lookups open with os.pread.
    folder = local_path(listing.root_url) if is_local(listing.root_url) else listing.root_url
    folder = folder.rstrip("/") or "/"
    groups = plan_groups(listing.samples, group_files)
    work = [GroupWork([(s.key, tuple(entry for entry, _ in s.files)) for s in g]) for g in groups]
    with Catalog.opened(catalog, storage_options=opts) as cat:
        refuse_in_memory(cat)

        def submit(dask_client: Any, tasks: InPlaceTasks) -> list[Any]:
            calls = [
                (
                    samples,
                    folder,
                    i,
                    opts,
                    tasks.handle,
                    dataset,
                    tasks.job_id,
                    on_error,
                    tuple(fields or ()),
                    fields_entry,
                )
                for i, samples in enumerate(work)
            ]
            return tasks.submit(dask_client, index_files_task, calls, retries)

        def manifest(results: list[GroupResult]) -> list[str]:
            return [r.url for r in results if r.url is not None]

        job_id, results, seconds = run_in_place(
            cat,
            what="index-files",
            dataset=dataset,
            root=folder,
            folders={folder: opts},
            client=client,
            near=folder,
            properties={"files": listing.files, "groups": len(groups)},
            submit=submit,
            manifest=manifest,
            fields=fields,
            progress=progress,
            replace=True,
            storage_options=opts,
        )
    failed = [f for r in results for f in r.failures]
    for f in failed:
        log.warning("skipped %s: %s", f.url, f.message)
    summary = IndexFilesSummary(
        dataset=dataset,
        job_id=job_id,
        folder=redact(folder),
        groups=len([r for r in results if r.url is not None]),
        records=sum(r.records for r in results),
        files=sum(r.files for r in results),
        bytes=sum(r.bytes for r in results),
        seconds=seconds,
        failed=failed,
        hidden=listing.hidden,
        skipped=listing.skipped,
    )
    log.info("%s", summary)
    return summary
