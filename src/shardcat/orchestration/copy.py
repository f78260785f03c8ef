"""``shardcat.copy_dataset``: copy (or move) a dataset's committed shards to another place.

One Dask task per shard streams it from its source to the destination
(any two fsspec backends), publishes it atomically, reads every byte back
and checks every CRC (:meth:`ShardReader.verify`) and that it is the same
shard (file id and data CRC of the catalog row). The client then registers
all the copies under one job and commits it: the copy becomes visible at
once or not at all. Until that commit nothing of the copy is visible, and
the source is never changed.

A rerun after an interruption skips every shard already at its destination
that verifies, and copies the rest. The destination folder must hold
nothing but this copy's shards (and a dead upload's temporary files).

``move=True`` copies the same way (every shard a kept version reads,
not only the latest's), then, in one commit in the source catalog, points
each shard row at its copy and the dataset at the destination: records and
versions stay as they were, so every kept version reads the copies. Only
then are the sources removed.

Copies are whole files: records that the latest version no longer serves
(deleted or replaced) are in them. A copy's commit registers them hidden
(added and removed in its one version), so they never come back.

Column groups (docs/GROUPS.md) go along: a copy's commit creates the
source's live groups, in their order, and registers each group shard's copy
as that group's, so a ``get`` of the copy merges what a ``get`` of the source
merges. A move keeps every row, so every group with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._units import count_of
from ..catalog import internal
from ..catalog.hashkeys import TEXT, check_key_mode
from ..errors import (
    ChecksumError,
    DatasetExistsError,
    DestinationNotEmptyError,
    ShardNotFoundError,
)
from ..format.folder import folder_of as group_folder
from ..reading.history import copy_history, folder_of, remove_history
from ..storage import is_local, join, local_path, open_pending, redact, resolve, retried
from ..storage.removal import remove_files
from ..storage.shards import ShardReader
from ..storage.translate import storage_errors
from .cluster import ClientChoice, client_for
from .reach import refuse_unreachable_stores
from .watch import JobRef, TaskProgressCallback, gather, interrupted

if TYPE_CHECKING:
    from ..catalog import ShardRow
    from ..catalog.fields import CarriedValues
    from ..format.info import ShardInfo
    from ..reading import Catalog

__all__ = ["CopySummary", "copy_dataset", "copy_shard"]

log = logging.getLogger(__name__)

_CHUNK = 8 << 20
"""Bytes per read while streaming a shard (memory per task stays bounded)."""


@dataclass(frozen=True)
class CopySummary:
    """What a committed copy or move did."""

    dataset: str
    """The copy's name (the source's, for a move)."""
    source: str
    destination: str
    job_id: int | None
    """The job that committed a copy (None for a move: it repoints shards, registers none)."""
    shards: int
    copied: int
    """Shards copied by this run (the others were at the destination already and verified)."""
    records: int
    bytes: int
    moved: bool
    seconds: float
    sources_left: list[str]
    """Sources a move could not remove (nothing refers to them any more: delete them)."""

    def __str__(self) -> str:
        what = "moved" if self.moved else "copied"
        reused = self.shards - self.copied
        return (
            f"{self.dataset}: {what} {count_of(self.shards, 'shard')} "
            f"({count_of(self.records, 'record')}, "
            f"{self.bytes:,} bytes) to {self.destination}"
            + (f" in job {self.job_id}" if self.job_id is not None else "")
            + (f"; {reused} were there already and verified" if reused else "")
        )


@dataclass(frozen=True, slots=True)
class _Copied:
    info: ShardInfo
    copied: bool


def copy_shard(
    source: str,
    destination: str,
    file_id: str,
    data_crc: int,
    source_options: Mapping[str, Any],
    destination_options: Mapping[str, Any],
) -> _Copied:
    """Copy one shard (unless a verified copy is there) and verify the copy; runs on a worker.

    Raises
    ------
    ChecksumError
        The copy does not verify, or is another shard than the source (it is removed).
    ShardNotFoundError
        The source is gone (a StorageError, as any failure of the stores).
    StorageError
        Reading the source or writing the destination failed.
    """
    dst_opts = dict(destination_options)
    present = _verified(destination, file_id, data_crc, dst_opts)
    if present is not None:
        return _Copied(present, copied=False)
    dst_fs, dst_path = resolve(destination, dst_opts)
    shown = redact(destination)
    if retried(dst_fs, "exists", shown, dst_path):
        # Not the shard we want (an unverifiable leftover): replace it.
        _remove(dst_fs, dst_path, shown)
    src_fs, src_path = resolve(source, dict(source_options))
    pending = open_pending(destination, dst_opts, exclusive=True)
    try:
        # The source may be gone (expired and gc'd meanwhile): ShardNotFoundError, not the
        # store's own FileNotFoundError.
        with storage_errors(source, fs=src_fs):
            f = src_fs.open(src_path, "rb")
        with f:
            for _ in range(1 << 40):  # bounded: ends at the source's end
                with storage_errors(source, fs=src_fs):
                    chunk = f.read(_CHUNK)
                if not chunk:
                    break
                pending.file.write(chunk)
        pending.commit()
    except BaseException:
        pending.discard()
        raise
    info = _verified(destination, file_id, data_crc, dst_opts)
    if info is None:
        with contextlib.suppress(Exception):
            _remove(dst_fs, dst_path, shown)
        raise ChecksumError(
            f"the copy of {redact(source)} at {redact(destination)} does not verify against the "
            "catalog row of its source; it was removed and nothing was committed: check the "
            "source (shardcat verify DATASET), then rerun the copy (it skips what was copied)",
            path=redact(destination),
        )
    return _Copied(info, copied=True)


def _remove(fs: Any, path: str, shown: str) -> None:
    """Remove one file, retried (storage/retry.py): gone already (a try whose answer was
    lost, another remover) is removed."""
    with contextlib.suppress(FileNotFoundError):
        retried(fs, "rm_file", shown, path)


def _verified(url: str, file_id: str, data_crc: int, options: dict[str, Any]) -> ShardInfo | None:
    """The shard at ``url`` if it is the shard wanted and every byte of it verifies."""
    fs, path = resolve(url, options)
    if not fs.exists(path):
        return None
    try:
        with ShardReader(url, storage_options=options) as reader:
            info = reader.info
            if info.file_id != file_id or info.data_crc != data_crc:
                return None
            reader.verify()
            return info
    except (ChecksumError, ValueError, OSError) as e:  # FormatError is a ValueError
        log.warning("%s is there but does not verify (%s); copying it again", redact(url), e)
        return None


def copy_dataset(
    catalog: Catalog | str,
    dataset: str,
    destination: str,
    *,
    to_catalog: Catalog | str | None = None,
    name: str | None = None,
    move: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    destination_options: Mapping[str, Any] | None = None,
    client: ClientChoice = None,
    retries: int = 2,
    progress: TaskProgressCallback | None = None,
    keys: str | None = None,
) -> CopySummary:
    """Copy a dataset's committed shards to ``destination`` and register the copy in one commit.

    Parameters
    ----------
    catalog:
        The source's :class:`~shardcat.Catalog` or SQLAlchemy URL.
    dataset:
        The dataset to copy.
    destination:
        The copy's folder, on any fsspec backend; it must be empty or hold
        only shards of an interrupted run of this same copy.
    to_catalog:
        Register the copy in this catalog (default: the source's).
    name:
        The copy's name (default: the source's; needed to copy within one catalog).
    move:
        Move instead: the dataset keeps its name and catalog, its shards are
        replaced by their copies in one commit, then the sources are removed.
    storage_options, destination_options:
        fsspec options of the source (by default the source catalog's) and of
        the destination (by default the source's). Never stored.
    client:
        A ``distributed.Client``, or a :class:`~shardcat.orchestration.DaskCluster`
        (a scheduler's address, or N local worker processes started for this
        call); by default the current client, else a local cluster started
        for this call (:func:`~shardcat.orchestration.client_for`).
    retries:
        How often Dask may retry a failed copy task.
    progress:
        Called as ``progress(done, total)`` with the shards copied so far, in
        the calling thread, as the tasks finish (the CLI draws a bar with it).
    keys:
        What the copy's catalog keeps of its keys (:meth:`Catalog.create_dataset`):
        ``"text"`` (the default), ``"unsorted"`` or ``"hash"``, whatever the
        source's: a copy is how a dataset changes its key mode (the copy's rows
        are made from the shards' footers).

    Returns
    -------
    CopySummary

    Raises
    ------
    DatasetExistsError
        The copy's name is taken in the target catalog by a dataset with records.
    WorkersLostError
        The Dask cluster had no workers for ``dask_no_workers_timeout`` seconds;
        the job was aborted.
    DestinationNotEmptyError
        ``destination`` holds objects that are not this copy's shards.
    ValueError
        ``move`` with ``to_catalog``, ``name`` or ``keys`` (a move keeps all three), the
        dataset has tar shards registered in place (not copied yet), or ``keys`` is
        no key mode.
    ChecksumError
        A copy did not verify (nothing was committed; rerun).
    CommitConflictError
        ``move`` and the dataset changed while its shards were copied.
    """
    from ..reading import Catalog

    with contextlib.ExitStack() as opened:
        src_cat = opened.enter_context(Catalog.opened(catalog))
        if move and (to_catalog is not None or name not in (None, dataset) or keys is not None):
            raise ValueError(
                "a move keeps the dataset's name, catalog and key mode: leave out "
                "to_catalog/name/keys (--to-catalog/--as/--keys), or copy instead"
            )
        if keys is not None:
            check_key_mode(keys)  # before any shard is copied
        dst_cat = (
            src_cat if to_catalog is None else opened.enter_context(Catalog.opened(to_catalog))
        )
        target = name or dataset
        if not move and dst_cat.url == src_cat.url and target == dataset:
            raise DatasetExistsError(
                f"dataset {dataset!r} cannot be copied onto itself in catalog {src_cat.url}: "
                "name the copy (name=, --as NAME), register it in another catalog "
                "(to_catalog=, --to-catalog URL), or move it (move=True, --move)"
            )
        src_opts = dict(storage_options if storage_options is not None else src_cat.storage_options)
        dst_opts = dict(destination_options if destination_options is not None else src_opts)
        if is_local(destination):
            destination = os.path.abspath(local_path(destination))
        destination = destination.rstrip("/")
        t0 = time.perf_counter()
        ds = src_cat.info(dataset)
        # The latest version's shards and, in each, the records it no longer serves (deleted or
        # replaced since). A copy is one new version whose commit hides those records again.
        version, visible = internal.visible_shards(src_cat, dataset, with_groups=True)
        served = sum(row.record_count - len(offsets) for row, offsets in visible)
        # The groups as the version read: their names in order, and which shard holds whose.
        live, of_shard = internal.shard_groups(src_cat, dataset)
        # A move keeps every kept version: it takes the shards only older versions read, too.
        rows = (
            [r for r in src_cat.shards(dataset, state=None) if r.state == "committed"]
            if move
            else [row for row, _ in visible]
        )
        folder_groups = [r.url for r in rows if r.kind == "files"]
        if folder_groups:
            # A folder's files are the user's (gc never deletes them): copying them elsewhere is
            # a storage tool's job, and packing them into shards is shardcat write's.
            raise ValueError(
                f"dataset {dataset!r} is a folder of files indexed in place ({len(folder_groups)} "
                f"group(s) of {redact(group_folder(folder_groups[0]))}): copy_dataset copies native shards "
                "only. To get native shards, pack the folder: shardcat.write(shardcat.from_files"
                "(FOLDER), URL, ...) or `shardcat write FOLDER URL -d NAME`; to copy the folder "
                "itself, copy it with your storage tools and index the copy with "
                "shardcat index-files"
            )
        tars = [r.url for r in rows if r.kind != "native"]
        if tars:
            raise ValueError(
                f"dataset {dataset!r} has {len(tars)} tar shard(s) registered in place "
                f"({redact(tars[0])}, ...): copy_dataset copies native shards only; copy the tars "
                "with your storage tools, then index them with shardcat index-tar"
            )
        plan = {row.url: join(destination, _relative(row.url, ds.root_url)) for row in rows}
        hidden = {plan[row.url]: offsets for row, offsets in visible if offsets}
        groups: dict[str, list[str]] = {name: [] for name in live}
        for row in rows:
            if row.url in of_shard:
                groups.setdefault(of_shard[row.url], []).append(plan[row.url])
        if len(set(plan.values())) != len(plan):
            raise ValueError(f"two shards of {dataset!r} would get one name under {destination}")
        in_place = [url for url, dest in plan.items() if url == dest]
        if move and rows and len(in_place) == len(rows):
            # Every shard is there already: a move that committed and was cut short before
            # recording the root (or a move onto the dataset's own folder).
            internal.set_dataset_root(src_cat, dataset, redact(destination))
            return _summary(
                dataset,
                ds.root_url,
                destination,
                rows,
                0,
                move,
                t0,
                [],
                job_id=None,
                records=served,
            )
        if in_place:
            raise DestinationNotEmptyError(
                f"destination {redact(destination)} is where dataset {dataset!r} keeps its shards: "
                "copy into another folder"
            )
        if not move:
            _refuse_taken(dst_cat, target, keys or TEXT)
        _refuse_foreign(destination, set(plan.values()), dst_opts)
        _refuse_missing(dataset, [row.url for row in rows], src_opts)
        with client_for(client, destination) as dask_client:
            folders = {destination: dst_opts}
            for row in rows:
                folders.setdefault(posixpath.dirname(row.url), src_opts)
            refuse_unreachable_stores(folders, dask_client)
            futures = [
                dask_client.submit(
                    copy_shard,
                    row.url,
                    plan[row.url],
                    row.file_id,
                    row.data_crc,
                    src_opts,
                    dst_opts,
                    pure=False,
                    retries=retries,
                )
                for row in rows
            ]
            try:
                done: list[_Copied] = gather(
                    dask_client, futures, JobRef("copy", dataset), progress
                )
            except BaseException as e:
                with contextlib.suppress(Exception):
                    dask_client.cancel(futures)
                if isinstance(e, KeyboardInterrupt):
                    raise interrupted(JobRef("copy", dataset)) from e
                raise
        infos = [d.info for d in done]
        if move:
            # The history goes first: the move's own manifest is written beside it, at the new root.
            history = copy_history(
                ds.root_url, destination, dataset, src_opts, dst_opts, moves=plan
            )
            internal.move_shards(
                src_cat,
                dataset,
                {row.url: (plan[row.url], row.file_id) for row in rows},
                expected_version=version,
                root_url=destination,
                storage_options=dst_opts,
            )
            job_id = None
            log.info("moved %d shards of %r to %s", len(rows), dataset, redact(destination))
            left = remove_files(list(plan), src_opts)
            remove_history(history, folder_of(ds.root_url, dataset), src_opts)
            sources_left = sorted(left.failed)
            if sources_left:
                log.warning(
                    "%d moved sources could not be removed (nothing refers to them: delete them)",
                    len(sources_left),
                )
        else:
            # The fields and values the source's latest version reads go with the copies
            # (same bytes, same offsets), read after the copies are made: one commit sets them.
            values = internal.field_values(src_cat, dataset, [row.id for row in rows])
            by_copy = {plan[row.url]: values.values.get(str(row.id), ()) for row in rows}
            carried = replace(values, values={u: v for u, v in by_copy.items() if v})
            job_id = _commit_copy(
                dst_cat,
                target,
                destination,
                infos,
                dataset,
                src_cat,
                hidden,
                dst_opts,
                groups,
                carried,
                keys or TEXT,
            )
            sources_left = []
        return _summary(
            target,
            ds.root_url,
            destination,
            rows,
            sum(d.copied for d in done),
            move,
            t0,
            sources_left,
            job_id=job_id,
            records=served,
        )


def _summary(
    name: str,
    source: str,
    destination: str,
    rows: list[ShardRow],
    copied: int,
    move: bool,
    t0: float,
    sources_left: list[str],
    *,
    job_id: int | None,
    records: int,
) -> CopySummary:
    summary = CopySummary(
        dataset=name,
        source=redact(source),
        destination=redact(destination),
        job_id=job_id,
        shards=len(rows),
        copied=copied,
        records=records,
        bytes=sum(r.size_bytes for r in rows),
        moved=move,
        seconds=time.perf_counter() - t0,
        sources_left=sources_left,
    )
    log.info("%s", summary)
    return summary


def _relative(url: str, root: str) -> str:
    """A shard's path under its dataset's root (its base name if it lives elsewhere)."""
    root = root.rstrip("/") + "/"
    if url.startswith(root):
        return url[len(root) :]
    return url.rsplit("/", 1)[-1]


def _refuse_taken(cat: Catalog, name: str, keys: str) -> None:
    """A copy may reuse a dataset of its name only if it has no records (an interrupted copy's)
    and keeps keys as the copy asks (``keys``), checked before any shard is copied."""
    from ..errors import DatasetNotFoundError

    try:
        info = cat.info(name)
    except DatasetNotFoundError:
        return
    if cat.shards(name):
        raise DatasetExistsError(
            f"catalog {cat.url} has a dataset {name!r} with records already: name the copy "
            "(name=, --as NAME) or delete that dataset first"
        )
    if info.keys != keys:
        raise DatasetExistsError(
            f"catalog {cat.url} has an empty dataset {name!r} that keeps keys={info.keys!r}, "
            f"and the copy asks for keys={keys!r}: pass keys={info.keys!r} (--keys "
            f"{info.keys}), name the copy (name=, --as NAME) or delete that dataset first"
        )


def _refuse_missing(dataset: str, urls: list[str], options: dict[str, Any]) -> None:
    """Fail before any task runs if source shards are gone: one listing per folder.

    A shard deleted or moved outside shardcat would otherwise surface as one
    task's bare "no such shard" after a cluster has started and other shards
    were copied. A store that cannot list (HTTP) leaves the check to the tasks.
    """
    folders: dict[str, list[str]] = {}
    for url in urls:
        folders.setdefault(url.rsplit("/", 1)[0], []).append(url)
    missing: list[str] = []
    for folder, members in folders.items():
        try:
            fs, path = resolve(folder, options)
            present = {p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(path, detail=False)}
        except FileNotFoundError:
            present = set()
        except Exception:  # listing unsupported or failing: each task reports its own shard
            continue
        missing.extend(u for u in members if u.rsplit("/", 1)[-1] not in present)
    if missing:
        shown = ", ".join(redact(u) for u in sorted(missing)[:3])
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise ShardNotFoundError(
            f"cannot copy dataset {dataset!r}: {count_of(len(missing), 'shard')} of its {len(urls):,} "
            f"{'is' if len(missing) == 1 else 'are'} missing from the store ({shown}{more}); "
            "nothing was copied. Were they deleted or moved outside shardcat? Run "
            f"`shardcat verify {dataset}` to list every problem; restore the files, or remove "
            "their rows (Catalog.remove_shard) to copy the rest",
            path=redact(sorted(missing)[0]),
        )


def _refuse_foreign(destination: str, planned: set[str], options: dict[str, Any]) -> None:
    """Fail unless everything under ``destination`` is one of the planned shards (or a temp file)."""
    fs, root = resolve(destination, options)
    if not fs.exists(root):
        return
    listed = fs.find(root)
    prefix = destination.rstrip("/")
    base = root.rstrip("/")
    foreign = []
    for path in listed:
        name = path.rsplit("/", 1)[-1]
        if name.startswith(".") and name.endswith(".partial"):
            continue  # a dead upload's temporary file (local publication)
        url = prefix + path[len(base) :] if path.startswith(base) else path
        if url not in planned:
            foreign.append(url)
    if foreign:
        shown = ", ".join(redact(u) for u in sorted(foreign)[:3])
        raise DestinationNotEmptyError(
            f"destination {redact(destination)} holds {len(foreign)} objects that are not "
            f"shards of this copy ({shown}{' ...' if len(foreign) > 3 else ''}): copy into an "
            "empty folder, or remove them first"
        )


def _commit_copy(
    cat: Catalog,
    name: str,
    root: str,
    infos: list[ShardInfo],
    source: str,
    src_cat: Catalog,
    hidden: Mapping[str, Collection[int]],
    options: Mapping[str, Any],
    groups: Mapping[str, Collection[str]],
    carried: CarriedValues,
    keys: str,
) -> int:
    """Register the copies under one job of a (new or empty) dataset and commit it.

    ``groups``: the source's live column groups, in order, and the copies of
    their shards (those records become the copy's groups'). ``carried``: the
    source's declared fields and its values, by copy URL (its version lists them)."""
    from ..catalog.fields import COPY

    cat.create_dataset(name, redact(root), exist_ok=True, keys=keys)
    job = cat.begin_job(
        name,
        description="shardcat.copy",
        properties={"operation": "copy", "source": source, "source_catalog": src_cat.url},
    )
    try:
        for info in infos:
            cat.register_shard(name, info, job=job)
        cat.commit_job(
            job,
            shards=[i.path for i in infos],
            require_empty=True,
            hidden=hidden,
            storage_options=options,
            groups=groups,
            operation=COPY,
            carried=carried,
        )
    except BaseException:
        with contextlib.suppress(Exception):
            cat.abort_job(job)
        raise
    return job.id
