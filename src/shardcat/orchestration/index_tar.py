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

import contextlib
import logging
import os
import posixpath
import re
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..catalog.kinds import scan_tar_url
from ..errors import EmptySourceError, FormatError, ShardcatError, ShardNotFoundError
from ..format.tar import Taridx, verify_scan
from ..storage import expand_braces, is_local, local_path, redact, resolve
from .reach import refuse_in_memory, refuse_unreachable
from .tasks import catalog_for
from .write import _cluster

if TYPE_CHECKING:
    from ..catalog import CatalogHandle

__all__ = ["IndexTarSummary", "TarFailure", "expand_tar_urls", "index_tar"]

log = logging.getLogger(__name__)

OnError = Literal["fail", "skip"]
_GLOB = re.compile(r"[*?\[]")


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
class IndexTarSummary:
    """What a committed indexing job registered."""

    dataset: str
    job_id: int
    tars: list[str]
    records: int
    bytes: int
    seconds: float
    failed: list[TarFailure] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / max(self.seconds, 1e-9)

    def __str__(self) -> str:
        skipped = f", {len(self.failed)} tar(s) skipped" if self.failed else ""
        return (
            f"indexed {self.records:,} samples in {len(self.tars)} tar(s) into {self.dataset!r} "
            f"(job {self.job_id}, {self.bytes / 1e6:.1f} MB, {self.mb_per_s:.1f} MB/s{skipped})"
        )


def expand_tar_urls(urls: str | Iterable[str], storage_options: Mapping[str, Any]) -> list[str]:
    """Every tar the patterns name, in pattern order: braces expanded, globs listed (sorted).

    Local paths become absolute (the catalog must not depend on the working folder).

    Raises
    ------
    EmptySourceError
        A glob matches nothing, or no URL is given.
    ValueError
        A tar is named twice.
    """
    patterns = [urls] if isinstance(urls, str) else list(urls)
    out: list[str] = []
    for pattern in patterns:
        for url in expand_braces(os.fspath(pattern)):
            if is_local(url):
                url = os.path.abspath(local_path(url))
            if not _GLOB.search(url):
                out.append(url)
                continue
            fs, path = resolve(url, dict(storage_options))
            found = sorted(fs.glob(path))
            if not found:
                raise EmptySourceError(f"no tar matches {redact(url)}")
            proto = url.split("://", 1)[0] + "://" if "://" in url else ""
            out.extend(f"{proto}{p}" if proto else p for p in found)
    if not out:
        raise EmptySourceError("index_tar got no tar URL")
    twice = [u for u, n in Counter(out).items() if n > 1]
    if twice:
        raise ValueError(f"tar {redact(twice[0])} is named twice")
    return out


def index_tar_task(
    url: str,
    storage_options: dict[str, Any],
    catalog: CatalogHandle,
    dataset: str,
    job_id: int,
    on_error: OnError,
    fid: int = 0,
    index: Taridx | None = None,
) -> TarResult:
    """Scan one tar and stage it in the job (runs on a worker).

    With ``index`` (``taridx import``), the scan must match the index's rows for ``fid``.

    Raises
    ------
    TarError, ShardNotFoundError, StorageError
        With ``on_error="fail"``; with ``"skip"`` the result carries the failure instead.
    """
    try:
        info = scan_tar_url(url, storage_options)
        if index is not None:
            verify_scan(index, fid, info)
    except (FormatError, ShardNotFoundError) as e:
        if on_error == "fail":
            raise
        return TarResult(url, failure=TarFailure(redact(url), type(e).__name__, str(e)))
    catalog_for(catalog).register_shard(dataset, info, job=job_id)
    return TarResult(redact(url), len(info.records), info.size)


def index_tar(
    urls: str | Iterable[str],
    *,
    catalog: Any = None,
    dataset: str,
    storage_options: Mapping[str, Any] | None = None,
    client: Any = None,
    on_error: OnError = "fail",
    retries: int = 2,
    _index: Taridx | None = None,
) -> IndexTarSummary:
    """Register WebDataset tars in place as a dataset's shards, committed as one job.

    Parameters
    ----------
    urls:
        Tar URLs or patterns: ``"s3://b/wds/train-{000000..000099}.tar"``,
        globs (``"wds/*.tar"``), or a list of them.
    catalog:
        A :class:`~shardcat.catalog.Catalog` or its URL (default: the default catalog).
    dataset:
        The dataset to add the tars to (created if missing, rooted at the first tar's folder).
    storage_options:
        fsspec options for reading the tars (never stored).
    client:
        A ``distributed.Client`` (default: the current one, else a local cluster).
    on_error:
        ``"fail"``: a bad or missing tar fails the job (nothing is committed);
        ``"skip"``: it is reported in :attr:`IndexTarSummary.failed` and left out.
    retries:
        Dask retries per task (a killed worker's task runs again).

    Raises
    ------
    TarError
        A tar is damaged (``on_error="fail"``); it names the file and byte offset.
    DuplicateKeyError
        A key repeats across tars or exists among committed records (nothing committed).
    ShardNotFoundError, StorageError, EmptySourceError
        A tar or pattern cannot be read.
    """
    from ..catalog import Catalog

    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', not {on_error!r}")
    opts = dict(storage_options or {})
    cat = catalog if isinstance(catalog, Catalog) else Catalog(catalog, storage_options=opts)
    refuse_in_memory(cat)
    tars = expand_tar_urls(urls, opts)
    for url in tars:
        resolve(url, opts)  # a bad URL fails here, typed, before any worker sees it
    t0 = time.perf_counter()
    with _cluster(client, tars[0]) as dask_client:
        refuse_unreachable(cat, dask_client)
        cat.create_dataset(dataset, redact(posixpath.dirname(tars[0])), exist_ok=True)
        job = cat.begin_job(
            dataset, description="shardcat.index_tar", properties={"tars": len(tars)}
        )
        handle = cat.handle()
        index = dask_client.scatter(_index, broadcast=False) if _index is not None else None
        futures = []
        try:
            try:
                futures = [
                    dask_client.submit(
                        index_tar_task,
                        url,
                        opts,
                        handle,
                        dataset,
                        job.id,
                        on_error,
                        i,
                        index,
                        key=f"shardcat-index-tar-{job.id}-{i}",
                        retries=retries,
                        pure=False,
                    )
                    for i, url in enumerate(tars)
                ]
                results: list[TarResult] = dask_client.gather(futures)
            except BaseException:
                with contextlib.suppress(Exception):
                    dask_client.cancel(futures)
                raise
            done = [r for r in results if r.failure is None]
            failed = [r.failure for r in results if r.failure is not None]
            for f in failed:
                log.warning("skipped %s: %s", f.url, f.message)
            cat.commit_job(job.id, shards=[r.url for r in done])
        except BaseException:
            with contextlib.suppress(ShardcatError, Exception):
                cat.abort_job(job.id)
            raise
    summary = IndexTarSummary(
        dataset=dataset,
        job_id=job.id,
        tars=[r.url for r in done],
        records=sum(r.records for r in done),
        bytes=sum(r.bytes for r in done),
        seconds=time.perf_counter() - t0,
        failed=failed,
    )
    log.info("%s", summary)
    return summary
