"""``shardcat.index_tar``: WebDataset tars registered in place, one Dask task per tar, one commit.

Each task streams its tar once (:func:`~shardcat.catalog.kinds.scan_tar_url`:
one request per 8 MiB, never one per member, nothing downloaded to disk),
and stages it in the catalog under the job as a ``tar`` shard: every sample
a record, every member's payload offset, size and CRC32C in its row. When
every task has reported, the client commits the job in one transaction;
until then lookups see nothing of it. A failing tar fails the job
(``on_error="fail"``: the job is aborted, nothing is visible), or is
reported and left out (``on_error="skip"``). A killed worker's task is
retried by Dask; registering the same tar again in the job replaces the
earlier attempt's staged rows, and the commit takes exactly the tars the
successful tasks reported. No tar is ever written or deleted here.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._units import count_of
from ..errors import EmptySourceError, FormatError, ShardNotFoundError
from ..format.tar import Taridx, verify_scan
from ..reading.checks import scan_tar_url
from ..storage import open_source, redact, resolve
from ..storage.patterns import expand_patterns
from .cluster import ClientChoice
from .fields import store_shard_fields
from .in_place import InPlaceTasks, run_in_place
from .reach import refuse_in_memory
from .tasks import catalog_for
from .throughput import Throughput
from .watch import TaskProgressCallback

if TYPE_CHECKING:
    from ..reading import Catalog, CatalogHandle

__all__ = [
    "IndexTarSummary",
    "TarFailure",
    "expand_tar_urls",
    "index_tar",
    "run_index_job",
    "tar_shard_numbers",
]

log = logging.getLogger(__name__)

OnError = Literal["fail", "skip"]


@dataclass(frozen=True, slots=True)
class TarFailure:
    """A tar left out of the job (``on_error="skip"``): why, as the typed error said it."""

    url: str
    error: str
    """The error's class name."""
    message: str


@dataclass(frozen=True, slots=True)
class TarResult:
    """What one task reports back: small, no per-record data."""

    url: str
    records: int = 0
    bytes: int = 0
    failure: TarFailure | None = None


@dataclass(frozen=True)
class IndexTarSummary(Throughput):
    """What a committed indexing job registered."""

    dataset: str
    job_id: int
    tars: list[str]
    records: int
    bytes: int
    seconds: float
    failed: list[TarFailure] = field(default_factory=list)

    def __str__(self) -> str:
        skipped = f", {count_of(len(self.failed), 'tar')} skipped" if self.failed else ""
        return (
            f"indexed {count_of(self.records, 'sample')} in {count_of(len(self.tars), 'tar')} into {self.dataset!r} "
            f"(job {self.job_id}, {self.volume}{skipped})"
        )


def expand_tar_urls(urls: str | Iterable[str], storage_options: Mapping[str, Any]) -> list[str]:
    """Every tar the patterns name, in pattern order, as the catalog stores it.

    :func:`~shardcat.storage.patterns.expand_patterns`: braces expanded, globs
    listed (sorted), a folder's ``*.tar`` files listed, local paths made
    absolute, each tar once.

    Raises
    ------
    ShardNotFoundError
        A glob, or a folder, matches nothing.
    EmptySourceError
        No URL is given.
    """
    patterns = [urls] if isinstance(urls, str) else list(urls)
    out = expand_patterns(
        [os.fspath(p) for p in patterns], dict(storage_options), folder_suffix=".tar"
    )
    if not out:
        raise EmptySourceError("index_tar got no tar URL")
    return out


_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z0-9]+)*$")


def tar_shard_numbers(urls: list[str]) -> list[int | None]:
    """Each tar's shard number: the trailing digits of its file name (``train-000012.tar``: 12).

    ``None`` for a name without trailing digits, and for every tar whose
    number another tar of the same list has too (``train-000001.tar`` and
    ``val-000001.tar``): a number is only given where it names one tar.
    """
    numbers: list[int | None] = []
    for url in urls:
        match = _TRAILING_NUMBER.search(posixpath.basename(url.rstrip("/")))
        numbers.append(int(match.group(1)) if match else None)
    seen: dict[int, int] = {}
    for n in numbers:
        if n is not None:
            seen[n] = seen.get(n, 0) + 1
    return [n if n is not None and seen[n] == 1 else None for n in numbers]


def registered_urls(results: list[TarResult]) -> list[str]:
    """The files the successful tasks staged: what the commit makes visible."""
    return [r.url for r in results if r.failure is None]


def split_results(results: list[TarResult]) -> tuple[list[TarResult], list[TarFailure]]:
    """The tasks' results: the files registered, and those left out (``on_error="skip"``, logged)."""
    done = [r for r in results if r.failure is None]
    failed = [r.failure for r in results if r.failure is not None]
    for f in failed:
        log.warning("skipped %s: %s", f.url, f.message)
    return done, failed


def index_tar_task(
    url: str,
    storage_options: dict[str, Any],
    catalog: CatalogHandle,
    dataset: str,
    job_id: int,
    on_error: OnError,
    fid: int = 0,
    index: Taridx | None = None,
    shard_number: int | None = None,
    fields: tuple[str, ...] = (),
    fields_entry: str = "json",
) -> TarResult:
    """Scan one tar and stage it in the job (runs on a worker).

    With ``index`` (``taridx import``), the scan must match the index's rows for ``fid``.
    With ``fields``, their values are then read from each sample's ``fields_entry``
    (only those members, CRC-checked) and stored with the staged shard.

    Raises
    ------
    TarError, ShardNotFoundError, StorageError
        With ``on_error="fail"``; with ``"skip"`` the result carries the failure instead.
    """
    try:
        info = scan_tar_url(url, storage_options)
        if index is not None:
            source = open_source(url, storage_options)  # read only where the scan skipped headers
            try:
                verify_scan(index, fid, info, source=source)
            finally:
                source.close()
    except (FormatError, ShardNotFoundError) as e:
        if on_error == "fail":
            raise
        return TarResult(url, failure=TarFailure(redact(url), type(e).__name__, str(e)))
    if shard_number is not None:
        info = dataclasses.replace(info, shard_number=shard_number)
    cat = catalog_for(catalog)
    row = cat.register_shard(dataset, info, job=job_id)
    if fields:
        # Read through the URL the task was given (the row's may have had credentials removed).
        store_shard_fields(
            cat, dataset, dataclasses.replace(row, url=url), fields, fields_entry, storage_options
        )
    return TarResult(redact(url), len(info.records), info.size)


