"""Planted bugs and forced schedules: how the checker is shown to catch what it should.

A history's ``plant`` names entries of :data:`PLANTED`, comma-separated.
Each is applied in every process of the history before its first operation
(the catalog code it patches runs in that process; the setup and the final
observation, in the parent, are never patched):

* planted bugs break the library on purpose, in-process (a delete that
  forgets a key, a lookup that serves the version before the latest, an
  expiry that retires shards kept versions still read, a commit that lands
  and then reports failure, a compaction whose commit no longer checks that
  what it rewrites is still live, a ``drop_group`` whose version leaves the
  group's records live, a fold whose version drops the group but leaves its
  records live); the checker must report each;
* forced schedules run the real library but make a race happen every time:
  ``delete-in-compact`` and ``overwrite-in-compact`` run, inside a
  compaction and just before its commit, a ``delete_keys`` of every key the
  compaction rewrote (or an overwrite of the dataset) as operations of their
  own, logged like the others: a compaction racing a delete, as a history;
  ``expire-after-compact`` runs, right after each compaction's commit and
  before it returns, another commit and an expiry that keeps only that one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...catalog import internal
from ...errors import CatalogError

__all__ = ["PLANTED", "apply"]


def apply(plant: str | None, journal: Any) -> None:
    """Apply the planted bugs and schedules named in ``plant`` (comma-separated) in this process.

    Raises
    ------
    ValueError
        A name that is not in :data:`PLANTED`.
    """
    for name in filter(None, (plant or "").split(",")):
        if name not in PLANTED:
            raise ValueError(f"no planted bug {name!r}; known: {', '.join(sorted(PLANTED))}")
        PLANTED[name](journal)


def _lost_delete(journal: Any) -> None:
    """``delete_keys`` removes every key but the last one it is given, and reports success."""
    from ...reading import Catalog

    real = Catalog.delete_keys

    def delete_keys(self: Catalog, dataset: str, keys: Any, **kw: Any) -> int:
        wanted = list(keys)
        return real(self, dataset, wanted[:-1], **{**kw, "missing_ok": True})

    Catalog.delete_keys = delete_keys  # type: ignore[method-assign,assignment]


def _stale_read(journal: Any) -> None:
    """Lookups of the latest version serve the version before it (a stale replica)."""
    from ...reading import Catalog

    real_get, real_many = Catalog.get, Catalog.get_many

    def before(self: Catalog, dataset: str, version: Any) -> Any:
        if version is not None:
            return version
        kept = [v.number for v in self.log(dataset)]
        return kept[1] if len(kept) > 1 else None

    def get(
        self: Catalog, dataset: str, key: str, entries: Any = None, *, version: Any = None
    ) -> Any:
        return real_get(self, dataset, key, entries, version=before(self, dataset, version))

    def get_many(
        self: Catalog, dataset: str, keys: Any, entries: Any = None, *, version: Any = None
    ) -> Any:
        return real_many(self, dataset, keys, entries, version=before(self, dataset, version))

    Catalog.get = get  # type: ignore[method-assign]
    Catalog.get_many = get_many  # type: ignore[method-assign]


def _expire_retires_kept(journal: Any) -> None:
    """``expire`` retires every shard with a removed record... even those kept versions read."""
    from sqlalchemy import text

    from ...catalog import versions

    def unreferenced(session: Any, dataset_id: int) -> list[tuple[int, str]]:
        rows = session.execute(
            text(
                "SELECT s.id, s.url FROM shards s WHERE s.dataset_id = :d "
                "AND s.state = 'committed' AND s.removed_version IS NOT NULL"
            ),
            {"d": dataset_id},
        )
        return [(int(i), str(u)) for i, u in rows]

    versions.unreferenced_shards = unreferenced


def _phantom_failure(journal: Any) -> None:
    """``delete_keys`` commits its version, then reports a failure (a lost acknowledgement)."""
    from ...reading import Catalog

    real = Catalog.delete_keys

    def delete_keys(self: Catalog, dataset: str, keys: Any, **kw: Any) -> int:
        version = real(self, dataset, keys, **kw)
        raise CatalogError(f"the connection was lost after version {version} was committed")

    Catalog.delete_keys = delete_keys  # type: ignore[method-assign,assignment]


def _compact_resurrects(journal: Any) -> None:
    """The rewrite check undone: a compaction's copies go live even where another commit deleted
    or replaced the key after the job began (the commit's test that the record a copy
    replaces is still one live at the base version always passes)."""
    from ...catalog import duplicates

    duplicates._UNCHANGED_SINCE_BASE = "(1 = 1)"
    duplicates.STALE_COPY = f"{duplicates.OF_JOB} AND NOT (1 = 1)"  # built from it at import


def _drop_group_stays(journal: Any) -> None:
    """``drop_group`` commits its version and marks the group dropped, but removes none of its
    records: they stay visible at the drop's version and after it."""
    from ...catalog import groups, versions

    real = versions.remove_records  # what groups.py imported

    def remove_records(session: Any, where: str, params: dict[str, object]) -> tuple[int, int]:
        if "records.group_id = :g" in where:  # the drop's statement (not a skip's, an OF_JOB)
            return 0, 0
        return real(session, where, params)

    groups.remove_records = remove_records  # type: ignore[attr-defined]


