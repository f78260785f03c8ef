"""Garbage collection: what failed or killed jobs left behind.

A job that fails is aborted by its client: its staged shards become
``deleted``. A job whose client was killed stays ``open`` forever. Neither
is visible to lookups, but both leave objects in the bucket (and a killed
local writer leaves ``.partial`` files). ``gc`` finds and removes them:

1. open jobs older than ``stale_after`` are aborted (their client is gone);
2. objects of ``deleted`` shards are removed, then their catalog rows;
3. files under the dataset's root that no catalog row of any dataset names
   (shards written but never registered, ``.partial`` temporaries) are
   removed once older than ``grace``, so that a job still writing is never
   touched. A dataset's root belongs to one catalog: files another catalog
   registered there would look like orphans.

What gc never deletes, whatever the rows say:

* a file that a live (staged or committed) row of any dataset names — a
  tombstone may share its URL with a row registered again later;
* a file outside the dataset's root folder — a row registered by hand may
  name any file; gc forgets such a tombstone and leaves the file alone;
* a tar indexed in place (shard kind ``tar``): the tar is the user's file;
* a file of a folder indexed in place (shard kind ``files``), nor any file
  under such a folder: a group's row names the folder, never a file gc may
  remove, and the folder's files are the user's even where they end in
  ``.shard``;
* an MDS shard or LitData chunk indexed in place (kinds ``mds``,
  ``litdata``): the directory's ``index.json`` names it, so not even
  ``delete_tars`` removes it.

Each is reported in :attr:`GcReport.kept`.

A file that cannot be removed keeps its row (the next gc tries again). Every
request rides out a store that goes away for a while (storage/retry.py); one
that stays away past ``storage_retry_deadline`` stops gc and delete with
:class:`~shardcat.errors.StorageUnreachableError`, the rows of what is left kept.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._units import count_of, format_bytes
from ..catalog import internal
from ..catalog.kinds import shard_kind
from ..catalog.models import LIVE_STATES
from ..errors import ShardcatError, StorageError, StorageUnreachableError
from ..format.folder import FOLDER_MARK
from ..format.folder import folder_of as group_folder
from ..reading.history import folder_of, history_files, remove_history
from ..storage import gave_up, redact, resolve, retried
from ..storage.removal import Removal, existing_urls, remove_files

if TYPE_CHECKING:
    from ..reading import Catalog

__all__ = ["DeleteReport", "GcReport", "delete_dataset", "forget_failed_dataset", "gc"]

log = logging.getLogger(__name__)

_SHARDISH = (".shard", ".partial")

_IN_PLACE = {
    "tar": "a tar",
    "files": "a folder group",
    "mds": "an MDS shard",
    "litdata": "a LitData chunk",
}


@dataclass
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    aborted_jobs: list[int] = field(default_factory=list)
    deleted_shards: list[str] = field(default_factory=list)
    """Objects of shards in state ``deleted`` (and their catalog rows)."""
    orphans: list[str] = field(default_factory=list)
    """Files under a dataset root that no catalog row names."""
    kept: list[str] = field(default_factory=list)
    """Files of deleted shards left in place, each with the reason."""
    errors: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    """Bytes of each removed (or, dry run, removable) object, where known."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Why each removed object is garbage."""
    history_written: dict[str, list[int]] = field(default_factory=dict)
    """Per dataset, the versions whose manifests gc wrote (their commit's client died first)."""

    @property
    def removed(self) -> int:
        return len(self.deleted_shards) + len(self.orphans)

    @property
    def bytes(self) -> int:
        """Bytes reclaimed (or, with ``dry_run``, that would be)."""
        return sum(self.sizes.get(u, 0) for u in [*self.deleted_shards, *self.orphans])

    def __str__(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"gc {verb} {count_of(len(self.deleted_shards), 'deleted shard')} and "
            f"{count_of(len(self.orphans), 'orphan file')} ({format_bytes(self.bytes)}); "
            f"aborted {count_of(len(self.aborted_jobs), 'stale job')}"
            + (
                f"; kept {count_of(len(self.kept), 'file')} still in use or outside the root"
                if self.kept
                else ""
            )
            + (
                f"; wrote {count_of(sum(map(len, self.history_written.values())), 'version manifest')}"
                " killed clients left unwritten"
                if self.history_written
                else ""
            )
            + (f"; {count_of(len(self.errors), 'error')}" if self.errors else "")
        )