def index_tar(
    urls: str | Iterable[str],
    *,
    catalog: Catalog | str | None = None,
    dataset: str,
    storage_options: Mapping[str, Any] | None = None,
    client: ClientChoice = None,
    on_error: OnError = "fail",
    retries: int = 2,
    fields: Mapping[str, type] | None = None,
    fields_entry: str = "json",
    progress: TaskProgressCallback | None = None,
) -> IndexTarSummary:
    """Register WebDataset tars in place as a dataset's shards, committed as one job.

    Parameters
    ----------
    urls:
        Tar URLs or patterns: ``"s3://b/wds/train-{000000..000099}.tar"``,
        globs (``"wds/*.tar"``), or a list of them.
    catalog:
        A :class:`~shardcat.Catalog` or its URL (default: the default catalog).
    dataset:
        The dataset to add the tars to (created if missing, rooted at the first tar's folder;
        removed again if this first job fails).
    storage_options:
        fsspec options for reading the tars (never stored).
    client:
        A ``distributed.Client``, or a :class:`~shardcat.orchestration.DaskCluster`
        (a scheduler's address, or N local worker processes started for this
        call); by default the current client, else a local cluster started
        for this call (:func:`~shardcat.orchestration.client_for`).
    on_error:
        ``"fail"``: a bad or missing tar fails the job (nothing is committed);
        ``"skip"``: it is reported in :attr:`IndexTarSummary.failed` and left out.
    retries:
        Dask retries per task (a killed worker's task runs again).
    fields:
        Scalar fields to store in the catalog for ``where=`` filters
        (``{"label": int}``; int, float, bool or str), declared for the
        dataset. Each task reads them from every sample's ``fields_entry``
        (a JSON object; only those members are read, in coalesced ranges,
        each CRC-checked) and stores them with the tar it stages: they become
        visible with the commit. A sample without the entry or the field has
        NULL there. Filled afterwards by :func:`shardcat.readers.index_fields`.
    fields_entry:
        The JSON entry (member extension) the fields are read from.
    progress:
        Called as ``progress(done, total)`` with the tars indexed so far, in
        the calling thread, as the tasks finish (the CLI draws a bar with it).

    Raises
    ------
    CatalogError
        A field name is not allowed, or a value does not fit its declared type.
    TarError
        A tar is damaged (``on_error="fail"``); it names the file and byte offset.
    DuplicateKeyError
        A key repeats across tars or exists among committed records (nothing committed).
    ShardNotFoundError, StorageError, EmptySourceError
        A tar or pattern cannot be read.
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout`` seconds;
        the job was aborted.
    """
    opts = dict(storage_options or {})
    return run_index_job(
        expand_tar_urls(urls, opts),
        catalog,
        dataset,
        opts,
        client,
        on_error,
        retries,
        fields=fields,
        fields_entry=fields_entry,
        progress=progress,
    )


def run_index_job(
    tars: list[str],
    catalog: Catalog | str | None,
    dataset: str,
    opts: dict[str, Any],
    client: ClientChoice,
    on_error: OnError = "fail",
    retries: int = 2,
    index: Taridx | None = None,
    *,
    fields: Mapping[str, type] | None = None,
    fields_entry: str = "json",
    progress: TaskProgressCallback | None = None,
) -> IndexTarSummary:
    """:func:`index_tar` of expanded URLs; with ``index``, each tar is checked against its rows.

    ``fid`` of a tar is its position in ``tars`` (``taridx import``).
    """
    from ..reading import Catalog

    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    with Catalog.opened(catalog, storage_options=opts) as cat:
        refuse_in_memory(cat)
        for url in tars:
            resolve(url, opts)  # a bad URL fails here, typed, before any worker sees it
        numbers = tar_shard_numbers(tars)

        def submit(dask_client: Any, tasks: InPlaceTasks) -> list[Any]:
            scattered = dask_client.scatter(index, broadcast=False) if index is not None else None
            calls = [
                (
                    url,
                    opts,
                    tasks.handle,
                    dataset,
                    tasks.job_id,
                    on_error,
                    i,
                    scattered,
                    numbers[i],
                    tuple(fields or ()),
                    fields_entry,
                )
                for i, url in enumerate(tars)
            ]
            return tasks.submit(dask_client, index_tar_task, calls, retries)

        job_id, results, seconds = run_in_place(
            cat,
            what="index-tar",
            dataset=dataset,
            root=posixpath.dirname(tars[0]),
            folders=dict.fromkeys((posixpath.dirname(url) for url in tars), opts),
            client=client,
            near=tars[0],
            properties={"tars": len(tars)},
            submit=submit,
            manifest=registered_urls,
            fields=fields,
            progress=progress,
            storage_options=opts,
        )
        done, failed = split_results(results)
        summary = IndexTarSummary(
            dataset=dataset,
            job_id=job_id,
            tars=[r.url for r in done],
            records=sum(r.records for r in done),
            bytes=sum(r.bytes for r in done),
            seconds=seconds,
            failed=failed,
        )
        log.info("%s", summary)
        return summary
