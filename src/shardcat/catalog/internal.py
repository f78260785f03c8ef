"""Catalog calls made only by shardcat's own layers (orchestration, readers), not public API.

Each takes the catalog and opens one unit of work on it, as its methods do;
the SQL is in the modules named. They were ``Catalog`` methods; those names
still work for one release, with a DeprecationWarning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_module
from .changes import note_options
from .history import Version
from .results import GroupInfo, RecordRow, ShardRow

if TYPE_CHECKING:
    from . import datasets as _datasets
    from . import fields as _fields
    from . import group_rows as _group_rows
    from . import groups as _groups
    from . import moves as _moves
    from . import rows as _rows
    from . import shards as _shards
    from . import versions as _versions
    from .catalog import SqlCatalog
    from .fields import CarriedValues
else:
    _datasets = lazy_module("shardcat.catalog.datasets")
    _fields = lazy_module("shardcat.catalog.fields")
    _group_rows = lazy_module("shardcat.catalog.group_rows")
    _groups = lazy_module("shardcat.catalog.groups")
    _moves = lazy_module("shardcat.catalog.moves")
    _rows = lazy_module("shardcat.catalog.rows")
    _shards = lazy_module("shardcat.catalog.shards")
    _versions = lazy_module("shardcat.catalog.versions")

__all__ = [
    "copy_fields",
    "drop_unused_dataset",
    "field_values",
    "group_rows",
    "live_groups",
    "move_shards",
    "purge_shards",
    "record_rows",
    "set_dataset_root",
    "shard_groups",
    "visible_shards",
]


def copy_fields(
    cat: SqlCatalog, dataset: str, shard_id: int, moves: Iterable[tuple[int, int, int]]
) -> int:
    """Copy declared fields' values to one shard's records from the records they copy.

    ``moves`` are ``(source shard id, source offset, offset in shard_id)``
    (what compaction rewrote where); returns the values copied.

    Raises
    ------
    CatalogError
        A shard is not the dataset's.
    """
    with cat._uow(write=True) as s:
        return _fields.copy_field_values(s, dataset, shard_id, moves)


def field_values(cat: SqlCatalog, dataset: str, shard_ids: Iterable[int]) -> CarriedValues:
    """The dataset's declared fields and the values its latest version reads in these shards.

    Keyed by ``str(shard id)``; a copy maps them to its shards' URLs and hands them to its
    commit (``commit_job(carried=)``).
    """
    with cat._uow() as s:
        return _fields.live_values(s, dataset, list(shard_ids))


def drop_unused_dataset(cat: SqlCatalog, name: str, job_id: int) -> bool:
    """Delete a dataset that a failed first job created and left unused; whether it did.

    Kept if it has a committed version, another job, or a shard that is not
    one of ``job_id``'s deleted ones (see :func:`.datasets.drop_unused_dataset`).
    """
    with cat._uow(write=True) as s:
        return _datasets.drop_unused_dataset(s, name, job_id)


def set_dataset_root(cat: SqlCatalog, name: str, root_url: str) -> None:
    """Record that the dataset's shards now live under ``root_url`` (after a move).

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    with cat._uow(write=True) as s:
        _datasets.set_root(s, name, root_url)


def move_shards(
    cat: SqlCatalog,
    dataset: str,
    moves: Mapping[str, tuple[str, str]],
    *,
    expected_version: int,
    root_url: str,
    storage_options: Mapping[str, Any] | None = None,
) -> int:
    """Point shards at byte-identical copies and the dataset at its new root, in one commit.

    ``moves``: old URL -> (new URL, file id the row must have). Every
    row keeps its records and versions (what each kept version serves
    or hides is unchanged); a version with operation ``move`` records
    it. Returns that version's number. ``storage_options``: the new
    root's, for the version's manifest.

    Raises
    ------
    CommitConflictError
        The dataset moved past ``expected_version``, or a shard is no
        longer committed with that file id; nothing changes.
    DatasetNotFoundError
        If there is no such dataset.
    """
    with cat._uow(write=True) as s:
        note_options(s, storage_options)
        return _moves.move_shards(
            s, dataset, moves, expected_version=expected_version, root_url=root_url
        )


def purge_shards(cat: SqlCatalog, dataset: str, urls: Iterable[str]) -> int:
    """Forget ``deleted`` shards (tombstones) once their files are gone; returns rows removed.

    Shards in other states are never touched.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    with cat._uow(write=True) as s:
        return _shards.purge_shards(s, dataset, urls)


def record_rows(cat: SqlCatalog, shard_id: int) -> list[RecordRow]:
    """Every record row of one shard (any state), in file order, spans decoded.

    For readers that walk a shard through the catalog (tar shards have no
    footer of their own) and for ``taridx export``.
    """
    with cat._uow() as s:
        return _shards.record_rows(s, shard_id)


def shard_groups(cat: SqlCatalog, dataset: str) -> tuple[list[str], dict[str, str]]:
    """The dataset's live column groups, oldest first, and which committed shards hold their records.

    Returns ``(names, {shard URL: group name})``; a shard not named holds
    base records (docs/GROUPS.md).

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    with cat._uow() as s:
        ds = _datasets.find_dataset(s, dataset)
        live = [g.name for g in _groups.list_groups(s, ds.id) if g.dropped_version is None]
        return live, _groups.shard_groups(s, ds.id)


def visible_shards(
    cat: SqlCatalog, dataset: str, version: Version = None, *, with_groups: bool = False
) -> tuple[int, list[tuple[ShardRow, frozenset[int]]]]:
    """The version's number and its shards, each with the offsets of records it hides.

    What :func:`shardcat.read` streams: a shard's records minus the hidden
    ones (deleted, replaced or skipped at that version). ``with_groups``: the
    column groups' shards too (docs/GROUPS.md), else the base's only.

    Raises
    ------
    VersionNotFoundError
        If there is no such kept version or tag.
    """
    with cat._uow() as s:
        number, rows = _versions.visible_shards(s, dataset, version, with_groups=with_groups)
        return number, [(_rows.shard_row(r, dataset), hidden) for r, hidden in rows]


def group_rows(cat: SqlCatalog, dataset: str, number: int) -> _group_rows.GroupRows:
    """The column-group records version ``number`` sees, beside their base records (readers' joins)."""
    from .datasets import find_dataset

    with cat._uow() as s:
        ds = find_dataset(s, dataset)
        return _group_rows.group_rows(s, ds.id, dataset, number)


def live_groups(
    cat: SqlCatalog, dataset: str, names: Iterable[str] | None = None
) -> list[GroupInfo]:
    """The dataset's live column groups (those of ``names`` only), in group order.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    GroupNotFoundError
        A name is not a live group's (the message names the version that dropped it, if one did).
    """
    with cat._uow() as s:
        ds = _datasets.find_dataset(s, dataset)
        live = [g for g in _groups.list_groups(s, ds.id) if g.dropped_version is None]
        if names is None:
            return live
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if name not in {g.name for g in live}:
                raise _groups.no_such_group(s, ds, name)
        return [g for g in live if g.name in wanted]
