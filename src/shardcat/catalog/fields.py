"""Declared per-sample fields: which a dataset has, and their values per record.

A field is a scalar of each sample (a label, a split, a score) stored beside
the record in ``record_fields`` so that ``where=`` filters on it in SQL
(:mod:`.selection` makes each declared field a column). ``number`` fields
hold ints, floats and booleans (as 0/1) in ``num``; ``text`` fields hold
strings in ``text``. A record without a value for a field has no row (the
column is NULL).

Values are versioned (revision 0015): a value stored with its record
(:func:`store_field_values`, :func:`copy_field_values`) has
``added_version`` 0 and is seen wherever its record is;
:func:`update_field_values` sets values at a new dataset version by
superseding the current row (``removed_version``) and adding one (NULL
values: an unset), so older versions read what they read. :func:`.visibility.value_visible_at` is the rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from sqlalchemy import Table, delete, func, insert, select, tuple_, update
from sqlalchemy.orm import Session, aliased

from ..errors import CatalogError, Hint, UnknownKeysError
from ..format.checksums import signed_key_hash
from . import visibility
from .connection import binds
from .datasets import find_dataset
from .hashkeys import needs_key_text
from .models import (
    BASE_GROUP,
    REWRITES,
    Dataset,
    DatasetField,
    DatasetVersion,
    Job,
    Record,
    RecordField,
    Shard,
)
from .results import FieldsUpdate
from .session import NO_SYNC

__all__ = [
    "CARRIES_VALUES",
    "COPY",
    "FIELD_NAME",
    "FIELD_UPDATE",
    "ON_MISSING",
    "VALUE_ROWS",
    "CarriedValues",
    "FieldValues",
    "carry_values",
    "copy_field_values",
    "declare_fields",
    "declare_kinds",
    "declared_fields",
    "drop_unseen_values",
    "field_updates",
    "live_values",
    "store_field_values",
    "update_field_values",
    "updated_since",
]

FIELD_UPDATE = "update-fields"
"""The operation of a version ``update_fields`` made (its manifest carries the values)."""

COPY = "copy"
"""The operation of the version ``copy_dataset`` makes in the copy: its records carry the
source's field values (their declarations too)."""

CARRIES_VALUES = (FIELD_UPDATE, COPY, *REWRITES)
"""Operations whose versions' manifests list field values: an update's, and the copies' of a
compaction (a fold included)."""

ON_MISSING = ("error", "skip")
"""What ``update_fields`` does with a key that has no live record."""

FieldValues = Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]]
"""``update_fields``' values: key → {field: value}, as a mapping or ``(key, values)`` pairs."""

FIELD_NAME = re.compile(r"[a-z_][a-z0-9_]{0,63}")
"""A field name is a lower-case SQL identifier: it becomes a column name of ``where=``."""

_RESERVED = frozenset(
    {"key", "byte_offset", "byte_length", "shard_url", "shard_number", "job_id", "shard_id"}
)
_CHUNK = 5000
VALUE_ROWS = cast(Table, RecordField.__table__)
"""``record_fields`` as a table: values are inserted through it, not the mapped class, whose
bulk insert would run one INSERT a row to fetch the key's server default (added_version)."""


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
    ds = find_dataset(session, dataset)
    return declare_kinds(session, ds, {name: kind_of(t) for name, t in fields.items()})


def declare_kinds(session: Session, ds: Dataset, kinds: Mapping[str, str]) -> dict[str, str]:
    """Declare fields by kind (``number``/``text``); the dataset's declared fields after.

    Raises
    ------
    CatalogError
        A name that is not allowed, or a field declared with another kind.
    """
    known = declared_fields(session, ds.id)
    for name, kind in kinds.items():
        if not FIELD_NAME.fullmatch(name) or name in _RESERVED:
            raise CatalogError(
                f"field name {name!r} is not allowed: use a lower-case SQL identifier "
                f"(letters, digits, _) other than {', '.join(sorted(_RESERVED))}"
            )
        if name in known and known[name] != kind:
            raise CatalogError(
                f"field {name!r} of {ds.name!r} is declared as {known[name]}, not {kind}"
            )
        if name not in known:
            session.add(DatasetField(dataset_id=ds.id, name=name, kind=kind))
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
    # The dataset row FOR SHARE: an update_fields (whose version bump takes it FOR NO KEY
    # UPDATE) waits for this store, or this for it. At READ COMMITTED, one that ran meanwhile
    # would not see the rows stored here, nor this store its values: both stayed live.
    # SQLite's write transactions are serial already.
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(Dataset.id).where(Dataset.id == ds).with_for_update(read=True))
    # The values stored with the records (added_version 0); those update_fields set stay.
    session.execute(
        delete(RecordField).where(RecordField.shard_id == shard_id, RecordField.added_version == 0),
        execution_options=NO_SYNC,
    )
    rows: list[dict[str, Any]] = []
    count = 0
    for offset, fields in values:
        for name, value in fields.items():
            kind = kinds.get(name)
            if kind is None:
                raise CatalogError(f"field {name!r} is not declared for {dataset!r}")
            if value is None or _is_nan(value):  # NaN: a dataframe's missing value
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
            session.execute(insert(VALUE_ROWS), rows, execution_options=NO_SYNC)
            count += len(rows)
            rows = []
    if rows:
        session.execute(insert(VALUE_ROWS), rows, execution_options=NO_SYNC)
        count += len(rows)
    _supersede_stored(session, shard_id)
    return count


