"""What a transaction changed in datasets' histories, noted on its session for after the commit.

The transaction that makes a version (or changes tags or expiry) calls
:func:`note`; once it has committed, the catalog hands :func:`changes_of`
to the read layer, which writes the dataset's manifests beside its shards
(``shardcat.reading.history``). Noting, not writing: the catalog opens no files,
and a transaction that rolls back or is retried leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = ["HistoryChange", "changes_of", "note"]

_NOTES = "shardcat.history"


@dataclass(frozen=True, slots=True, order=True)
class HistoryChange:
    """What a committed transaction changed in a dataset's history."""

    dataset_id: int
    version: int
    """The version it made; 0: only its tags or expired versions changed (the refs file)."""


def note(session: Session, dataset_id: int, version: int = 0) -> None:
    """Record on the session that its commit changes the dataset's history."""
    session.info.setdefault(_NOTES, set()).add(HistoryChange(dataset_id, version))


def changes_of(session: Session) -> list[HistoryChange]:
    """What :func:`note` recorded on this session, in dataset and version order."""
    return sorted(session.info.get(_NOTES, ()))
