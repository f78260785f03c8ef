"""Choosing a subset of a dataset's committed records with a SQL filter, without reading shards.

``where`` is a boolean SQL expression over one row per committed record
(the ``sample`` relation below), with ``:name`` parameters bound from
``params``; the statement it becomes is checked to be one SELECT. The rows
come back grouped by shard, in file order, ready for sequential reads.

Columns of ``sample``: ``key``, ``byte_offset``, ``byte_length``,
``shard_url``, ``shard_number``, ``job_id``, and one per field declared for
the dataset (:mod:`.fields`). docs/TRAINING.md documents them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from ..errors import CatalogError
from .datasets import find_dataset
from .fields import declared_fields
from .readonly import check_read_only
from .session import translate_errors
from .versions import resolve_version

__all__ = ["SAMPLE_COLUMNS", "Selection", "select_records"]

SAMPLE_COLUMNS = ("key", "byte_offset", "byte_length", "shard_url", "shard_number", "job_id")
"""What a ``where`` filter may name."""

_SAMPLE = """
SELECT r.shard_id AS shard_id, r.key AS key, r.byte_offset AS byte_offset,
       r.byte_length AS byte_length, s.url AS shard_url, s.shard_number AS shard_number,
       s.job_id AS job_id{fields}
FROM records r JOIN shards s ON s.id = r.shard_id{joins}
WHERE r.dataset_id = :shardcat_dataset_id AND s.state = 'committed'
  AND {visible}
"""

_LATEST = "r.removed_version IS NULL"
# At a kept version: what ``versions.visible_shards`` streams, shard by shard and record by record.
_AT_VERSION = (
    "s.added_version <= :shardcat_version"
    " AND (s.removed_version IS NULL OR s.removed_version > :shardcat_version)"
    " AND (r.removed_version IS NULL OR r.removed_version > :shardcat_version)"
)


def _sample(fields: dict[str, str], at_version: bool = False) -> str:
    """The ``sample`` relation, with one column per declared field (NULL where a record has none)."""
    columns, joins = [], []
    for i, (name, kind) in enumerate(fields.items()):
        # Names are checked identifiers (fields.FIELD_NAME); values are bound.
        alias = f"shardcat_f{i}"
        columns.append(f",\n       {alias}.{'num' if kind == 'number' else 'text'} AS {name}")
        joins.append(
            f"\nLEFT JOIN record_fields {alias} ON {alias}.shard_id = r.shard_id"
            f" AND {alias}.byte_offset = r.byte_offset AND {alias}.name = :shardcat_field_{i}"
        )
    return _SAMPLE.format(
        fields="".join(columns),
        joins="".join(joins),
        visible=_AT_VERSION if at_version else _LATEST,
    )


@dataclass(frozen=True, slots=True)
class Selection:
    """The records a filter chose, per shard id: byte offsets (file order) and keys."""

    offsets: dict[int, list[int]]
    keys: dict[int, list[str]]

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.offsets.values())


def select_records(
    session: Session,
    dataset: str,
    where: str,
    params: Mapping[str, Any] | None = None,
    version: int | str | None = None,
) -> Selection:
    """The committed records of ``dataset`` for which ``where`` holds, grouped by shard.

    ``version`` (a kept version's number or a tag; default the latest)
    chooses among the records that version sees, as ``read`` streams them.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    VersionNotFoundError
        If there is no such kept version or tag.
    CatalogError
        If ``where`` is not one expression (``;`` or a second statement), names an
        unknown column, or the database rejects it.
    """
    if not where.strip():
        raise CatalogError("the where filter is empty: pass None to select every record")
    binds = dict(params or {})
    if any(name.startswith("shardcat_") for name in binds):
        raise CatalogError("parameter names starting with shardcat_ are reserved")
    dialect = session.get_bind().dialect.name
    ds = find_dataset(session, dataset)
    dataset_id = ds.id
    fields = declared_fields(session, dataset_id)
    if version is not None:
        binds["shardcat_version"] = resolve_version(session, ds, version)
    statement = (
        f"SELECT shard_id, byte_offset, key FROM ({_sample(fields, version is not None)}) AS sample "
        f"WHERE ({where}) ORDER BY shard_id, byte_offset"
    )
    # One SELECT only: a `;` or a second statement inside `where` is refused here.
    check_read_only(statement, dialect)
    binds["shardcat_dataset_id"] = dataset_id
    binds.update({f"shardcat_field_{i}": name for i, name in enumerate(fields)})
    offsets: dict[int, list[int]] = {}
    keys: dict[int, list[str]] = {}
    # The filter is the user's SQL: a mistake in it is a QueryError naming it, not a schema problem.
    with translate_errors(session.get_bind().engine.url, user_query=True):
        rows = session.execute(text(statement), binds)
        for shard_id, offset, key in rows:
            offsets.setdefault(shard_id, []).append(offset)
            keys.setdefault(shard_id, []).append(key)
    return Selection(offsets, keys)
