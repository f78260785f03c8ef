"""Choosing a subset of a dataset's committed records with a SQL filter, without reading shards.

``where`` is one boolean SQL expression over one row per committed record
(the ``sample`` relation below), with ``:name`` parameters bound from
``params``. It is never pasted into the statement: sqlglot parses it, it is
checked against an allow-list and written back from the checked tree
(:func:`.readonly.expression.compile_filter`), and the statement runs
through :func:`.readonly.open_read_only`, the runner of ``shardcat sql``:
a read-only transaction, a timeout, PostgreSQL's function check and
read-only role (``$SHARDCAT_SQL_ROLE``), and bounded rows and bytes
(:class:`FilterLimits`). The rows come back grouped by shard, in file
order, ready for sequential reads.

Columns of ``sample``: ``key``, ``byte_offset``, ``byte_length``,
``shard_url``, ``shard_number``, ``job_id``, ``shard_id``, and one per
field declared for the dataset (:mod:`.fields`). docs/TRAINING.md
documents them and the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_

from .. import config
from .._units import format_bytes, size_or_zero
from ..errors import CatalogError, QueryLimitError, QueryTimeoutError
from . import visibility
from .datasets import find_dataset
from .fields import FIELD_NAME, declared_fields
from .hashkeys import TEXT, needs_key_text
from .keyrange import sorted_rows
from .readonly import compile_filter, open_read_only
from .versions import resolve_version

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.orm import Session

__all__ = [
    "MAX_BYTES_ENV",
    "MAX_ROWS_ENV",
    "SAMPLE_COLUMNS",
    "TIMEOUT_ENV",
    "FilterLimits",
    "Selection",
    "SelectionTarget",
    "run_selection",
    "selection_target",
]

SAMPLE_COLUMNS = (
    "key",
    "byte_offset",
    "byte_length",
    "shard_url",
    "shard_number",
    "job_id",
    "shard_id",
)
"""What a ``where`` filter may name, besides the dataset's declared fields."""

TIMEOUT_ENV = config.env_var("where_timeout")
MAX_ROWS_ENV = config.env_var("where_max_rows")
MAX_BYTES_ENV = config.env_var("where_max_bytes")


@dataclass(frozen=True, slots=True)
class FilterLimits:
    """The bounds a ``where=`` selection runs under (0: none).

    Attributes
    ----------
    timeout:
        Seconds the query may take, fetching included (default 300;
        ``$SHARDCAT_WHERE_TIMEOUT``).
    max_rows:
        Records a selection may choose (default 100,000,000;
        ``$SHARDCAT_WHERE_MAX_ROWS``). A selection is held in memory, about
        100 bytes per record.
    max_bytes:
        Bytes of the rows it returns, as ``shardcat sql`` counts them: 8 per
        number plus each key's UTF-8 length (default 4 GiB;
        ``$SHARDCAT_WHERE_MAX_BYTES``, a size such as ``"8GiB"``).

    A selection past either bound fails with :class:`~shardcat.errors.QueryLimitError`:
    cutting it short would silently train on part of what was asked for.
    """

    timeout: float = 300.0
    max_rows: int = 100_000_000
    max_bytes: int = 4 * 1024**3

    def __post_init__(self) -> None:
        if self.timeout < 0 or self.max_rows < 0 or self.max_bytes < 0:
            raise ValueError(f"limits are 0 (none) or positive: {self}")

    @classmethod
    def from_env(cls) -> FilterLimits:
        """The ``where_*`` settings (``$SHARDCAT_WHERE_*``, docs/CONFIG.md).

        Raises
        ------
        ValueError
            A setting that is not a number (or a size, for the bytes).
        """
        default = cls()
        values: dict[str, Any] = {}
        for key, attr, read in (
            ("where_timeout", "timeout", float),
            ("where_max_rows", "max_rows", int),
            ("where_max_bytes", "max_bytes", size_or_zero),
        ):
            raw = config.get(key)
            if isinstance(raw, str):
                raw = raw.strip()
            if raw is None or raw == "":
                values[attr] = getattr(default, attr)
                continue
            try:
                values[attr] = read(raw)
            except (TypeError, ValueError) as e:
                raise ValueError(f"${config.env_var(key)}={raw!r}: {e} (0 = no limit)") from None
        return cls(**values)


