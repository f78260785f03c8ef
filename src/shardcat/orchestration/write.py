"""``shardcat.write``: a Dask job writes a dataset as numbered shards, committed at once.

One task per partition writes that partition's shards and stages them in
the catalog under the job; when every task has succeeded, the client
commits the job in one transaction, and only then do lookups see its
records. A failed or interrupted job leaves nothing visible; ``shardcat gc``
removes its staged rows and objects.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import config
from .._types import OnDuplicate
from .._units import count_of, format_bytes, parse_size
from ..catalog.groups import GroupWrite
from ..errors import (
    BucketNotFoundError,
    DatasetNotFoundError,
    DuplicateKeyError,
    InvalidKeyError,
    RecordTooLargeError,
    SampleDecodeError,
    StorageCredentialsError,
    StoragePermissionError,
    UnmatchedFilesError,
    WorkersLostError,
)
from ..format.info import group_metadata
from ..storage import brace_patterns, dataset_prefix, redact, resolve
from .cluster import ClientChoice, client_for
from .files import FileListing, FileSource, SampleFiles, list_source, plan_partitions, read_samples
from .gc import forget_failed_dataset
from .inputs import fingerprint
from .plan import WritePlan
from .progress import ProgressReporter, WriteProgressCallback
from .reach import on_workers, refuse_in_memory, refuse_unreachable, refuse_unreachable_stores
from .resume import ResumePoint, check_inputs, finished_partitions, resumable_job
from .samples import batched, check_frame, is_pandas_frame, rows_to_samples
from .tasks import PartitionResult, write_partition
from .throughput import Throughput
from .watch import JobRef, Waiter, interrupted, settle, stop_tasks
from .write_job import (
    Mode,
    append_target,
    begin_write_job,
    check_mode,
    commit_write_job,
    dataset_root,
    open_dataset,
)

if TYPE_CHECKING:
    from distributed import Client

    from ..reading import Catalog

__all__ = ["WriteSummary", "write"]

log = logging.getLogger(__name__)

Call = tuple[Callable[..., PartitionResult], tuple[Any, ...]]
"""A partition task to submit: the function and its arguments."""

# The samples' own faults, and the store's that no attempt mends (a missing bucket,
# missing or refused credentials): the same task fails the same way on every attempt.
# A task returns them instead of raising, so Dask's retries (for lost workers and
# flaky stores) do not build its shard again only to fail again, each failure printed
# by the worker ("Compute Failed"); the client raises.
_DATA_ERRORS = (
    InvalidKeyError,
    RecordTooLargeError,
    DuplicateKeyError,
    UnmatchedFilesError,
    BucketNotFoundError,
    StorageCredentialsError,
    StoragePermissionError,
    SampleDecodeError,
)


@dataclass(frozen=True)
class _Refused:
    """A partition's data error, returned by :func:`_attempt` (raised by :func:`_result`)."""

    error: BaseException
    pid: int = 0
    """The process that ran the task: another one than the client's is a Dask worker."""


def _attempt(fn: Callable[..., PartitionResult], *args: Any) -> PartitionResult | _Refused:
    """``fn(*args)`` on a worker; a data error comes back as a value, not retried."""
    try:
        return fn(*args)
    except _DATA_ERRORS as e:
        return _Refused(e, os.getpid())


def _result(waiter: Waiter, future: Any) -> PartitionResult:
    """A partition task's result; its data error raised here, on the client."""
    result = waiter.result(future)
    if isinstance(result, _Refused):
        error = result.error
        if isinstance(error, StorageCredentialsError) and result.pid not in (0, os.getpid()):
            raise on_workers(error) from error
        raise error
    return result  # type: ignore[no-any-return]


