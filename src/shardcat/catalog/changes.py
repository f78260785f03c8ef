"""What a transaction changed in datasets' histories, noted on its session for after the commit.

The transaction that makes a version (or changes tags or expiry) calls
:func:`note`; once it has committed, the catalog hands :func:`changes_of`
to the read layer, which writes the dataset's manifests beside its shards
(``shardcat.reading.history``). Noting, not writing: the catalog opens no files,
and a transaction that rolls back or is retried leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = [
    "HistoryChange",
    "changes_of",
    "note",
    "note_dataset",
    "note_group",
    "note_options",
    "noted_dataset",
    "noted_groups",
    "noted_row",
    "options_of",
]

_NOTES = "shardcat.history"
_OPTIONS = "shardcat.history.storage_options"
_ROWS = "shardcat.history.rows"
_DATASETS = "shardcat.history.datasets"
_GROUPS = "shardcat.history.groups"


@dataclass(frozen=True, slots=True, order=True)
class HistoryChange:
    """What a committed transaction changed in a dataset's history."""

    dataset_id: int
    version: int
    """The version it made; 0: only its tags or expired versions changed (the refs file)."""


def note(session: Session, dataset_id: int, version: int = 0, row: Any = None) -> None:
    """Record on the session that its commit changes the dataset's history.

    ``row``: the version's row as its INSERT returned it (its manifest needs no query for it).
    """
    session.info.setdefault(_NOTES, set()).add(HistoryChange(dataset_id, version))
    if row is not None:
        session.info.setdefault(_ROWS, {})[dataset_id, version] = row


def noted_row(session: Session, dataset_id: int, version: int) -> Any:
    """The version row :func:`note` was given, if any."""
    return session.info.get(_ROWS, {}).get((dataset_id, version))


def note_group(
    session: Session, dataset_id: int, version: int, name: str, *, dropped: bool = False
) -> None:
    """A column group this transaction's version created (or dropped): its manifest says so.

    Every change of a group's ``added_version`` or ``dropped_version`` to a version
    the transaction makes is noted here, so that version's manifest needs no query
    for them (:func:`noted_groups`).
    """
    added, gone = session.info.setdefault(_GROUPS, {}).setdefault((dataset_id, version), ([], []))
    (gone if dropped else added).append(name)


def noted_groups(
    session: Session, dataset_id: int, version: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The groups :func:`note_group` recorded for a version: (created, dropped), in order."""
    added, gone = session.info.get(_GROUPS, {}).get((dataset_id, version), ((), ()))
    return tuple(added), tuple(gone)


def note_dataset(session: Session, dataset_id: int, name: str, root: str) -> None:
    """A dataset's name and root as this transaction read them (its manifests' folder)."""
    session.info.setdefault(_DATASETS, {})[dataset_id] = (name, root)


def noted_dataset(session: Session, dataset_id: int) -> tuple[str, str] | None:
    found: tuple[str, str] | None = session.info.get(_DATASETS, {}).get(dataset_id)
    return found


def changes_of(session: Session) -> list[HistoryChange]:
    """What :func:`note` recorded on this session, in dataset and version order."""
    return sorted(session.info.get(_NOTES, ()))


def note_options(session: Session, options: Mapping[str, Any] | None) -> None:
    """The fsspec options the dataset's folder is written with (a job's own), if not the catalog's."""
    if options:
        session.info[_OPTIONS] = dict(options)


def options_of(session: Session) -> dict[str, Any] | None:
    """What :func:`note_options` recorded on this session, if anything."""
    options: dict[str, Any] | None = session.info.get(_OPTIONS)
    return options