def _supersede_stored(session: Session, shard_id: int) -> None:
    """A stored value of a field some version updated is superseded by its first update."""
    later = aliased(RecordField, name="u")
    first_update = (
        select(func.min(later.added_version))
        .where(
            later.shard_id == RecordField.shard_id,
            later.byte_offset == RecordField.byte_offset,
            later.name == RecordField.name,
            later.added_version != 0,
        )
        .scalar_subquery()
    )
    session.execute(
        update(RecordField)
        .where(RecordField.shard_id == shard_id, RecordField.added_version == 0)
        .values(removed_version=first_update),
        execution_options=NO_SYNC,
    )


def copy_field_values(
    session: Session,
    dataset: str,
    shard_id: int,
    moves: Iterable[tuple[int, int, int]],
) -> int:
    """Give one shard's records the field values of the records they copy (compaction).

    ``moves`` are ``(source shard id, source byte offset, byte offset in
    shard_id)`` triples; returns the values copied. The copies carry the
    latest values (not superseded ones), with the version that set each (0:
    stored with the record; an unset is a NULL row): a copy is a new record,
    seen only by versions from its commit on, while older versions keep
    reading the source records and their values. Its version's manifest
    lists the values ``update_fields`` set that the copies carry
    (:data:`CARRIES_VALUES`): indexing the copies' shard again, which reads
    the values the samples were written with, leaves them superseded.

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
                "added_version": added,
            }
            for off, name, num, text, added in session.execute(
                select(
                    RecordField.byte_offset,
                    RecordField.name,
                    RecordField.num,
                    RecordField.text,
                    RecordField.added_version,
                ).where(RecordField.shard_id == src, visibility.value_live(RecordField))
            )
            if int(off) in offsets
        ]
        for i in range(0, len(rows), _CHUNK):
            session.execute(insert(VALUE_ROWS), rows[i : i + _CHUNK], execution_options=NO_SYNC)
        count += len(rows)
    return count


@dataclass(frozen=True, slots=True)
class CarriedValues:
    """A dataset's declared fields and its live records' values, to go with copies of its shards.

    ``values``: shard URL (the copy's, once mapped) -> ``(byte offset, name, num, text)``
    of each value; offsets are the same in a copy, which is the shard's bytes.
    """

    kinds: Mapping[str, str]
    values: Mapping[str, Sequence[tuple[int, str, float | None, str | None]]]


def live_values(session: Session, dataset: str, shard_ids: Collection[int]) -> CarriedValues:
    """The dataset's declared fields and the values its latest version reads, per shard id.

    Keyed by ``str(shard id)``: the caller maps them to the copies' URLs.
    """
    ds = find_dataset(session, dataset).id
    kinds = declared_fields(session, ds)
    values: dict[str, list[tuple[int, str, float | None, str | None]]] = {}
    ids = list(shard_ids)
    for i in range(0, len(ids), _KEY_CHUNK):
        for sid, off, name, num, txt in session.execute(
            select(
                RecordField.shard_id,
                RecordField.byte_offset,
                RecordField.name,
                RecordField.num,
                RecordField.text,
            )
            .where(
                RecordField.dataset_id == ds,
                RecordField.shard_id.in_(ids[i : i + _KEY_CHUNK]),
                visibility.value_live(RecordField),
            )
            .order_by(RecordField.shard_id, RecordField.byte_offset, RecordField.name)
        ):
            values.setdefault(str(sid), []).append((int(off), str(name), num, txt))
    return CarriedValues(kinds, values)


def carry_values(
    session: Session, ds: Dataset, job: Job, carried: CarriedValues, version: int
) -> int:
    """Declare ``carried``'s fields; give the job's staged shards its values, set at ``version``.

    A copy's commit (:data:`COPY`): its version's manifest lists them, so the
    copy's history brings them back from its bucket (values written with the
    samples included: the copy is the values as the source's latest version
    read them). Returns the values stored.

    Raises
    ------
    CatalogError
        A field the dataset declares already with another kind, or a URL that is
        not one of the job's shards.
    """
    declare_kinds(session, ds, carried.kinds)
    ids = {
        str(url): int(sid)
        for url, sid in session.execute(
            select(Shard.url, Shard.id).where(Shard.job_id == job.id, Shard.dataset_id == ds.id)
        )
    }
    rows: list[dict[str, Any]] = []
    for url, values in carried.values.items():
        if url not in ids:
            raise CatalogError(f"{url} is not a shard of job {job.id} of {ds.name!r}")
        rows.extend(
            {
                "shard_id": ids[url],
                "byte_offset": off,
                "name": name,
                "dataset_id": ds.id,
                "num": num,
                "text": txt,
                "added_version": version,
            }
            for off, name, num, txt in values
        )
    for i in range(0, len(rows), _CHUNK):
        session.execute(insert(VALUE_ROWS), rows[i : i + _CHUNK], execution_options=NO_SYNC)
    return len(rows)


def field_updates(
    kinds: Mapping[str, str], dataset: str, values: FieldValues
) -> dict[str, dict[str, tuple[float | None, str | None] | None]]:
    """``values`` checked against the declared fields: key → {field: (num, text) or None (unset)}.

    A key given twice merges its fields, the later value winning.

    Raises
    ------
    CatalogError
        A field that is not declared, or a value that does not fit its field's kind.
    """
    pairs = values.items() if isinstance(values, Mapping) else values
    out: dict[str, dict[str, tuple[float | None, str | None] | None]] = {}
    for key, fields in pairs:
        if not isinstance(key, str):
            raise CatalogError(f"update_fields takes keys as str, not {key!r}")
        if not isinstance(fields, Mapping):
            raise CatalogError(
                f"the values of key {key!r} are a mapping field -> value, not {fields!r}"
            )
        row = out.setdefault(key, {})
        for name, value in fields.items():
            kind = kinds.get(name)
            if kind is None:
                declared = ", ".join(f"{n} ({k})" for n, k in kinds.items()) or "none"
                raise CatalogError(
                    f"field {name!r} is not declared for {dataset!r} (declared: {declared}); "
                    "nothing was changed",
                    hint=_DECLARE_HINT,
                )
            row[name] = None if value is None else _split(name, kind, value)
    return out


_DECLARE_HINT = Hint(
    python="declare it first with its type: Catalog.declare_fields(dataset, {name: int})",
    cli="declare it first with its type: shardcat update-fields --field NAME:TYPE (int, "
    "float, bool, str)",
)


def update_field_values(
    session: Session,
    ds: Dataset,
    updates: Mapping[str, Mapping[str, tuple[float | None, str | None] | None]],
    version: int,
    *,
    on_missing: Literal["error", "skip"],
) -> FieldsUpdate:
    """Set checked values (:func:`field_updates`) at ``version`` on the keys' live base records.

    Each value's current row is superseded (``removed_version = version``) and
    the new one added from ``version`` on; ``None`` adds a row holding NULL (unset).

    Raises
    ------
    UnknownKeysError
        A key has no live record and ``on_missing`` is ``"error"`` (nothing changes).
    KeyTextUnavailableError
        The dataset keeps only key hashes (``keys="hash"``).
    """
    if on_missing not in ON_MISSING:
        raise ValueError(f"on_missing must be one of {ON_MISSING}, not {on_missing!r}")
    needs_key_text(ds.name, ds.key_mode, "update_fields")
    dialect = session.get_bind().dialect.name
    keys = list(updates)
    # A key PostgreSQL cannot bind (NUL) is no record's: missing, as any other unknown key.
    asked = [k for k in keys if binds(dialect, k)]
    found: dict[str, tuple[int, int]] = {}
    for i in range(0, len(asked), _KEY_CHUNK):
        chunk = asked[i : i + _KEY_CHUNK]
        hashes = [signed_key_hash(k.encode("utf-8")) for k in chunk]
        rows = session.execute(
            select(Record.key, Record.shard_id, Record.byte_offset)
            .join(Shard, Shard.id == Record.shard_id)
            .where(
                Record.dataset_id == ds.id,
                Record.group_id == BASE_GROUP,
                Record.key_hash.in_(hashes),
                Record.key.in_(chunk),
                visibility.live(Record, Shard),
            )
        )
        for key, shard_id, offset in rows:
            found[str(key)] = (int(shard_id), int(offset))
    missing = [k for k in keys if k not in found]
    if missing and on_missing == "error":
        shown = ", ".join(repr(k) for k in missing[:10])
        more = f" and {len(missing) - 10} more" if len(missing) > 10 else ""
        raise UnknownKeysError(
            f"dataset {ds.name!r} has no live record for {len(missing)} key(s): {shown}{more}; "
            "nothing was changed",
            keys=missing[:1000],
            hint=_MISSING_HINT,
        )
    superseded: list[tuple[int, int, str]] = []
    added: list[dict[str, Any]] = []
    names: set[str] = set()
    unset = 0
    for key, (shard_id, offset) in found.items():
        for name, value in updates[key].items():
            names.add(name)
            superseded.append((shard_id, offset, name))
            # An unset value is a row too, holding NULL: what the version reads is explicit
            # (a stored value indexed again later stays superseded: _supersede_stored).
            num, txt = (None, None) if value is None else value
            unset += value is None
            added.append(
                {
                    "shard_id": shard_id,
                    "byte_offset": offset,
                    "name": name,
                    "dataset_id": ds.id,
                    "num": num,
                    "text": txt,
                    "added_version": version,
                }
            )
    # Set-based: one UPDATE per chunk of (shard, offset, name) triples, not one per value.
    for i in range(0, len(superseded), _TRIPLES):
        triples = superseded[i : i + _TRIPLES]
        session.execute(
            update(RecordField)
            .where(
                tuple_(RecordField.shard_id, RecordField.byte_offset, RecordField.name).in_(
                    triples
                ),
                visibility.value_live(RecordField),
            )
            .values(removed_version=version),
            execution_options=NO_SYNC,
        )
    for i in range(0, len(added), _CHUNK):
        session.execute(insert(VALUE_ROWS), added[i : i + _CHUNK], execution_options=NO_SYNC)
    return FieldsUpdate(
        dataset=ds.name,
        version=version,
        keys=len(found),
        values=len(added) - unset,
        unset=unset,
        skipped=len(missing),
        fields=tuple(sorted(names)),
    )


_KEY_CHUNK = 500
_TRIPLES = 3000
"""Values superseded per UPDATE (three bound parameters each: within SQLite's 32,766)."""
_MISSING_HINT = Hint(
    python="check the keys, or pass on_missing='skip' to set the others",
    cli="check the keys, or pass --on-missing skip to set the others",
)


def updated_since(session: Session, dataset_id: int, version: int, base: int) -> bool:
    """Whether an ``update_fields`` after ``base`` set a value of a record ``version`` removes.

    A rewrite (compaction) copies each record's values when it stages the
    copy; an update committed since its base version may not be on the copy,
    so its commit refuses (``commit``'s ``rewrite``).
    """
    found = session.execute(
        select(RecordField.shard_id)
        .join(
            Record,
            (Record.shard_id == RecordField.shard_id)
            & (Record.byte_offset == RecordField.byte_offset),
        )
        .where(
            Record.dataset_id == dataset_id,
            Record.removed_version == version,
            RecordField.dataset_id == dataset_id,
            visibility.added_after(RecordField, base),
        )
        .limit(1)
    ).first()
    return found is not None


def drop_unseen_values(session: Session, dataset_id: int) -> int:
    """Delete superseded values no kept version reads (after an expiry); returns how many."""
    v = aliased(DatasetVersion, name="v")
    seen = (
        select(v.number)
        .where(
            v.dataset_id == RecordField.dataset_id,
            visibility.value_visible_at(RecordField, v.number),
        )
        .exists()
    )
    done = session.execute(
        delete(RecordField).where(
            RecordField.dataset_id == dataset_id, ~visibility.value_live(RecordField), ~seen
        ),
        execution_options=NO_SYNC,
    )
    return int(done.rowcount)  # type: ignore[attr-defined]


def _is_nan(value: Any) -> bool:
    """NaN: SQLite stores it as NULL, PostgreSQL as a number above every other."""
    return isinstance(value, float) and math.isnan(value)


def _split(name: str, kind: str, value: Any) -> tuple[float | None, str | None]:
    if kind == "number" and isinstance(value, (int, float)):  # bool is an int: 0/1
        if _is_nan(value):
            raise CatalogError(
                f"field {name!r} holds number values, not nan (SQLite would store it as NULL, "
                "PostgreSQL as a number above all others); nothing was changed; to unset a "
                "field give None (JSON null, an empty CSV cell)"
            )
        return float(value), None
    if kind == "text" and isinstance(value, str):
        return None, value
    raise CatalogError(f"field {name!r} holds {kind} values, not {value!r}")