@dataclass(frozen=True)
class WriteSummary(Throughput):
    """What a committed write job produced."""

    dataset: str
    job_id: int
    records: int
    shards: list[str]
    bytes: int
    payload_bytes: int
    seconds: float
    partitions: int
    shard_patterns: list[str] = field(default_factory=list)
    skipped_files: int = 0
    """Files of a :func:`from_files` source without an entry name, skipped on request."""
    hidden_files: int = 0
    """Hidden files of a :func:`from_files` source (never packed)."""
    resumed_partitions: int = 0
    """Partitions an earlier, interrupted run of the job had finished (not written again)."""
    skipped_keys: int = 0
    """``add_entries(on_missing="skip")``: samples left out, their keys not in the dataset."""
    skipped_duplicates: int = 0
    """``on_duplicate="skip"``: records left out, their keys live in the dataset already
    (their files stay in the shards; ``records`` counts what the version serves)."""

    def __str__(self) -> str:
        skipped = [
            f"{n:,} {what} files skipped"
            for n, what in ((self.skipped_files, "unmatched"), (self.hidden_files, "hidden"))
            if n
        ]
        return (
            f"{self.dataset}: job {self.job_id} committed {count_of(self.records, 'record')} in "
            f"{count_of(len(self.shards), 'shard')} ({format_bytes(self.bytes)}) from "
            f"{count_of(self.partitions, 'partition')} "
            f"in {self.seconds:.2f} s ({self.mb_per_s:.0f} MB/s)"
            + (
                f"; resumed: {self.resumed_partitions} partitions were done before"
                if self.resumed_partitions
                else ""
            )
            + (f"; {', '.join(skipped)}" if skipped else "")
            + (
                f"; {count_of(self.skipped_keys, 'sample')} skipped (keys not in the dataset)"
                if self.skipped_keys
                else ""
            )
            + (
                f"; {count_of(self.skipped_duplicates, 'record')} skipped (keys the dataset "
                "had: on_duplicate skip)"
                if self.skipped_duplicates
                else ""
            )
        )