def _fold_keeps_group(journal: Any) -> None:
    """A fold (``compact(fold_groups=)``) commits its rewritten base records and marks the group
    dropped, but removes none of the group's records: they stay live (and counted) beside the
    base records that now hold their entries."""
    import re

    from ...catalog import groups, versions

    real = versions.remove_records  # what groups.py imported
    folds = re.compile(r"records\.group_id = \d")  # the fold's statement names the group's id

    def remove_records(session: Any, where: str, params: dict[str, object]) -> tuple[int, int]:
        if folds.search(where):
            return 0, 0
        return real(session, where, params)

    groups.remove_records = remove_records  # type: ignore[attr-defined]


def _in_compact(inject: Callable[[Any, Any, str, list[str]], None]) -> Callable[[Any], None]:
    """A forced schedule: ``inject`` runs inside each compaction, right before its commit."""

    def plant(journal: Any) -> None:
        from ...reading import Catalog

        real = Catalog.commit_job

        def commit_job(self: Catalog, job: Any, **kw: Any) -> Any:
            if kw.get("operation") == "compact":
                job_id = getattr(job, "id", job)
                dataset = journal.config.dataset
                rewritten = sorted(
                    r.key
                    for s in self.shards(dataset, state="staged")
                    if s.job_id == job_id
                    for r in internal.record_rows(self, s.id)
                )
                if rewritten:
                    inject(journal, self, dataset, rewritten)
            return real(self, job, **kw)

        Catalog.commit_job = commit_job  # type: ignore[method-assign,assignment]

    return plant


def _after_compact(inject: Callable[[Any, Any, str], None]) -> Callable[[Any], None]:
    """A forced schedule: ``inject`` runs inside each compaction, right after its commit."""

    def plant(journal: Any) -> None:
        from ...reading import Catalog

        real = Catalog.commit_job

        def commit_job(self: Catalog, job: Any, **kw: Any) -> Any:
            done = real(self, job, **kw)
            if kw.get("operation") == "compact":
                inject(journal, self, journal.config.dataset)
            return done

        Catalog.commit_job = commit_job  # type: ignore[method-assign,assignment]

    return plant


def _commit_and_expire(journal: Any, cat: Any, dataset: str) -> None:
    """Another commit, then an expiry keeping only it: the compaction's version is gone."""
    args = {"keys": journal.config.keys[:1], "missing_ok": True}
    journal.record(journal.next_injected_id(), "delete", args)
    journal.record(journal.next_injected_id(), "expire", {"keep_last": 1})


def _delete_rewritten(journal: Any, cat: Any, dataset: str, keys: list[str]) -> None:
    journal.record(journal.next_injected_id(), "delete", {"keys": keys, "missing_ok": True})


def _overwrite(journal: Any, cat: Any, dataset: str, keys: list[str]) -> None:
    fresh = [k for k in journal.config.keys if k not in keys][:2] or journal.config.keys[:2]
    args = {"keys": fresh, "root": cat.info(dataset).root_url}
    journal.record(journal.next_injected_id(), "overwrite", args)


PLANTED: dict[str, Callable[[Any], None]] = {
    "lost-delete": _lost_delete,
    "stale-read": _stale_read,
    "expire-retires-kept": _expire_retires_kept,
    "phantom-failure": _phantom_failure,
    "compact-resurrects": _compact_resurrects,
    "drop-group-stays": _drop_group_stays,
    "fold-keeps-group": _fold_keeps_group,
    "delete-in-compact": _in_compact(_delete_rewritten),
    "overwrite-in-compact": _in_compact(_overwrite),
    "expire-after-compact": _after_compact(_commit_and_expire),
}
"""Name -> what applying it does in a history's process."""