_SAMPLE = """
SELECT r.shard_id AS shard_id, r.key AS key, r.byte_offset AS byte_offset,
       r.byte_length AS byte_length, s.url AS shard_url, s.shard_number AS shard_number,
       s.job_id AS job_id{fields}
FROM records r JOIN shards s ON s.id = r.shard_id{joins}
WHERE r.dataset_id = {dataset_id} AND r.group_id = 0{sorted}
  AND {visible}
"""

_LATEST = visibility.sql(visibility.live, "records AS r", "shards AS s")


def _at_version(records: Any, shards: Any, version: Any) -> Any:
    """What ``versions.visible_shards`` streams at ``version``, shard by shard and record by record."""
    return and_(
        visibility.shard_visible_at(shards, version),
        visibility.visible_at(records, shards, version),
    )


_AT_VERSION = visibility.sql(_at_version, "records AS r", "shards AS s", "{version}")

# Which value of a record's field a version reads (revision 0015), rendered for the alias
# shardcat_value (each field's join puts its own alias in its place).
_VALUE_LATEST = visibility.sql(visibility.value_live, "record_fields AS shardcat_value")
_VALUE_AT_VERSION = visibility.sql(
    visibility.value_visible_at, "record_fields AS shardcat_value", "{version}"
)


@dataclass(frozen=True, slots=True)
class SelectionTarget:
    """What a selection reads: a dataset's id, its declared fields (name → kind) and a version."""

    dataset: str
    dataset_id: int
    fields: dict[str, str]
    version: int | None
    key_sorted: bool = False
    """Whether the dataset's rows are in the key index (``keys="text"``): the statement then
    says so, and a filter on a key range reads the index (keyrange.sorted_rows)."""

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns of ``sample``."""
        return (*SAMPLE_COLUMNS, *self.fields)

    def template(self, dialect: str) -> str:
        """The selection's statement on ``dialect``, with ``{where}`` where the filter goes.

        Every value in it is the catalog's own: ids and versions are ints,
        field names lower-case identifiers (checked again here).
        """
        columns, joins = [], []
        value_rule = (
            _VALUE_LATEST
            if self.version is None
            else _VALUE_AT_VERSION.replace("{version}", str(int(self.version)))
        )
        for i, (name, kind) in enumerate(self.fields.items()):
            if not FIELD_NAME.fullmatch(name):
                raise CatalogError(
                    f"the catalog declares a field named {name!r}, not an identifier"
                )
            alias = f"shardcat_f{i}"
            columns.append(f",\n       {alias}.{'num' if kind == 'number' else 'text'} AS {name}")
            joins.append(
                f"\nLEFT JOIN record_fields {alias} ON {alias}.shard_id = r.shard_id"
                f" AND {alias}.byte_offset = r.byte_offset AND {alias}.name = '{name}'"
                f" AND {value_rule.replace('shardcat_value.', f'{alias}.')}"
            )
        visible = (
            _LATEST
            if self.version is None
            else _AT_VERSION.replace("{version}", str(int(self.version)))
        )
        sample = (
            _SAMPLE.replace("{fields}", "".join(columns))
            .replace("{joins}", "".join(joins))
            .replace("{dataset_id}", str(int(self.dataset_id)))
            .replace("{sorted}", f" AND {sorted_rows('r')}" if self.key_sorted else "")
            .replace("{visible}", visible)
        )
        return (
            f"SELECT shard_id, byte_offset, key FROM ({sample}) AS sample "
            "WHERE ({where}) ORDER BY shard_id, byte_offset"
        )


@dataclass(frozen=True, slots=True)
class Selection:
    """The records a filter chose, per shard id: byte offsets (file order) and keys."""

    offsets: dict[int, list[int]]
    keys: dict[int, list[str]]

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.offsets.values())


def selection_target(
    session: Session, dataset: str, version: int | str | None = None
) -> SelectionTarget:
    """The dataset, fields and version a selection reads (one short unit of work).

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    VersionNotFoundError
        If there is no such kept version or tag.
    KeyTextUnavailableError
        The dataset keeps only key hashes (``keys="hash"``).
    """
    ds = find_dataset(session, dataset)
    # A selection is rows by key (its result names each record's key): key text it has not.
    needs_key_text(ds.name, ds.key_mode, "select / where=")
    fields = declared_fields(session, ds.id)
    number = None if version is None else resolve_version(session, ds, version)
    return SelectionTarget(dataset, ds.id, fields, number, key_sorted=ds.key_mode == TEXT)


def run_selection(
    engine: Engine,
    target: SelectionTarget,
    where: str,
    params: Mapping[str, Any] | None = None,
    limits: FilterLimits | None = None,
) -> Selection:
    """The records of ``target`` for which ``where`` holds, grouped by shard.

    Raises
    ------
    QueryRefusedError
        If ``where`` is not one expression over the columns of ``sample`` and
        the allowed functions (the message says what was refused and why).
    QueryLimitError
        If it chooses more than ``limits.max_rows`` records or ``limits.max_bytes``.
    QueryTimeoutError
        If it runs longer than ``limits.timeout``.
    QueryError
        If the database rejects it (a type mismatch, a function it lacks).
    """
    limits = FilterLimits.from_env() if limits is None else limits
    dialect = engine.dialect.name
    checked = compile_filter(where, columns=target.columns, dialect=dialect, params=params)
    statement = checked.statement(target.template(dialect))
    role = (config.get("sql_role") or "").strip() or None if dialect == "postgresql" else None
    offsets: dict[int, list[int]] = {}
    keys: dict[int, list[str]] = {}
    shown = checked.sql if len(checked.sql) <= 200 else checked.sql[:200] + "..."
    try:
        with open_read_only(
            engine,
            statement,
            params=checked.params,
            limit=limits.max_rows,
            timeout=limits.timeout,
            max_bytes=limits.max_bytes,
            role=role,
            batch_rows=_BATCH_ROWS,
            max_value_bytes=_MAX_VALUE_BYTES,
            guard_rows=False,  # (id, offset, key): at most 64 KiB each
        ) as rows:
            for shard_id, offset, key in rows:
                offsets.setdefault(shard_id, []).append(offset)
                keys.setdefault(shard_id, []).append(key)
    except QueryTimeoutError as e:
        raise QueryTimeoutError(
            f"where={shown!r} on {target.dataset!r} ran over its {limits.timeout:g} s timeout "
            f"and was cancelled; raise ${TIMEOUT_ENV} (or FilterLimits(timeout=...)), 0 = none"
        ) from e
    except QueryLimitError as e:
        raise QueryLimitError(
            f"where={shown!r} on {target.dataset!r} builds a value longer than "
            f"{format_bytes(_MAX_VALUE_BYTES)}, more than any filter needs (keys have at most "
            "64 KiB); build shorter values"
        ) from e
    if rows.cut == "limit":
        raise QueryLimitError(
            f"where={shown!r} chose more than {limits.max_rows:,} records of {target.dataset!r}; "
            f"narrow it, or raise ${MAX_ROWS_ENV} (or FilterLimits(max_rows=...)), 0 = none"
        )
    if rows.cut == "max_bytes":
        raise QueryLimitError(
            f"where={shown!r} chose records of {target.dataset!r} past its "
            f"{format_bytes(limits.max_bytes)} budget (after {rows.rows:,} of them); narrow it, "
            f"or raise ${MAX_BYTES_ENV} (or FilterLimits(max_bytes=...)), 0 = none"
        )
    return Selection(offsets, keys)


# A selection reads every row it chose: fetched in large batches (a row is ~40 bytes).
_BATCH_ROWS = 20_000
# SQLite: the longest value a filter may build (keys are at most 64 KiB); a longer one fails
# as it is built, as replace(replace(key, ...)) bombs would fill the memory.
_MAX_VALUE_BYTES = 1024**2