def write(
    data: Any,
    url: str,
    *,
    catalog: Catalog | str,
    dataset: str,
    shard_size: int | str = "256MB",
    max_records_per_shard: int | None = None,
    compression: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    mode: Mode = "create",
    on_duplicate: OnDuplicate = "error",
    message: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    key_column: str = "__key__",
    json_entry: str = "json",
    fields: Mapping[str, type] | None = None,
    prefix: str | None = None,
    client: ClientChoice = None,
    batch_size: int = 2048,
    retries: int = 2,
    progress: bool | WriteProgressCallback | None = True,
    job_name: str | None = None,
    resume: bool = False,
    allow_changed_inputs: bool = False,
    keys: str | None = None,
) -> WriteSummary:
    """Write ``data`` as numbered shards under ``url`` and register every record.

    Parameters
    ----------
    data:
        A Dask bag of sample dicts (``{"__key__": str, name: value, ...}``);
        a pandas or Dask dataframe (see ``key_column``; a Dask dataframe is
        written one task per partition, never collected on the client); files
        from :func:`shardcat.from_files` (the client lists them and plans
        partitions of about ``shard_size`` bytes; workers read the files); or
        any iterable of sample dicts (sent in batches of ``batch_size``).
    url:
        The dataset's folder: a path, ``s3://bucket/datasets/train``, ...
    catalog:
        A :class:`shardcat.Catalog` or its SQLAlchemy URL.
    dataset:
        The dataset's name in the catalog.
    shard_size:
        A shard is closed once it reaches this size (``"256MB"``, bytes).
    mode:
        ``"create"`` (the dataset must not have records yet, also when the
        job commits), ``"append"`` (add records to a dataset that exists, in
        its own folder ``url``; keys must be new; appends may run
        concurrently) or ``"overwrite"`` (replace the dataset's
        records when the job commits; if another job committed to the
        dataset meanwhile, the overwrite fails with CommitConflictError
        rather than drop data it never saw). Every committed write is a new
        dataset version (``Catalog.log``).
    on_duplicate:
        ``mode="append"``: a key already live in the dataset is an error
        naming the keys (``"error"``), or the new version points at the new
        record (``"replace"``), or the new record is ignored (``"skip"``).
        If another commit changed such a key after this job began, the
        commit fails with KeyConflictError naming the keys.
    message:
        Recorded with the new version (``shardcat log``).
    storage_options:
        fsspec options (credentials, endpoint) handed to the workers; never
        stored in the catalog.
    key_column:
        Dataframes: the column holding each row's key.
    json_entry:
        Dataframes: the entry that holds a row's scalar columns (numbers,
        strings, booleans, timestamps, lists, dicts) as one JSON object;
        bytes and array columns stay entries of their own. Missing values
        (None, NaN, NaT) are left out of the object.
    fields:
        Scalar fields to store in the catalog for ``where=`` filters, e.g.
        ``{"label": int}`` (int, float, bool or str): each sample's value is
        ``sample[json_entry][name]`` (a dict, or a dataframe row's JSON
        object); declared on the dataset before the tasks start, stored by
        each task with its staged shard.
    client:
        A ``distributed.Client``, or a :class:`~shardcat.orchestration.DaskCluster`
        (a scheduler's address, or N local worker processes started for this
        call); by default the current client, else a local cluster started
        for this call (:func:`~shardcat.orchestration.client_for`).
    retries:
        How often Dask may retry a failed partition task (a task lost with
        its worker is rescheduled by Dask in any case). A retry writes under
        fresh names where an earlier attempt published a shard, and only the
        shards of the attempts that succeeded are committed. A sample's own
        fault (no or bad key, a record over the size limit, a key twice) is
        never retried: it would fail again; it is raised at once.
    progress:
        ``True`` draws a progress bar on the terminal (partitions, records,
        bytes, throughput: :class:`~shardcat.orchestration.WriteProgressBar`);
        ``False`` or ``None`` draws nothing; a callable is called with a
        :class:`~shardcat.orchestration.WriteProgress` as the job goes (see
        Notes).
    job_name:
        Name the job. If an earlier run of a job of this name died (its
        client was killed) and left it open, this run resumes it: the
        partitions whose shards it staged and which still verify are kept,
        only the others are written, then the job commits. ``data`` must be
        partitioned the same way as in the first run. A name whose job
        committed already is refused (JobExistsError).
    resume:
        Resume the newest open job of the dataset that writes to ``url`` in
        ``mode``, if there is one (as for ``job_name``); else start a new one.
    allow_changed_inputs:
        Resume even if ``data`` is not what the job began with. A job
        records a fingerprint of its inputs (Dask's token of a collection;
        the paths, sizes and modification times of packed files) and a
        resume whose inputs differ, or cannot be compared (a generator), is
        refused with JobInputsChangedError. Allowed, the partitions the
        first run finished keep its data and the rest is written from this
        ``data``.
    keys:
        What a new dataset's catalog keeps of each key: ``"text"`` (its text
        and hash, the text in key order; the default), ``"unsorted"`` (text and
        hash, no key-order index: fewer bytes per key, no listing of keys in
        key order; docs/CATALOG.md, "Unsorted datasets") or ``"hash"`` (the
        hash only: fewer bytes still, every lookup compares the key its shard
        record holds; no ``where=`` on keys either; docs/CATALOG.md, "Hash-only
        datasets"). None: the existing dataset's; given, it must be it.

    Returns
    -------
    WriteSummary

    Raises
    ------
    EmptySourceError
        A :func:`shardcat.from_files` source holds no file to pack.
    UnmatchedFilesError
        Files of a :func:`shardcat.from_files` source have no entry name.
    CatalogError
        The catalog is one the workers cannot reach: an in-memory SQLite
        database, or a SQLite file while workers run on other machines.
    DatasetExistsError
        ``mode="create"`` and the dataset already has records.
    DatasetNotFoundError
        ``mode="append"`` and there is no such dataset (a misspelt name
        would otherwise start a new one): write with ``mode="create"``.
    DatasetRootError
        ``mode="append"`` into another folder than the one the dataset's
        shards are in (one dataset lives in one folder).
    JobExistsError
        The job named ``job_name`` committed already, or writes elsewhere.
    JobInputsChangedError
        The job to resume began with other inputs (a ``JobExistsError``).
    DuplicateKeyError
        A key occurs twice in the job, or (``append``) is already in the dataset.
    CommitConflictError
        ``mode="overwrite"`` and another job committed to the dataset while
        this one ran. Nothing of this job becomes visible.
    ProgressCallbackError
        The ``progress`` callback raised (its exception is the cause).
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout``
        seconds (docs/CONFIG.md). The job stays open: rerun the write with
        its ``job_name`` (or ``resume=True``) once workers are back.
    JobInterrupted
        Ctrl-C (a ``KeyboardInterrupt``): its message says whether the job
        stays open (``job_name``, ``resume``) or was aborted.

    Notes
    -----
    Every failure aborts the job: its queued tasks are cancelled, running ones
    stop at their next shard, nothing it staged becomes visible, and what it
    wrote is removed by :func:`shardcat.orchestration.gc.gc`. Only a job whose
    client died, whose workers were all lost (WorkersLostError), or a named
    or resumed job (``job_name``, ``resume``) that was interrupted
    (``KeyboardInterrupt``), stays open, to be resumed. A dataset the failed
    job created itself (its first job) is removed again, with the shards the
    job wrote: no empty dataset, pinned to a folder that may be wrong, is
    left behind. A dataset that existed before the job is never removed, nor
    one whose first job was interrupted (its message names ``shardcat gc``);
    a dataset without shards takes the folder of the next write into it.

    **Progress.** A ``progress`` callable receives a frozen
    :class:`~shardcat.orchestration.WriteProgress` (``done_partitions``,
    ``total_partitions``, ``records``, ``bytes``, ``seconds``; ``finished``
    and ``mb_per_s``): once when the job's tasks start (nothing done yet),
    once when an iterable runs out (``total_partitions`` was ``None`` until
    then), and after each partition task finishes. Counts only grow. It is
    called in the calling thread, between partitions, so it needs no lock;
    the last event comes before the commit. If it raises, the write fails
    with ``ProgressCallbackError`` and the job is aborted: raising is how a
    callback cancels a job. With ``progress=False`` nothing is drawn and rich
    is not imported.

    >>> events = []
    >>> shardcat.write(bag, url, catalog=cat, dataset="train", progress=events.append)  # doctest: +SKIP
    >>> events[-1]  # doctest: +SKIP
    WriteProgress(done_partitions=64, total_partitions=64, records=1000000, bytes=..., seconds=...)
    """
    return _write(group=None, **locals())


