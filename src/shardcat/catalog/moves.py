"""A dataset's shards repointed at byte-identical copies, in one commit (``copy_dataset(move=True)``).

A move changes where shards live, not what any version serves: each shard
row keeps its id, records and versions and gets the copy's URL, so every
kept version (and what it hides) reads the copies. Nothing is registered
again, and the sources can go once this commits.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import update
from sqlalchemy.orm import Session

from .._redact import redact_url as redact
from ..errors import CommitConflictError
from . import visibility
from .changes import note_dataset
from .commit import VersionMoved, bump_version
from .datasets import find_dataset
from .models import Shard
from .session import NO_SYNC
from .versions import record_version

__all__ = ["move_shards"]


def move_shards(
    session: Session,
    dataset: str,
    moves: Mapping[str, tuple[str, str]],
    *,
    expected_version: int,
    root_url: str,
) -> int:
    """See :meth:`Catalog.move_shards`; returns the new version's number."""
    ds = find_dataset(session, dataset)
    try:
        version = bump_version(session, ds, expected_version)
    except VersionMoved:
        raise CommitConflictError(
            f"dataset {dataset!r} changed while its shards were copied (it is past version "
            f"{expected_version}); nothing was moved: rerun the move"
        ) from None
    for old, (new, file_id) in moves.items():
        done = session.execute(
            update(Shard)
            .where(
                Shard.dataset_id == ds.id,
                Shard.url == redact(old),
                visibility.committed(Shard),
                Shard.file_id == file_id,
            )
            .values(url=redact(new)),
            execution_options=NO_SYNC,
        )
        if done.rowcount != 1:  # type: ignore[attr-defined]
            raise CommitConflictError(
                f"shard {redact(old)} of dataset {dataset!r} is no longer committed with file id "
                f"{file_id}; nothing was moved: rerun the move"
            )
    ds.root_url = redact(root_url)
    note_dataset(session, ds.id, ds.name, ds.root_url)  # the move's manifest goes to the new root
    record_version(
        session,
        ds.id,
        version,
        job_id=None,
        operation="move",
        message=f"moved to {redact(root_url)}",
        added=(0, 0),
        removed=(0, 0),
    )
    return version
