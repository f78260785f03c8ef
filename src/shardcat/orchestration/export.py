"""``shardcat.export``: a dataset version out as WebDataset tars, one Dask task per tar.

The client reads the version's visible records from the catalog (the one
visibility rule: :func:`~shardcat.catalog.internal.visible_shards`), checks
that every key and entry name reads back the same from a tar
(:func:`~shardcat.format.tar.members.member_name`), and cuts the samples, in
read order, into tars of at most ``shard_size`` bytes that never split a
sample (:func:`~.export_tars.plan_tars`). Entries stored compressed are
exported decompressed (the bytes a ``get`` returns), so their sizes are
counted first by one sizing task per shard that has any. Then one task per
tar writes ``{name}-000000.tar`` and its ``.taridx`` (TARIDX 1.0), each
published write-once: a tar is complete under its name or not there at all.

A failed or interrupted export removes the tars it published; the
destination is refused if it holds tars already, unless ``overwrite=True``,
which first removes the files named like this export's. With ``register``,
the tars are then indexed in place as a new tar dataset, in one commit
(:func:`~shardcat.orchestration.index_tar.run_index_job`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .._units import count_of, parse_size
from ..catalog import internal
from ..errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    DestinationNotEmptyError,
    Hint,
    JobInterrupted,
)
from ..format.tar.members import member_names
from ..storage import dataset_prefix, is_local, join, local_path, redact, resolve
from ..storage.removal import remove_files
from .cluster import ClientChoice, client_for
from .export_tars import TarPlan, TarWritten, entry_sizes, plan_tars, write_tar
from .index_tar import run_index_job
from .reach import refuse_in_memory, refuse_unreachable_stores
from .throughput import Throughput
from .watch import JobRef, TaskProgressCallback, gather

if TYPE_CHECKING:
    from distributed import Client

    from ..catalog.results import RecordRow, ShardRow
    from ..reading import Catalog

__all__ = ["ExportSummary", "export"]

log = logging.getLogger(__name__)

ExportFormat = Literal["webdataset"]

_TARS = re.compile(r".+\.(tar|taridx)$")


@dataclass(frozen=True)
class ExportSummary(Throughput):
    """What an export wrote (and registered)."""

    dataset: str
    version: int
    destination: str
    tars: list[str]
    """The tars, in sample order (each has its ``.taridx`` beside it)."""
    samples: int
    bytes: int
    """Bytes of the tars."""
    seconds: float
    registered: str | None = None
    """The tar dataset the tars were registered as, if any."""
    job_id: int | None = None
    """The registering job."""

    def __str__(self) -> str:
        registered = (
            f"; registered as {self.registered!r} (job {self.job_id})" if self.registered else ""
        )
        return (
            f"{self.dataset} v{self.version}: exported {count_of(self.samples, 'sample')} in "
            f"{count_of(len(self.tars), 'tar')} to {self.destination} "
            f"({self.volume}){registered}"
        )


def export(
    catalog: Catalog | str,
    dataset: str,
    destination: str,
    *,
    format: ExportFormat = "webdataset",
    version: int | str | None = None,
    shard_size: int | str = "1GB",
    name: str | None = None,
    register: str | None = None,
    overwrite: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    destination_options: Mapping[str, Any] | None = None,
    client: ClientChoice = None,
    retries: int = 2,
    progress: TaskProgressCallback | None = None,
) -> ExportSummary:
    """Write a version of ``dataset`` as WebDataset tars in ``destination``.

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.Catalog` or its URL.
    dataset:
        The dataset to export (native shards, tars indexed in place, or both).
    destination:
        The folder the tars go to, on any fsspec backend.
    format:
        ``"webdataset"``: tars whose members are ``key.entry`` (a key's
        folders are folders in the tar), in sample order.
    version:
        A kept version's number or a tag (default: the latest).
    shard_size:
        The most bytes a tar holds (``"256MB"``, ``"1GiB"`` or an int); a
        sample is never split: one larger than this gets a tar of its own.
    name:
        The tars' name: ``{name}-000000.tar``, ``{name}-000001.tar``, ...
        (default: the dataset's name, made a safe file name).
    register:
        Register the tars in ``catalog`` as a new tar dataset of this name,
        indexed in place in one commit (as :func:`~shardcat.index_tar`).
    overwrite:
        Let ``destination`` hold tars already: the files named like this
        export's tars and indexes are removed first, any others are kept.
    storage_options, destination_options:
        fsspec options of the dataset's shards (default: the catalog's) and
        of ``destination`` (default: the same). Never stored.
    client:
        A ``distributed.Client`` or a :class:`~shardcat.orchestration.DaskCluster`
        (:func:`~shardcat.orchestration.client_for`).
    retries:
        How often Dask may retry a failed task.
    progress:
        Called as ``progress(done, total)`` with the tars written so far.

    Returns
    -------
    ExportSummary

    Raises
    ------
    ExportNameError
        A key or entry name would not read back the same from a tar (the
        message says why); nothing was written.
    DestinationNotEmptyError
        ``destination`` holds ``.tar`` or ``.taridx`` files and ``overwrite``
        is not set.
    DatasetExistsError
        ``register`` names a dataset that exists.
    CatalogError
        ``register`` with an in-memory SQLite catalog (its Dask workers could
        not open it).
    DatasetNotFoundError, VersionNotFoundError
        No such dataset, or no such kept version or tag.
    ChecksumError, ShardNotFoundError, StorageError
        A source does not read back as registered, or a store failed; the
        tars this export published are removed.
    JobInterrupted
        Ctrl-C; the tars this export published are removed.
    """
    from ..reading import Catalog

    if format != "webdataset":
        raise ValueError(f"format must be 'webdataset', not {format!r}")
    max_bytes = parse_size(shard_size)
    t0 = time.perf_counter()
    with Catalog.opened(catalog) as cat:
        src_opts = dict(cat.storage_options if storage_options is None else storage_options)
        dst_opts = dict(src_opts if destination_options is None else destination_options)
        if is_local(destination):
            destination = os.path.abspath(local_path(destination))
        destination = destination.rstrip("/")
        resolve(destination, dst_opts)  # a bad URL fails here, typed
        if register is not None:  # before anything is written: the tars would stay unregistered
            refuse_in_memory(cat)
            _refuse_registered(cat, register)
        number, shards = internal.visible_shards(cat, dataset, version)
        # Every visible row, in read order; the hidden ones (deleted or replaced) left out.
        visible = [(s, _visible_rows(cat, s, hidden)) for s, hidden in shards]
        for _, rows in visible:  # a name that would not read back fails before any work
            for row in rows:
                member_names(row.key, [name for name, _, _ in row.entries])
        prefix = name or dataset_prefix(dataset)
        ours = re.compile(re.escape(prefix) + r"-\d{6,}\.(tar|taridx)$")
        _refuse_taken(destination, dst_opts, ours, overwrite, {s.url for s, _ in visible})
        folders = {
            destination: dst_opts,
            **{posixpath.dirname(s.url): src_opts for s, _ in visible},
        }
        refuse_unreachable_stores(folders)
        ref = JobRef("export", dataset, removes_output=True)
        planned: list[TarPlan] = []
        published: list[str] = []
        try:
            with client_for(client, destination) as dask_client:
                refuse_unreachable_stores(folders, dask_client)
                run = uuid.uuid4().hex[:12]
                sizes = _sizes(dask_client, visible, src_opts, ref, run, retries)
                planned = plan_tars(
                    [(s, rows, sizes[i]) for i, (s, rows) in enumerate(visible)],
                    max_bytes,
                    _names(destination, prefix),
                )
                _check_width(planned, prefix)
                if overwrite:
                    _remove_ours(destination, dst_opts, ours)
                written = _write(
                    dask_client, planned, dst_opts, src_opts, ref, run, retries, progress
                )
                published = [p.url for p in planned]
                job_id = None
                if register is not None and planned:
                    job_id = run_index_job(
                        published, cat, register, dst_opts, dask_client, retries=retries
                    ).job_id
        except KeyboardInterrupt as e:
            _remove_published(destination, planned, dst_opts, keep=published)
            raise JobInterrupted(
                f"interrupted: the export of dataset {dataset!r} stopped and the tars it had "
                f"published in {redact(destination)} were removed",
                hint=Hint(python="run it again", cli="run the command again"),
            ) from e
        except BaseException:
            _remove_published(destination, planned, dst_opts, keep=published)
            raise
    summary = ExportSummary(
        dataset=dataset,
        version=number,
        destination=redact(destination),
        tars=[w.url for w in written],
        samples=sum(w.samples for w in written),
        bytes=sum(w.bytes for w in written),
        seconds=time.perf_counter() - t0,
        registered=register if planned else None,
        job_id=job_id,
    )
    log.info("%s", summary)
    return summary


def _visible_rows(cat: Catalog, shard: ShardRow, hidden: frozenset[int]) -> list[RecordRow]:
    rows = internal.record_rows(cat, shard.id)
    return [r for r in rows if r.offset not in hidden] if hidden else rows


def _names(destination: str, prefix: str) -> Iterator[tuple[str, str]]:
    for i in range(1 << 40):  # bounded: one name per planned tar
        base = join(destination, f"{prefix}-{i:06d}")
        yield f"{base}.tar", f"{base}.taridx"


def _check_width(planned: Sequence[TarPlan], prefix: str) -> None:
    if len(planned) > 1_000_000:
        raise ValueError(
            f"{len(planned):,} tars named {prefix}-NNNNNN.tar would outgrow six digits (and "
            "their sorted order): give a larger shard_size (--shard-size)"
        )


def _refuse_registered(cat: Catalog, name: str) -> None:
    try:
        cat.info(name)
    except DatasetNotFoundError:
        return
    raise DatasetExistsError(
        f"catalog {cat.url} has a dataset {name!r} already: register the export under a new "
        "name (register=, --register NAME), or delete that dataset first"
    )


def _listing(destination: str, options: dict[str, Any]) -> list[str]:
    """The URLs of the files directly in ``destination`` (none when it does not exist)."""
    fs, root = resolve(destination, options)
    try:
        paths = fs.ls(root, detail=False)
    except FileNotFoundError:
        return []
    base = root.rstrip("/")
    return [
        join(destination, p.rstrip("/").rsplit("/", 1)[-1]) for p in paths if p.rstrip("/") != base
    ]


def _refuse_taken(
    destination: str,
    options: dict[str, Any],
    ours: re.Pattern[str],
    overwrite: bool,
    sources: set[str],
) -> None:
    """Refuse a destination holding tars (with ``overwrite``, tars not named like ours, or
    tars the export reads: a tar dataset exported onto its own files)."""
    tars = [u for u in _listing(destination, options) if _TARS.match(u.rsplit("/", 1)[-1])]
    read = sorted(set(tars) & sources)
    if overwrite and read:
        raise DestinationNotEmptyError(
            f"destination {redact(destination)} holds {count_of(len(read), 'tar')} this export "
            f"reads ({redact(read[0])}): overwriting would remove them; export into another "
            "folder, or give the tars another name (name=, --name)"
        )
    if overwrite:
        tars = [u for u in tars if not ours.match(u.rsplit("/", 1)[-1])]
        if not tars:
            return
        shown = ", ".join(redact(u) for u in sorted(tars)[:3])
        raise DestinationNotEmptyError(
            f"destination {redact(destination)} holds {count_of(len(tars), 'tar')} of another "
            f"name than this export's ({shown}): export into an empty folder, or remove them"
        )
    if tars:
        # Name the tars first: each has a .taridx beside it.
        tars.sort(key=lambda u: (not u.endswith(".tar"), u))
        n = sum(u.endswith(".tar") for u in tars)
        what = count_of(n, "tar") if n else count_of(len(tars), ".taridx file")
        shown = ", ".join(redact(u) for u in tars[:3])
        raise DestinationNotEmptyError(
            f"destination {redact(destination)} holds {what} already "
            f"({shown}{' ...' if len(tars) > 3 else ''}): export into an empty folder",
            hint=Hint(
                python="or pass overwrite=True to replace an earlier export's tars",
                cli="or pass --overwrite to replace an earlier export's tars",
            ),
        )


def _remove_ours(destination: str, options: dict[str, Any], ours: re.Pattern[str]) -> None:
    old = [u for u in _listing(destination, options) if ours.match(u.rsplit("/", 1)[-1])]
    left = remove_files(old, options)
    if left.failed:
        url, why = sorted(left.failed.items())[0]
        raise DestinationNotEmptyError(
            f"{count_of(len(left.failed), 'file')} of an earlier export could not be removed "
            f"from {redact(destination)} ({redact(url)}: {why}); nothing was exported"
        )


def _remove_published(
    destination: str, planned: Sequence[TarPlan], options: dict[str, Any], keep: list[str]
) -> None:
    """Remove what the failed export published (its names were free when it began), and
    the temporary files of local tars whose worker was killed while writing them."""
    if keep or not planned:  # every tar was written: only the registration failed, they stay
        return
    urls = [u for p in planned for u in (p.url, p.index_url)]
    names = {u.rsplit("/", 1)[-1] for u in urls}
    for url in _listing(destination, options):
        base = url.rsplit("/", 1)[-1]
        # storage/atomic.py's pending name: ".<name>.<12 hex>.partial"
        pending = base.startswith(".") and base.endswith(".partial")
        if pending and base[1:].rsplit(".", 2)[0] in names:
            urls.append(url)
    left = remove_files(urls, options)
    if left.failed:
        log.warning(
            "%d files of the failed export could not be removed (%s, ...)",
            len(left.failed),
            redact(sorted(left.failed)[0]),
        )


def _sizes(
    client: Client,
    visible: Sequence[tuple[ShardRow, list[RecordRow]]],
    options: dict[str, Any],
    ref: JobRef,
    run: str,
    retries: int,
) -> list[list[list[int]]]:
    """Each visible row's entry sizes once read: from the catalog, or counted by a task.

    Stored sizes are the read sizes of uncompressed entries; a shard with a
    compressed entry among its visible rows is read once by a task to count them.
    """
    out: list[list[list[int]]] = []
    futures = []
    for i, (shard, rows) in enumerate(visible):
        stored = [[span[1] for span in row.spans] for row in rows]
        out.append(stored)
        if any(codec != "none" for row in rows for _, _, codec in row.entries):
            futures.append(
                (
                    i,
                    client.submit(
                        entry_sizes,
                        shard.url,
                        (shard.file_id, shard.footer_crc),
                        [row.offset for row in rows],
                        options,
                        key=f"shardcat-export-size-{run}-{i}",
                        retries=retries,
                        pure=False,
                    ),
                )
            )
    if futures:
        try:
            counted = gather(client, [f for _, f in futures], ref)
        except BaseException:
            with contextlib.suppress(Exception):
                client.cancel([f for _, f in futures])
            raise
        for (i, _), sizes in zip(futures, counted):
            out[i] = sizes
    return out


def _write(
    client: Client,
    planned: Sequence[TarPlan],
    dst_opts: dict[str, Any],
    src_opts: dict[str, Any],
    ref: JobRef,
    run: str,
    retries: int,
    progress: TaskProgressCallback | None,
) -> list[TarWritten]:
    """One task per tar; the tars' results in order."""
    futures = [
        client.submit(
            write_tar,
            plan,
            dst_opts,
            src_opts,
            key=f"shardcat-export-tar-{run}-{i}",
            retries=retries,
            pure=False,
        )
        for i, plan in enumerate(planned)
    ]
    try:
        done: list[TarWritten] = gather(client, futures, ref, progress)
    except BaseException:
        with contextlib.suppress(Exception):
            client.cancel(futures)
        raise
    return done