def _write(
    data: Any,
    url: str,
    *,
    catalog: Catalog | str,
    dataset: str,
    shard_size: int | str,
    max_records_per_shard: int | None,
    compression: str | None,
    metadata: Mapping[str, Any] | None,
    mode: Mode,
    on_duplicate: OnDuplicate,
    message: str | None,
    storage_options: Mapping[str, Any] | None,
    key_column: str,
    json_entry: str,
    fields: Mapping[str, type] | None,
    prefix: str | None,
    client: ClientChoice,
    batch_size: int,
    retries: int,
    progress: bool | WriteProgressCallback | None,
    job_name: str | None,
    resume: bool,
    allow_changed_inputs: bool,
    group: GroupWrite | None,
    keys: str | None = None,
) -> WriteSummary:
    """:func:`write`; with ``group``, :func:`~.groups.add_entries`' job (an append committed as a group's)."""
    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        check_mode(mode, on_duplicate)
        size = parse_size(shard_size)
        callback, drawing = _progress_drawer(progress)
        opts = dict(storage_options or {})
        url = dataset_root(url, opts)
        refuse_in_memory(cat)
        t0 = time.perf_counter()
        # Files are listed (and refused: empty, unmatched) before anything is created.
        source = _prepare(data, key_column, json_entry)
        # Packed files are cut into partitions once: what the fingerprint records, the tasks write.
        parts = plan_partitions(source.samples, size) if isinstance(source, FileListing) else []
        # Recorded by every job: a job whose client died may be resumed by resume=True too.
        inputs = fingerprint(data, source, parts=parts)

        def resume_point() -> ResumePoint | None:
            point = resumable_job(
                cat, dataset, job_name=job_name, resume=resume, root=redact(url), mode=mode
            )
            if point is not None:
                check_inputs(point, inputs, allow_changed=allow_changed_inputs, parts=parts)
            return point

        if (job_name is not None or resume) and not allow_changed_inputs:
            with contextlib.suppress(DatasetNotFoundError):  # a new dataset has no job to resume
                resume_point()  # other inputs are refused before a cluster starts
        if mode == "append":  # a misspelt name or another folder fails before a cluster starts
            append_target(cat, dataset, redact(url), group=group is not None)
        refuse_unreachable_stores({url: opts})  # a missing bucket: said before a cluster starts
        with client_for(client, url, small=_small(source)) as dask_client:
            refuse_unreachable(cat, dask_client)
            refuse_unreachable_stores(_folders(url, opts, source), dask_client)
            existing, created = open_dataset(
                cat, dataset, url, mode, group=group is not None, keys=keys
            )
            point = resume_point()
            if point is not None:
                job, partition_base, base_version = (
                    point.job,
                    point.partition_base,
                    point.base_version,
                )
                ref = JobRef("write", dataset, job.id, job_name, resumable=True)
                finished = finished_partitions(cat, point, dask_client, opts, ref)
            else:
                job, base_version, partition_base = begin_write_job(
                    cat, dataset, url, mode, existing, f"shardcat.write ({mode})", job_name, inputs
                )
                ref = JobRef("write", dataset, job.id, job_name, resumable=True)
                finished = {}
            plan = WritePlan(
                dataset=dataset,
                root=url.rstrip("/"),
                prefix=prefix or dataset_prefix(dataset),
                job_id=job.id,
                catalog=cat.handle(),  # with its password: workers must connect (never shown)
                shard_size=size,
                max_records=max_records_per_shard,
                compression=compression,
                metadata=group_metadata(
                    dict(metadata or {}), None if group is None else group.name
                ),
                storage_options=opts,
                partition_base=partition_base,
                fields=tuple(fields or ()),
                fields_entry=json_entry,
            )
            reporter = ProgressReporter(callback, dataset=dataset, job_id=job.id)
            running: list[Any] = []  # tasks a worker was running when the job failed
            try:
                if fields:  # a bad name or type aborts the job before any task
                    cat.declare_fields(dataset, fields)
                futures: list[Any] = []
                try:
                    with drawing:
                        results = _run(
                            source,
                            parts,
                            plan,
                            dask_client,
                            key_column,
                            json_entry,
                            batch_size,
                            retries,
                            reporter,
                            futures,
                            set(finished),
                            ref,
                        )
                    results.extend(finished.values())
                except BaseException:
                    # Tasks still queued never start; running ones stop at their next
                    # shard once the job is aborted, and remove what the catalog refuses.
                    with contextlib.suppress(Exception):
                        running = stop_tasks(dask_client, futures)
                    raise
                left_out = commit_write_job(
                    cat,
                    job.id,
                    [u for r in results for u in r.shards],
                    mode,
                    base_version,
                    on_duplicate,
                    message,
                    opts,
                    group,
                )
            except KeyboardInterrupt as e:
                stays_open = job_name is not None or resume
                if not stays_open:
                    with contextlib.suppress(Exception):
                        cat.abort_job(job.id)
                settle(dask_client, running, timeout=0)  # no wait after a Ctrl-C
                # Interrupted, not failed: a named job keeps what it staged for the rerun.
                raise interrupted(ref, stays_open=stays_open) from e
            except WorkersLostError:
                raise  # the job stays open: its rerun resumes it (the error says how)
            except BaseException:
                with contextlib.suppress(Exception):
                    cat.abort_job(job.id)
                settle(dask_client, running)  # before the clean-up: their last files go too
                if created:  # a failed first job leaves no empty dataset behind
                    forget_failed_dataset(cat, dataset, job.id, opts)
                raise
        results.sort(key=lambda r: r.partition)
        shards = [s for r in results for s in r.shards]
        summary = WriteSummary(
            dataset=dataset,
            job_id=job.id,
            records=sum(r.records for r in results) - left_out,  # what the version serves
            shards=shards,
            bytes=sum(r.bytes for r in results),
            payload_bytes=sum(r.payload_bytes for r in results),
            seconds=time.perf_counter() - t0,
            partitions=len(results),
            shard_patterns=brace_patterns(shards),
            skipped_files=len(source.skipped) if isinstance(source, FileListing) else 0,
            hidden_files=source.hidden if isinstance(source, FileListing) else 0,
            resumed_partitions=len(finished),
            skipped_keys=left_out if group is not None else 0,
            skipped_duplicates=0 if group is not None else left_out,
        )
        log.info("%s", summary)
        return summary


