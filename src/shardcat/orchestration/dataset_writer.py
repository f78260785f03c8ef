"""``shardcat.DatasetWriter``: write a dataset from one Python process, without Dask.

The same job as :func:`shardcat.write`, run by the calling thread: samples
are added one by one, shards are published exclusively under the job's
names and each is staged in the catalog once published, and leaving the
``with`` block commits every shard as one new version. An error in the
block (or in the writer) aborts the job: nothing it staged becomes visible,
and ``shardcat gc`` removes its files.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._closing import CloseOrAbort
from .._types import OnDuplicate
from .._units import parse_size
from ..errors import WriterClosedError
from ..format.entries import check_sample
from ..format.info import group_metadata
from ..storage import brace_patterns, dataset_prefix, first_free, redact
from ..storage.shards import RollingShardWriter
from .gc import forget_failed_dataset
from .plan import SHARDS_PER_PARTITION, WritePlan
from .write import WriteSummary
from .write_job import (
    Mode,
    begin_write_job,
    check_mode,
    commit_write_job,
    dataset_root,
    open_dataset,
)

if TYPE_CHECKING:
    from ..reading import Catalog

__all__ = ["DatasetWriter"]

log = logging.getLogger(__name__)


class DatasetWriter(CloseOrAbort):
    """Write a dataset's samples from this process and commit them as one version.

    For a loop in one Python process (no Dask cluster, no ``dask`` extra):
    the job, its shard names, its modes and its guarantees are
    :func:`shardcat.write`'s. Each shard is staged in the catalog once it
    is published; lookups see nothing until the block ends and the job
    commits.

    Parameters
    ----------
    catalog:
        A :class:`shardcat.Catalog` or its SQLAlchemy URL (an
        in-memory ``sqlite://`` catalog works too: it is this process's).
    dataset:
        The dataset's name in the catalog (created if new).
    url:
        The dataset's folder: a path, ``s3://bucket/datasets/train``, ...
    mode, on_duplicate, shard_size, max_records_per_shard, compression,
    metadata, storage_options, message, prefix, keys:
        As for :func:`shardcat.write`.

    Examples
    --------
    >>> with shardcat.DatasetWriter("sqlite:///catalog.db", "train", "data/train") as w:  # doctest: +SKIP
    ...     for sample in samples:  # {"__key__": ..., "jpg": ..., ...}
    ...         w.write(sample)
    >>> w.summary  # doctest: +SKIP
    WriteSummary(dataset='train', job_id=1, records=2000, ...)

    Raises
    ------
    DatasetExistsError
        ``mode="create"`` and the dataset already has records (when the
        writer opens, or at commit if another job committed first).
    DuplicateKeyError
        A key occurs twice, or (``append``) is already in the dataset; the
        job is aborted.
    CommitConflictError
        ``mode="overwrite"`` and another job committed to the dataset
        meanwhile; nothing of this job becomes visible.
    """

    def __init__(
        self,
        catalog: Catalog | str,
        dataset: str,
        url: str,
        *,
        mode: Mode = "create",
        on_duplicate: OnDuplicate = "error",
        shard_size: int | str = "256MB",
        max_records_per_shard: int | None = None,
        compression: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        storage_options: Mapping[str, Any] | None = None,
        message: str | None = None,
        prefix: str | None = None,
        keys: str | None = None,
    ) -> None:
        from ..reading import Catalog

        check_mode(mode, on_duplicate)
        # Closes, with the writer, only a catalog the writer opened.
        self._opened = contextlib.ExitStack()
        self.catalog: Catalog = self._opened.enter_context(Catalog.opened(catalog))
        self.dataset = dataset
        self._mode = mode
        self._on_duplicate = on_duplicate
        self._message = message
        self._t0 = time.perf_counter()
        opts = dict(storage_options or {})
        self._options = opts
        self._created = False
        self.summary: WriteSummary | None = None
        """What the committed job wrote (set when the writer closes without error)."""
        try:
            url = dataset_root(url, opts)
            existing, self._created = open_dataset(self.catalog, dataset, url, mode, keys=keys)
            job, self._base_version, partition_base = begin_write_job(
                self.catalog, dataset, url, mode, existing, f"shardcat.DatasetWriter ({mode})"
            )
        except BaseException:
            self._close_catalog()
            raise
        self.job_id: int = job.id
        plan = WritePlan(
            dataset=dataset,
            root=url.rstrip("/"),
            prefix=prefix or dataset_prefix(dataset),
            job_id=job.id,
            catalog=self.catalog.handle(),
            partition_base=partition_base,
            storage_options=opts,
        )

        def name(number: int, index: int) -> str:
            # Partitions of SHARDS_PER_PARTITION shards, as a write task numbers its own.
            part, within = divmod(index, SHARDS_PER_PARTITION)
            return first_free(plan.root, plan.names(part, within), opts)

        def stage(info: Any) -> None:
            self.catalog.register_shard(dataset, info, job=job.id)

        self._writer = RollingShardWriter(
            plan.root,
            name,
            max_bytes=parse_size(shard_size),
            max_records=max_records_per_shard,
            start=plan.first_shard_number(0),
            storage_options=opts,
            on_shard_closed=stage,
            compression=compression,
            exclusive=True,
            metadata={
                **group_metadata(dict(metadata or {}), None),
                "dataset": dataset,
                "job": job.id,
                "partition": 0,
            },
        )
        self._done = False

    # --- writing -------------------------------------------------------------

    def add(self, key: str, entries: Mapping[str, Any]) -> None:
        """Add a record: ``entries`` maps entry names to values (see ``ShardWriter.add``)."""
        self._check_open()
        check_sample(entries, self.dataset, key)
        self._writer.add(key, entries)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add a sample dict ``{"__key__": key, name: value, ...}``."""
        self._check_open()
        check_sample(sample, self.dataset)
        self._writer.write(sample)

    def _check_open(self) -> None:
        if self._done:
            raise WriterClosedError(
                f"the writer of dataset {self.dataset!r} is closed (job {self.job_id})"
            )

    # --- ending --------------------------------------------------------------

    def close(self) -> WriteSummary:
        """Publish the last shard, wait for every stage, and commit the job as one version.

        On any error the job is aborted (nothing becomes visible) and the
        error is raised.
        """
        if self.summary is not None:
            return self.summary
        self._check_open()
        self._done = True
        try:
            self._writer.close()
            infos = self._writer.shards
            left_out = commit_write_job(
                self.catalog,
                self.job_id,
                [i.path for i in infos],
                self._mode,
                self._base_version,
                self._on_duplicate,
                self._message,
                self._options,
            )
        except BaseException:
            self._abort_job()
            raise
        else:
            shards = [redact(i.path) for i in infos]
            self.summary = WriteSummary(
                dataset=self.dataset,
                job_id=self.job_id,
                records=sum(i.record_count for i in infos) - left_out,
                shards=shards,
                bytes=sum(i.size for i in infos),
                payload_bytes=sum(i.payload_bytes() for i in infos),
                seconds=time.perf_counter() - self._t0,
                partitions=1,
                shard_patterns=brace_patterns(shards),
                skipped_duplicates=left_out,
            )
            log.info("%s", self.summary)
            return self.summary
        finally:
            self._close_catalog()

    def abort(self) -> None:
        """Stop without committing: the job is aborted, nothing becomes visible.

        Published shards stay until ``shardcat gc`` removes them with the job;
        if the writer created the dataset, the dataset and those shards are
        removed now (as after any failed first job).
        """
        if self._done:
            return
        self._done = True
        try:
            self._writer.abort()
        except Exception as e:  # the job is aborted either way; the caller's error matters
            log.debug("while aborting job %d: %s", self.job_id, e)
        finally:
            self._abort_job()
            self._close_catalog()

    def _abort_job(self) -> None:
        try:
            self.catalog.abort_job(self.job_id)
        except Exception as e:
            log.warning(
                "could not abort job %d of dataset %r: %s (shardcat gc ends it once it is stale)",
                self.job_id,
                self.dataset,
                e,
            )
        else:
            if self._created:  # a failed first job leaves no empty dataset behind
                forget_failed_dataset(self.catalog, self.dataset, self.job_id, self._options)

    def _close_catalog(self) -> None:
        self._opened.close()