def gc(
    catalog: Catalog | str,
    dataset: str | None = None,
    *,
    dry_run: bool = False,
    grace: dt.timedelta = dt.timedelta(hours=1),
    stale_after: dt.timedelta = dt.timedelta(hours=24),
    storage_options: Mapping[str, Any] | None = None,
) -> GcReport:
    """Remove what failed and killed jobs left behind, in one dataset or all.

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.Catalog` or its URL.
    dataset:
        Only this dataset (default: every dataset).
    dry_run:
        Report what would be removed; change nothing.
    grace:
        Leave unregistered files younger than this alone (a job may still be
        writing them).
    stale_after:
        Abort jobs left open longer than this (their client died).
    storage_options:
        fsspec options for the datasets' storage.

    Raises
    ------
    DatasetNotFoundError
        ``dataset`` is not in the catalog.
    StorageUnreachableError
        The store stayed unreachable past ``storage_retry_deadline``: gc
        stopped there; what it removed is forgotten, the rest keeps its rows
        (run gc again).
    """
    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        opts = dict(storage_options or cat.storage_options or {})
        report = GcReport(dry_run=dry_run)
        names = [dataset] if dataset is not None else [d.name for d in cat.datasets()]
        if dataset is not None:
            cat.info(dataset)  # DatasetNotFoundError for an unknown name
        now = dt.datetime.now(dt.timezone.utc)
        for name in names:
            for job in cat.jobs(name, state="open"):
                if now - job.created_at >= stale_after:
                    report.aborted_jobs.append(job.id)
                    if not dry_run:
                        cat.abort_job(job.id)
            root = cat.info(name).root_url
            deleted = cat.shards(name, state="deleted")
            if deleted:
                live = {_key(u, opts) for u in cat.shard_urls(states=LIVE_STATES)}
                doomed = []
                for shard in deleted:
                    reason = _keep_reason(shard.url, root, live, opts)
                    if reason is None and not shard_kind(shard.kind).owns_files:
                        reason = (
                            f"{_IN_PLACE[shard.kind]} indexed in place: gc forgets its row, "
                            "never the file"
                        )
                    if reason is not None:
                        report.kept.append(f"{shard.url}: {reason}")
                    else:
                        doomed.append(shard.url)
                        report.sizes[shard.url] = shard.size_bytes
                        report.reasons[shard.url] = (
                            "no kept version reads it (expired, replaced or removed)"
                            if shard.added_version is not None
                            else "left by a failed, aborted or retried job (never committed)"
                        )
                if not dry_run:
                    # Re-checked just before deleting, in one query: a registration may
                    # have raced the reading above.
                    doomed = _recheck(doomed, cat.shard_urls(states=LIVE_STATES), opts, report)
                    removal = _remove(doomed, opts, report)
                    # A file still there keeps its row: the next gc removes it.
                    left = set(removal.failed)
                    internal.purge_shards(cat, name, [s.url for s in deleted if s.url not in left])
                    doomed = [u for u in doomed if u not in left]
                    _stop_if_unreachable(removal, report)
                report.deleted_shards.extend(doomed)
            # Every dataset's shards count as known: datasets may share a folder.
            every = cat.shard_urls()
            known = {_key(u, opts) for u in every}
            # Folders indexed in place hold the user's files, whatever their names.
            theirs = {_key(group_folder(u), opts)[1] + "/" for u in every if FOLDER_MARK in u}
            orphans = []
            for url, modified, size in _list_files(root, opts, report):
                key = _key(url, opts)
                if any(key[1].startswith(folder) for folder in theirs):
                    continue
                if key not in known and now - modified >= grace:
                    orphans.append(url)
                    report.sizes[url] = size
                    report.reasons[url] = (
                        f"no catalog row names it; older than the grace period ({grace})"
                    )
            if not dry_run:
                orphans = _recheck(orphans, cat.shard_urls(), opts, report)
                removal = _remove(orphans, opts, report)
                orphans = [u for u in orphans if u not in removal.failed]
                _stop_if_unreachable(removal, report)
            report.orphans.extend(orphans)
            if not dry_run:
                # What a client killed between its commit and its manifest left unwritten.
                try:
                    written = cat.write_history(name, storage_options=opts).written
                except (OSError, ShardcatError) as e:
                    if gave_up(e):
                        raise _stopped(e, "gc", "run gc again") from e
                    report.errors.append(f"cannot write the history of {name!r}: {e}")
                else:
                    if written:
                        report.history_written[name] = written
        log.info("%s", report)
        return report


@dataclass
class DeleteReport:
    """What :func:`delete_dataset` removed (or, with ``dry_run``, would remove)."""

    dataset: str
    dry_run: bool
    shards: int = 0
    """Shard rows of the dataset, in every state."""
    bytes: int = 0
    removed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    """Objects the rows named that were already gone."""
    kept: list[str] = field(default_factory=list)
    """Files left in place, each with the reason."""
    errors: list[str] = field(default_factory=list)