def _small(source: Any) -> bool:
    """Whether files to pack total at most ``in_process_max_bytes`` (the setting).

    Starting worker processes costs seconds (6-7 s of an 11 s pack of 59 MiB
    here); below this size two threads of the calling process pack faster.
    Other data (a bag, a frame) has no size known before it is computed.
    """
    if not isinstance(source, FileListing):
        return False
    raw = config.get("in_process_max_bytes")
    if raw in (None, "", 0, "0"):
        return False
    try:
        limit = parse_size(raw)
    except ValueError:
        raise ValueError(
            f"in_process_max_bytes={raw!r} is not a size: give bytes or a size such as "
            "'256MiB' (0: always start worker processes)"
        ) from None
    return source.bytes <= limit


def _folders(url: str, opts: dict[str, Any], source: Any) -> dict[str, dict[str, Any]]:
    """The folders a write's tasks open, with their storage options: its own, and its files'."""
    folders = {url: opts}
    if isinstance(source, FileListing):
        folders.setdefault(source.root_url, source.storage_options)
    return folders


def _progress_drawer(
    progress: bool | WriteProgressCallback | None,
) -> tuple[WriteProgressCallback | None, AbstractContextManager[object]]:
    """The callback for ``progress=``, and what to enter around the job (it stops a bar)."""
    if progress is True:
        from .progress_bar import WriteProgressBar  # rich loads only when a bar is drawn

        bar = WriteProgressBar()
        return bar, bar
    if progress is False or progress is None:
        return None, contextlib.nullcontext()
    if not callable(progress):
        raise TypeError(
            f"progress must be True, False or a callable taking a WriteProgress, not "
            f"{type(progress).__name__}"
        )
    return progress, contextlib.nullcontext()


