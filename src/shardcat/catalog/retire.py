"""Shards leave the catalog: tombstoned (``deleted``, gc removes the file) or dropped outright.

Each function takes the session of the caller's transaction. Records have
no cascading foreign key, so their rows (and the declared fields' values,
keyed like them) go here with their shard's.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, func, update
from sqlalchemy.orm import Session

from .models import Record, RecordField, Shard
from .session import NO_SYNC

__all__ = ["delete_records", "drop_shards", "retire"]


def retire(session: Session, shard_ids: Sequence[int]) -> None:
    """Shards become ``deleted`` tombstones (their records go; gc removes their files)."""
    ids = list(shard_ids)
    delete_records(session, ids)
    for i in range(0, len(ids), 500):
        session.execute(
            update(Shard)
            .where(Shard.id.in_(ids[i : i + 500]))
            .values(state="deleted", deleted_at=func.now()),
            execution_options=NO_SYNC,
        )


def delete_records(session: Session, shard_ids: Sequence[int]) -> None:
    """Delete the records of these shards (records have no cascading foreign key)."""
    ids = list(shard_ids)
    for i in range(0, len(ids), 500):
        session.execute(
            delete(Record).where(Record.shard_id.in_(ids[i : i + 500])), execution_options=NO_SYNC
        )
        # Declared fields' values are keyed like records and go with them.
        session.execute(
            delete(RecordField).where(RecordField.shard_id.in_(ids[i : i + 500])),
            execution_options=NO_SYNC,
        )


def drop_shards(s: Session, shard_ids: list[int]) -> None:
    """Delete shard rows and their records outright (a retried task's stale staging)."""
    if not shard_ids:
        return
    delete_records(s, shard_ids)
    s.execute(delete(Shard).where(Shard.id.in_(shard_ids)), execution_options=NO_SYNC)