def delete_dataset(
    catalog: Catalog | str,
    dataset: str,
    *,
    dry_run: bool = False,
    storage_options: Mapping[str, Any] | None = None,
    delete_tars: bool = False,
) -> DeleteReport:
    """Remove a dataset's shard objects, then its catalog rows.

    Tars indexed in place (``index_tar``) are the user's files: only their
    rows go, unless ``delete_tars`` is true.

    Like gc, it never deletes a file that a live row of another dataset names,
    nor one outside the dataset's root folder (a shard registered in place,
    such as an indexed tar): those are reported in ``kept`` and left alone.
    If an object cannot be removed, the rows are kept (they name what is
    left) and StorageError is raised: running it again finishes the job.

    Raises
    ------
    DatasetNotFoundError
        No such dataset.
    StorageUnreachableError
        The store stayed unreachable past ``storage_retry_deadline``; the
        catalog rows are kept.
    StorageError
        Some objects could not be removed; the catalog rows are kept.
    """
    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        opts = dict(storage_options or cat.storage_options or {})
        root = cat.info(dataset).root_url
        shards = cat.shards(dataset, state=None)
        report = DeleteReport(dataset, dry_run, len(shards), sum(s.size_bytes for s in shards))
        mine = cat.shard_urls(dataset=dataset)
        # Per URL: may deleting the dataset delete the file (kinds.py decides per shard kind)?
        owned = {
            s.url: shard_kind(s.kind).owns_files
            or (
                delete_tars and shard_kind(s.kind).is_file and shard_kind(s.kind).deleted_on_request
            )
            for s in shards
        }
        kinds = {s.url: s.kind for s in shards}
        others = {
            _key(u, opts)
            for d in cat.datasets()
            if d.name != dataset
            for u in cat.shard_urls(states=LIVE_STATES, dataset=d.name)
        }
        doomed = []
        for url in sorted(mine):
            reason = _keep_reason(
                url, root, others, opts, "a shard row of another dataset names it"
            )
            if reason is None and not owned.get(url, True):
                reason = (
                    "a tar indexed in place: only its rows are deleted "
                    "(delete_tars=True / --delete-tars removes it)"
                    if kinds.get(url) == "tar"
                    else f"{_IN_PLACE[kinds[url]]} indexed in place: only its rows are deleted, "
                    "never its files"
                )
            if reason is not None:
                report.kept.append(f"{url}: {reason}")
            else:
                doomed.append(url)
        unreachable: BaseException | None = None
        if dry_run:
            try:
                present = existing_urls(doomed, opts)
            except (OSError, ShardcatError) as e:
                report.errors.append(f"cannot list the shards of {dataset!r}: {e}")
                present = set()
                unreachable = e if gave_up(e) else None
            report.removed = [u for u in doomed if u in present]
            report.missing = [u for u in doomed if u not in present]
        else:
            try:
                history = history_files(root, dataset, opts)
            except StorageUnreachableError as e:
                if not gave_up(e):
                    raise
                raise _stopped(e, f"delete of {dataset!r}", "run delete again") from e
            # One batched delete per filesystem (s3fs: 1,000 keys per request), the
            # dataset's history (_versions/) with its shards.
            removal = remove_files([*doomed, *history], opts)
            unreachable = removal.unreachable
            report.removed = [u for u in removal.removed if u not in history]
            report.missing = [u for u in removal.missing if u not in history]
            report.errors.extend(
                f"cannot remove {redact(url)}: {why}" for url, why in removal.failed.items()
            )
        if report.errors:
            kind = StorageError if unreachable is None else StorageUnreachableError
            raise kind(
                f"could not remove {len(report.errors)} shard object(s) of {dataset!r}, catalog rows "
                f"kept (run delete again): {report.errors[0]}"
            ) from unreachable
        if not dry_run:
            remove_history([], folder_of(root, dataset), opts)  # the folders it left empty
            cat.delete_dataset(dataset)
        return report