def _prepare(data: Any, key_column: str, json_entry: str) -> Any:
    """``data`` in the form :func:`_run` takes; files are listed, bad input refused.

    Runs before the dataset or job is created, so that nothing is left behind.
    """
    import dask.bag as db

    if isinstance(data, (FileSource, FileListing)):
        listing = data if isinstance(data, FileListing) else list_source(data)
        if listing.skipped:
            shown = ", ".join(listing.skipped[:5])
            log.warning(
                "skipping %d files without an entry name (skip_unmatched): %s%s",
                len(listing.skipped),
                shown,
                " ..." if len(listing.skipped) > 5 else "",
            )
        if listing.hidden:
            log.info("not packing %d hidden files under %s", listing.hidden, listing.root_url)
        return listing
    if _is_dask_dataframe(data):
        check_frame(data, key_column, json_entry)  # its columns are known without computing
        return data
    if isinstance(data, db.Bag):
        return data
    if is_pandas_frame(data):
        check_frame(data, key_column, json_entry)
        return rows_to_samples(data, key_column, json_entry)
    if isinstance(data, Iterable) and not isinstance(data, (str, bytes, Mapping)):
        return data
    raise TypeError(
        f"cannot write a {type(data).__name__}: pass a Dask bag, a pandas or Dask dataframe, "
        "shardcat.from_files(...) or an iterable of samples"
    )


