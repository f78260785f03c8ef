"""The Catalog's version methods (log, tag, diff, delete_keys, expire, ...) and commit retries.

A mixin of :class:`~shardcat.catalog.SqlCatalog`, kept apart so each module
stays small; the SQL lives in ``versions.py`` and ``commit.py``
(docs/LIFECYCLE.md).
"""

from __future__ import annotations

import datetime as dt
import random
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal

from .._lazy import lazy_module
from .results import VersionDiff, VersionInfo

# The ORM models load on first use, not when a catalog is opened for lookups.
if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from . import commit as _commit
    from . import groups as _groups
    from . import versions as _versions
    from .results import FieldsUpdate, GroupInfo
else:
    _commit = lazy_module("shardcat.catalog.commit")
    _groups = lazy_module("shardcat.catalog.groups")
    _versions = lazy_module("shardcat.catalog.versions")

__all__ = ["COMMIT_ATTEMPTS", "Version", "VersionsApi", "with_retries"]

Version = int | str | None
"""A version number, a tag, or None (the latest)."""

COMMIT_ATTEMPTS = 8
"""How often a commit that lost the race for the dataset's version is run (whole transaction)."""


class VersionsApi:
    """Dataset versions: list, tag, compare, delete keys, expire; what :class:`Catalog` offers."""

    _uow: Callable[..., AbstractContextManager[Session]]

    def log(self, dataset: str) -> list[VersionInfo]:
        """The dataset's kept versions, newest first, with counts and tags.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            return _versions.list_versions(s, dataset)

    def tag(self, dataset: str, version: int | str, name: str, *, move: bool = False) -> int:
        """Name a kept version (a tagged version is never expired); returns its number.

        Raises
        ------
        VersionNotFoundError
            If there is no such kept version.
        ValueError
            If the tag names another version (and not ``move``), or the name is a number.
        """
        with self._uow(write=True) as s:
            return _versions.set_tag(s, dataset, version, name, move=move)

    def untag(self, dataset: str, name: str) -> int:
        """Remove a tag; returns the version it named.

        Raises
        ------
        VersionNotFoundError
            If the dataset has no such tag.
        """
        with self._uow(write=True) as s:
            return _versions.untag(s, dataset, name)

    def diff(
        self, dataset: str, old: int | str, new: int | str, *, keys: bool = False
    ) -> VersionDiff:
        """Keys added, removed and replaced from version ``old`` to ``new`` (with the keys if asked).

        Raises
        ------
        VersionNotFoundError
            If either version is not kept.
        """
        with self._uow() as s:
            return _versions.diff_versions(s, dataset, old, new, keys=keys)

    def delete_keys(
        self,
        dataset: str,
        keys: Iterable[str],
        *,
        missing_ok: bool = False,
        message: str | None = None,
    ) -> int:
        """A new version without these keys; no shard is rewritten. Returns its number.

        Older versions still resolve the keys to their bytes until they expire.

        Raises
        ------
        KeyNotFoundError
            If a key has no live record and not ``missing_ok`` (nothing changes).
        """
        wanted = list(keys)
        out: list[int] = []

        def attempt() -> None:
            with self._uow(write=True) as s:
                out.append(
                    _commit.commit_delete(
                        s, dataset, wanted, missing_ok=missing_ok, message=message
                    )
                )

        with_retries(attempt)
        return out[-1]

    def update_fields(
        self,
        dataset: str,
        values: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]],
        *,
        message: str | None = None,
        on_missing: Literal["error", "skip"] = "error",
        declare: Mapping[str, type] | None = None,
    ) -> FieldsUpdate:
        """A new version with these declared fields' values; no shard is written (docs/TRAINING.md).

        ``values``: key → {field: value} (or ``(key, {field: value})`` pairs);
        a ``None`` value unsets the field. Every field must be declared
        (:meth:`declare_fields`, or ``declare``: name → type, declared in the
        same transaction, so a refused update declares nothing). Older
        versions keep reading the values they read (``select(..., version=)``).

        Raises
        ------
        CatalogError
            A field that is not declared, or a value of the wrong kind (nothing changes).
        UnknownKeysError
            A key has no live record and ``on_missing`` is ``"error"`` (nothing changes;
            a :class:`KeyNotFoundError`; ``.keys`` names at most 1,000 of them).
        KeyTextUnavailableError
            The dataset keeps only key hashes (``keys="hash"``).
        """
        pairs = values if isinstance(values, Mapping) else list(values)
        out: list[FieldsUpdate] = []

        def attempt() -> None:
            with self._uow(write=True) as s:
                out.append(
                    _commit.commit_field_updates(
                        s, dataset, pairs, on_missing=on_missing, message=message, declare=declare
                    )
                )

        with_retries(attempt)
        return out[-1]

    def drop_group(self, dataset: str, group: str, *, message: str | None = None) -> int:
        """A new version without the column group's entries; returns its number (docs/GROUPS.md).

        No shard is rewritten: the group's records are removed at the new
        version, so older versions keep reading them until they expire (then
        gc deletes the group's shards).

        Raises
        ------
        GroupNotFoundError
            If the dataset has no live group of that name.
        """
        out: list[int] = []

        def attempt() -> None:
            with self._uow(write=True) as s:
                out.append(_groups.drop_group(s, dataset, group, message))

        with_retries(attempt)
        return out[-1]

    def groups(self, dataset: str) -> list[GroupInfo]:
        """The dataset's column groups, oldest first (dropped ones too), with their live records.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        from .datasets import find_dataset

        with self._uow() as s:
            return _groups.list_groups(s, find_dataset(s, dataset).id)

    def expire(
        self,
        dataset: str,
        *,
        keep_last: int,
        older_than: dt.timedelta | None = None,
        dry_run: bool = False,
    ) -> _versions.ExpireResult:
        """Drop old untagged versions (never the latest); shards no kept version sees become ``deleted``.

        Their files stay until :func:`shardcat.orchestration.gc` removes them.

        Parameters
        ----------
        keep_last:
            Keep this many newest versions (at least 1).
        older_than:
            Only expire versions older than this.
        dry_run:
            Report what would expire; change nothing.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow(write=not dry_run) as s:
            return _versions.expire_versions(
                s, dataset, keep_last=keep_last, older_than=older_than, dry_run=dry_run
            )


def with_retries(attempt: Callable[[], None]) -> None:
    """Run a commit transaction; rerun it when another commit took the version first (bounded)."""
    for n in range(COMMIT_ATTEMPTS):
        try:
            attempt()
            return
        except _commit.VersionMoved as e:
            if n == COMMIT_ATTEMPTS - 1:
                raise _commit.VersionMoved(
                    f"{e}; gave up after {COMMIT_ATTEMPTS} attempts (other writers kept "
                    "committing first): retry later"
                ) from e
            time.sleep(random.uniform(0, 0.02 * 2**n))  # jitter: losers do not collide again
