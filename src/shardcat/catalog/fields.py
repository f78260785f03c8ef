"""Declared per-sample fields: which a dataset has, and their values per record.

A field is a scalar of each sample (a label, a split, a score) stored beside
the record in ``record_fields`` so that ``where=`` filters on it in SQL
(:mod:`.selection` makes each declared field a column). ``number`` fields
hold ints, floats and booleans (as 0/1) in ``num``; ``text`` fields hold
strings in ``text``. A record without a value for a field has no row (the
column is NULL).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from ..errors import CatalogError
from .datasets import find_dataset
from .models import DatasetField, RecordField, Shard
from .session import NO_SYNC

__all__ = [
    "FIELD_NAME",
    "copy_field_values",
    "declare_fields",
    "declared_fields",
    "store_field_values",
]

FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]{0,63}")
"""A field name is a lower-case SQL identifier: it becomes a column name of ``where=``."""

_RESERVED = frozenset(
    {"key", "byte_offset", "byte_length", "shard_url", "shard_number", "job_id", "shard_id"}
)
_CHUNK = 5000


def kind_of(python_type: type) -> str:
    """``number`` for int, float and bool; ``text`` for str.

    Raises
    ------
    CatalogError
        For any other type.
    """
    if python_type in (int, float, bool):
        return "number"
    if python_type is str:
        return "text"
    raise CatalogError(
        f"a field is an int, float, bool or str, not {getattr(python_type, '__name__', python_type)}"
    )


def declared_fields(session: Session, dataset_id: int) -> dict[str, str]:
    """The dataset's declared fields: name → kind, by name."""
    rows = session.execute(
        select(DatasetField.name, DatasetField.kind)
        .where(DatasetField.dataset_id == dataset_id)
        .order_by(DatasetField.name)
    )
    return {name: kind for name, kind in rows}


def declare_fields(session: Session, dataset: str, fields: Mapping[str, type]) -> dict[str, str]:
    """Declare fields (name → Python type); declaring one again with its kind is harmless.

    Raises
    ------
    CatalogError
        A name that is not a lower-case identifier, names a built-in column,
        or was declared with another kind.
    """
    ds = find_dataset(session, dataset).id
    known = declared_fields(session, ds)
    for name, python_type in fields.items():
        if not FIELD_NAME.fullmatch(name) or name in _RESERVED:
            raise CatalogError(
                f"field name {name!r} is not allowed: use a lower-case SQL identifier "
                f"(letters, digits, _) other than {', '.join(sorted(_RESERVED))}"
            )
        kind = kind_of(python_type)
        if name in known and known[name] != kind:
            raise CatalogError(
                f"field {name!r} of {dataset!r} is declared as {known[name]}, not {kind}"
            )
        if name not in known:
            session.add(DatasetField(dataset_id=ds, name=name, kind=kind))
            known[name] = kind
    session.flush()
    return known


def store_field_values(
    session: Session,
    dataset: str,
    shard_id: int,
    values: Iterable[tuple[int, Mapping[str, Any]]],
) -> int:
    """Replace the field values of one shard's records: ``(byte_offset, {name: value})`` pairs.

    Only declared fields are stored; a value of the wrong kind is an error.

    Raises
    ------
    CatalogError
        The shard is not the dataset's, a field is not declared, or a value
        does not fit its field's kind.
    """
    ds = find_dataset(session, dataset).id
    shard = session.get(Shard, shard_id)
    if shard is None or shard.dataset_id != ds:
        raise CatalogError(f"shard {shard_id} is not a shard of {dataset!r}")
    kinds = declared_fields(session, ds)
    session.execute(
        delete(RecordField).where(RecordField.shard_id == shard_id), execution_options=NO_SYNC
    )
    rows: list[dict[str, Any]] = []
    count = 0
    for offset, fields in values:
        for name, value in fields.items():
            kind = kinds.get(name)
            if kind is None:
                raise CatalogError(f"field {name!r} is not declared for {dataset!r}")
            if value is None:
                continue
            num, text = _split(name, kind, value)
            rows.append(
                {
                    "shard_id": shard_id,
                    "byte_offset": offset,
                    "name": name,
                    "dataset_id": ds,
                    "num": num,
                    "text": text,
                }
            )
        if len(rows) >= _CHUNK:
            session.execute(insert(RecordField), rows, execution_options=NO_SYNC)
            count += len(rows)
            rows = []
    if rows:
        session.execute(insert(RecordField), rows, execution_options=NO_SYNC)
        count += len(rows)
    return count


def copy_field_values(
    session: Session,
    dataset: str,
    shard_id: int,
    moves: Iterable[tuple[int, int, int]],
) -> int:
    """Give one shard's records the field values of the records they copy (compaction).

    ``moves`` are ``(source shard id, source byte offset, byte offset in
    shard_id)`` triples; returns the values copied.

    Raises
    ------
    CatalogError
        The shard or a source shard is not the dataset's.
    """
    ds = find_dataset(session, dataset).id
    by_source: dict[int, dict[int, int]] = {}
    for src, src_offset, offset in moves:
        by_source.setdefault(src, {})[src_offset] = offset
    owners = {
        int(i): int(d)
        for i, d in session.execute(
            select(Shard.id, Shard.dataset_id).where(Shard.id.in_([shard_id, *by_source]))
        )
    }
    for sid in (shard_id, *by_source):
        if owners.get(sid) != ds:
            raise CatalogError(f"shard {sid} is not a shard of {dataset!r}")
    count = 0
    for src, offsets in by_source.items():
        rows = [
            {
                "shard_id": shard_id,
                "byte_offset": offsets[int(off)],
                "name": name,
                "dataset_id": ds,
                "num": num,
                "text": text,
            }
            for off, name, num, text in session.execute(
                select(
                    RecordField.byte_offset, RecordField.name, RecordField.num, RecordField.text
                ).where(RecordField.shard_id == src)
            )
            if int(off) in offsets
        ]
        for i in range(0, len(rows), _CHUNK):
            session.execute(insert(RecordField), rows[i : i + _CHUNK], execution_options=NO_SYNC)
        count += len(rows)
    return count


def _split(name: str, kind: str, value: Any) -> tuple[float | None, str | None]:
    if kind == "number" and isinstance(value, (int, float)):  # bool is an int: 0/1
        return float(value), None
    if kind == "text" and isinstance(value, str):
        return None, value
    raise CatalogError(f"field {name!r} holds {kind} values, not {value!r}")