def forget_failed_dataset(
    cat: Catalog, dataset: str, job_id: int, storage_options: Mapping[str, Any]
) -> bool:
    """Remove the dataset a failed first job created, if that job was all it had; whether it did.

    The files of the job's (aborted, so ``deleted``) shards go first, as gc
    would remove them: afterwards no row names them. A file that cannot be
    removed keeps the dataset, for gc to retry. The dataset stays too if it
    has a committed version, another job, or another shard (a concurrent
    job); a tar indexed in place is never removed, only its row. Never raises:
    the job's own error is what the caller reports.
    """
    try:
        root = cat.info(dataset).root_url
        shards = [s for s in cat.shards(dataset, state=None) if s.job_id == job_id]
        if any(s.state != "deleted" for s in shards):
            return False
        live = {_key(u, storage_options) for u in cat.shard_urls(states=LIVE_STATES)}
        doomed = [
            s.url
            for s in shards
            if shard_kind(s.kind).owns_files
            and _keep_reason(s.url, root, live, storage_options) is None
        ]
        if doomed and remove_files(doomed, storage_options).failed:
            return False
        dropped = internal.drop_unused_dataset(cat, dataset, job_id)
    except Exception as e:
        log.warning("could not remove dataset %r left by failed job %s: %s", dataset, job_id, e)
        return False
    if dropped:
        log.info("removed dataset %r: its first job (%s) failed", dataset, job_id)
    return dropped


def _keep_reason(
    url: str,
    root: str,
    live: set[tuple[str, str]],
    opts: Mapping[str, Any],
    named: str = "a staged or committed shard row names this file",
) -> str | None:
    """Why the file of a deleted shard must stay, or None if it may be removed."""
    key = _key(url, opts)
    if key in live:
        return named
    if not _under(key, _key(root, opts)):
        return "outside the dataset's root folder (remove it yourself if it is yours)"
    return None


def _under(key: tuple[str, str], root: tuple[str, str]) -> bool:
    return key[0] == root[0] and key[1].startswith(root[1].rstrip("/") + "/")


def _list_files(
    root: str, opts: Mapping[str, Any], report: GcReport
) -> list[tuple[str, dt.datetime, int]]:
    """Shard-like files under ``root`` with their modification times (UTC) and sizes."""
    try:
        fs, path = resolve(root, opts)
        if not retried(fs, "exists", redact(root), path):
            return []
        found = retried(fs, "find", redact(root), path, detail=True)
    except (OSError, ShardcatError) as e:
        if gave_up(e):
            raise _stopped(e, "gc", "run gc again") from e
        report.errors.append(f"cannot list {redact(root)}: {e}")
        return []
    protocol = root.split("://", 1)[0] if "://" in root else None
    out = []
    for p, info in found.items():
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(_SHARDISH):
            continue
        url = p if protocol in (None, "file") else fs.unstrip_protocol(p)
        out.append((url, _mtime(info), int(info.get("size") or 0)))
    return out


def _key(url: str, opts: Mapping[str, Any]) -> tuple[str, str]:
    """A URL as (filesystem protocol, path): ``memory://a`` and ``memory:///a`` are one file."""
    fs, path = resolve(url, opts)
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol, path.rstrip("/")


def _mtime(info: Mapping[str, Any]) -> dt.datetime:
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if isinstance(value, dt.datetime):
            return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        if isinstance(value, (int, float)):
            return dt.datetime.fromtimestamp(value, tz=dt.timezone.utc)
    # Unknown age: treat as new, so a grace period protects it.
    return dt.datetime.now(dt.timezone.utc)


def _recheck(
    urls: list[str], named: Iterable[str], opts: Mapping[str, Any], report: GcReport
) -> list[str]:
    """``urls`` less those a catalog row names now (they are kept and reported)."""
    now_named = {_key(u, opts) for u in named}
    out = []
    for url in urls:
        if _key(url, opts) in now_named:
            report.kept.append(f"{url}: registered again meanwhile")
        else:
            out.append(url)
    return out


def _remove(urls: list[str], opts: Mapping[str, Any], report: GcReport) -> Removal:
    """Remove ``urls`` in one batched delete per filesystem; failures go to ``report.errors``
    (and :attr:`Removal.failed`)."""
    if not urls:
        return Removal()
    try:
        removal = remove_files(urls, opts)
    except (OSError, ShardcatError) as e:
        report.errors.append(f"cannot remove {len(urls)} file(s): {e}")
        return Removal(failed={url: str(e) for url in urls})
    report.errors.extend(
        f"cannot remove {redact(url)}: {why}" for url, why in removal.failed.items()
    )
    return removal


def _stop_if_unreachable(removal: Removal, report: GcReport) -> None:
    """gc stops where the store stayed away past the retry deadline: each further request
    would wait as long (``report`` is logged: what it did do)."""
    if removal.unreachable is not None:
        log.info("%s", report)
        raise _stopped(removal.unreachable, "gc", "run gc again") from removal.unreachable


def _stopped(e: BaseException, what: str, again: str) -> StorageUnreachableError:
    """``e`` (the store unreachable past the deadline) as the error of ``what``, which stopped
    there with the rows of every file left kept; ``again``: how to finish the job."""
    return StorageUnreachableError(
        f"{what} stopped, the catalog rows of the files left kept ({again}): {e}",
        path=getattr(e, "path", None),
    )