def _run(
    data: Any,
    file_parts: list[list[SampleFiles]],
    plan: WritePlan,
    client: Client,
    key_column: str,
    json_entry: str,
    batch_size: int,
    retries: int,
    reporter: ProgressReporter,
    futures: list[Any],
    skip: set[int],
    job: JobRef,
) -> list[PartitionResult]:
    """Run the partition tasks; every future submitted is appended to ``futures`` (to cancel).

    Packed files (``data`` a :class:`FileListing`) are written as ``file_parts`` cuts them.
    Partitions in ``skip`` (finished by an earlier run of a resumed job) are not run.
    """
    import dask.bag as db
    from dask.delayed import delayed

    if isinstance(data, FileListing):
        file_calls: Iterator[Call] = (
            (write_files_partition, (part, data.root_url, data.storage_options, plan, i))
            for i, part in enumerate(file_parts)
            if i not in skip
        )
        return _run_bounded(
            file_calls, len(file_parts) - len(skip), plan, client, retries, reporter, futures, job
        )
    if _is_dask_dataframe(data):
        tasks = [
            delayed(_attempt)(_write_frame_partition, part, plan, i, key_column, json_entry)
            for i, part in enumerate(data.to_delayed())
            if i not in skip
        ]
        futures.extend(client.compute(tasks, retries=retries))
        return _gather(client, futures, reporter, len(tasks), job)
    if isinstance(data, db.Bag):
        parts = data.to_delayed()
        tasks = [
            delayed(_attempt)(write_partition, part, plan, i)
            for i, part in enumerate(parts)
            if i not in skip
        ]
        futures.extend(client.compute(tasks, retries=retries))
        return _gather(client, futures, reporter, len(tasks), job)
    calls: Iterator[Call] = (
        (write_partition, (batch, plan, i))
        for i, batch in enumerate(batched(data, batch_size))
        if i not in skip
    )
    return _run_bounded(calls, None, plan, client, retries, reporter, futures, job)


def _run_bounded(
    calls: Iterable[Call],
    total: int | None,
    plan: WritePlan,
    client: Client,
    retries: int,
    reporter: ProgressReporter,
    futures: list[Any],
    job: JobRef,
) -> list[PartitionResult]:
    """Submit task calls as they come, a few per worker thread in flight (bounded client memory).

    ``total`` is the number of calls if known (the progress bar shows it),
    else ``None`` until ``calls`` runs out.
    """
    threads = sum(client.nthreads().values())
    in_flight_limit = 2 * max(1, threads)
    waiter = Waiter(client, job)
    done: list[PartitionResult] = []

    def finish(batch: list[Any]) -> None:
        for f in batch:
            done.append(_result(waiter, f))
            reporter.partition_done(done[-1])

    sent = 0
    # Per run: two catalogs' job 1 on one cluster, or a resumed job and its first run,
    # must never share task keys (the scheduler would hand one the other's results).
    run = uuid.uuid4().hex[:12]
    reporter.start(total)
    for fn, args in calls:
        future = client.submit(
            _attempt,
            fn,
            *args,
            pure=False,
            retries=retries,
            key=f"shardcat-write-{plan.job_id}-{run}-{sent}",
        )
        sent += 1
        futures.append(future)
        waiter.add(future)
        if waiter.count() >= in_flight_limit:
            finish(waiter.next_batch())
    if total is None:
        reporter.total_known(sent)
    for batch in iter(waiter.next_batch, []):
        finish(batch)
    return done


def _gather(
    client: Client, futures: list[Any], reporter: ProgressReporter, total: int, job: JobRef
) -> list[PartitionResult]:
    results: list[PartitionResult] = []
    reporter.start(total)
    waiter = Waiter(client, job, futures)
    for future in waiter:
        results.append(_result(waiter, future))
        reporter.partition_done(results[-1])
    return results


def _write_frame_partition(
    frame: Any, plan: WritePlan, partition: int, key_column: str, json_entry: str
) -> PartitionResult:
    return write_partition(rows_to_samples(frame, key_column, json_entry), plan, partition)


def write_files_partition(
    samples: list[SampleFiles],
    root_url: str,
    source_options: dict[str, Any],
    plan: WritePlan,
    partition: int,
) -> PartitionResult:
    """Read one partition's files on the worker and write them as its shard.

    Raises
    ------
    SampleDecodeError
        A file would not decode as its entry's type says (an empty ``.json``):
        it names the file.
    """
    try:
        return write_partition(read_samples(samples, root_url, source_options), plan, partition)
    except SampleDecodeError as e:
        fs, _ = resolve(root_url, source_options)
        for s in samples:
            if s.key == e.key:
                e.source = next(
                    (redact(fs.unstrip_protocol(p)) for n, p in s.files if n == e.entry), None
                )
        raise


def _is_dask_dataframe(data: Any) -> bool:
    try:
        import dask.dataframe as dd
    except ImportError:
        return False
    return isinstance(data, dd.DataFrame)
