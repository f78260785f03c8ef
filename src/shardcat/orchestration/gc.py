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
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ShardcatError
from ..storage import redact, resolve

__all__ = ["GcReport", "gc"]

log = logging.getLogger(__name__)

_SHARDISH = (".shard", ".partial")


@dataclass
class GcReport:
    """What ``gc`` removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    aborted_jobs: list[int] = field(default_factory=list)
    deleted_shards: list[str] = field(default_factory=list)
    """Objects of shards in state ``deleted`` (and their catalog rows)."""
    orphans: list[str] = field(default_factory=list)
    """Files under a dataset root that no catalog row names."""
    errors: list[str] = field(default_factory=list)

    @property
    def removed(self) -> int:
        return len(self.deleted_shards) + len(self.orphans)

    def __str__(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        return (
            f"gc {verb} {len(self.deleted_shards)} deleted shard(s) and {len(self.orphans)} orphan "
            f"file(s); aborted {len(self.aborted_jobs)} stale job(s)"
            + (f"; {len(self.errors)} error(s)" if self.errors else "")
        )


def gc(
    catalog: Any,
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
        A :class:`~shardcat.catalog.Catalog` or its URL.
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
    """
    from ..catalog import Catalog

    cat = catalog if isinstance(catalog, Catalog) else Catalog(str(catalog))
    opts = dict(storage_options or cat.storage_options or {})
    report = GcReport(dry_run=dry_run)
    all_names = [d.name for d in cat.datasets()]
    names = [dataset] if dataset is not None else all_names
    if dataset is not None:
        cat.dataset(dataset)  # DatasetNotFoundError for an unknown name
    now = dt.datetime.now(dt.timezone.utc)
    for name in names:
        for job in cat.jobs(name, state="open"):
            if now - job.created_at >= stale_after:
                report.aborted_jobs.append(job.id)
                if not dry_run:
                    cat.abort_job(job.id)
        deleted = cat.shards(name, state="deleted")
        for shard in deleted:
            report.deleted_shards.append(shard.url)
            if not dry_run:
                _remove(shard.url, opts, report)
        if not dry_run and deleted:
            cat.purge_shards(name, [s.url for s in deleted])
        root = cat.dataset(name).root_url
        # Every dataset's shards count as known: datasets may share a folder.
        known = {_key(s.url, opts) for d in all_names for s in cat.shards(d, state=None)}
        for url, modified in _list_files(root, opts, report):
            if _key(url, opts) in known or now - modified < grace:
                continue
            report.orphans.append(url)
            if not dry_run:
                _remove(url, opts, report)
    log.info("%s", report)
    return report


def _list_files(
    root: str, opts: Mapping[str, Any], report: GcReport
) -> list[tuple[str, dt.datetime]]:
    """Shard-like files under ``root`` with their modification times (UTC)."""
    try:
        fs, path = resolve(root, opts)
        if not fs.exists(path):
            return []
        found = fs.find(path, detail=True)
    except (OSError, ShardcatError) as e:
        report.errors.append(f"cannot list {redact(root)}: {e}")
        return []
    protocol = root.split("://", 1)[0] if "://" in root else None
    out = []
    for p, info in found.items():
        name = p.rsplit("/", 1)[-1]
        if not name.endswith(_SHARDISH):
            continue
        url = p if protocol in (None, "file") else fs.unstrip_protocol(p)
        out.append((url, _mtime(info)))
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


def _remove(url: str, opts: Mapping[str, Any], report: GcReport) -> None:
    try:
        fs, path = resolve(url, opts)
        if fs.exists(path):
            fs.rm_file(path)
    except (OSError, ShardcatError) as e:
        report.errors.append(f"cannot remove {redact(url)}: {e}")
