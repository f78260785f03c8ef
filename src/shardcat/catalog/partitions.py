"""Hash partitions of PostgreSQL's ``records``: the one definition of the layout (docs/SCALE.md §6).

Opt-in (the ``record_partitions`` setting, ``shardcat catalog partition``):
``records`` ``PARTITION BY HASH (key_hash)`` into P tables ``records_p000``...
Every hot statement finds rows by ``(dataset_id, key_hash)``, so a lookup
probes one partition, and each partition's indexes and its autovacuum are a
P-th of the table's. A partitioned table's unique index must hold the
partition key, so the primary key ``(shard_id, byte_offset)`` becomes a plain
index of the same columns (:data:`PLAIN_INDEX`): uniqueness holds by
construction (a shard's offsets, ids never reused) and ``verify`` checks the
records against each shard's footer.

A catalog created with P > 0, migration 0017 and the command all call
:func:`set_partitions`, which rebuilds ``records`` (:mod:`.rebuild`) into
:func:`create_statements`' layout; 0 turns it back into one plain table with
its primary key. SQLite has no partitions: the setting is ignored there.
"""

from __future__ import annotations

from typing import Any

from .. import config
from ..errors import CatalogError, SettingError

__all__ = [
    "KEY_COLUMNS",
    "MAX_PARTITIONS",
    "PARTITION_KEY",
    "PLAIN_INDEX",
    "PRIMARY_KEY",
    "configured_partitions",
    "create_statements",
    "key_statement",
    "partition_count",
    "partition_name",
    "partition_records",
    "set_partitions",
]

MAX_PARTITIONS = 1024
"""The most partitions: beyond it planning and each lookup's pruning cost more than they save."""
PARTITION_KEY = "key_hash"
KEY_COLUMNS = ("shard_id", "byte_offset")
"""A record's place: the plain table's primary key, the partitioned table's plain index."""
PRIMARY_KEY = "pk_records"
PLAIN_INDEX = "ix_records_shard_id_byte_offset"
"""The partitioned table's index on :data:`KEY_COLUMNS` (the models' naming convention)."""

_SETTING = "record_partitions"


def configured_partitions() -> int:
    """The ``record_partitions`` setting (``SHARDCAT_RECORD_PARTITIONS``): 0 to 1024.

    Raises
    ------
    SettingError
        The value is not a whole number from 0 to 1024.
    """
    raw = config.get(_SETTING)
    value: int | None = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and raw.strip().isdigit():
        value = int(raw.strip())
    if value is None or not 0 <= value <= MAX_PARTITIONS:
        raise SettingError(
            f"setting {_SETTING} ({config.env_var(_SETTING)}) is {raw!r}: write a whole number "
            f"of partitions from 0 (records one plain table) to {MAX_PARTITIONS}, e.g. 16"
        )
    return value


def check_count(partitions: int) -> int:
    """``partitions`` if it is a count this layout takes (0 to 1024).

    Raises
    ------
    SettingError
        It is not.
    """
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise SettingError(f"partitions must be a whole number, not {partitions!r}")
    if not 0 <= partitions <= MAX_PARTITIONS:
        raise SettingError(
            f"{partitions} partitions: records takes 0 (one plain table) to {MAX_PARTITIONS}"
        )
    return partitions


def partition_name(index: int, table: str = "records") -> str:
    """``records_p000``: the partition of remainder ``index``."""
    return f"{table}_p{index:03d}"


def create_statements(schema: str, table: str, body: str, partitions: int) -> list[str]:
    """The statements making ``schema.table`` (columns ``body``) with ``partitions`` (0: plain).

    The partitions are named after ``table`` (renamed with it: :func:`partition_name`).
    """
    if not partitions:
        return [f"CREATE TABLE {schema}.{table} ({body})"]
    return [
        f"CREATE TABLE {schema}.{table} ({body}) PARTITION BY HASH ({PARTITION_KEY})",
        *(
            f"CREATE TABLE {schema}.{partition_name(i, table)} PARTITION OF {schema}.{table} "
            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
            for i in range(partitions)
        ),
    ]


def key_statement(partitions: int) -> str:
    """What holds :data:`KEY_COLUMNS`: the primary key, or (partitioned) a plain index."""
    columns = ", ".join(KEY_COLUMNS)
    if not partitions:
        return f"ALTER TABLE records ADD CONSTRAINT {PRIMARY_KEY} PRIMARY KEY ({columns})"
    return f"CREATE INDEX {PLAIN_INDEX} ON records ({columns})"


_PARTITIONS = """
SELECT c.relkind = 'p', (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = c.oid)
FROM pg_class c WHERE c.oid = to_regclass('records')
"""


def partition_count(cur: Any) -> int:
    """How many partitions ``records`` has (0: one plain table), through a DBAPI cursor."""
    cur.execute(_PARTITIONS)
    row = cur.fetchone()
    return int(row[1]) if row is not None and row[0] else 0


def set_partitions(cur: Any, partitions: int, *, by: str, again: str) -> bool:
    """Make ``records`` have ``partitions`` hash partitions (0: one plain table), rows kept.

    Through the driver's cursor of a PostgreSQL connection, in its transaction
    (the caller commits). Nothing to do when it already has them; returns
    whether it rebuilt. ``by`` and ``again`` name the caller in a refusal:
    ``"revision 0017"``, ``"run the migration"``.

    Raises
    ------
    SettingError
        ``partitions`` is not 0 to 1024.
    RecordsRebuildError
        The rebuild would lose what it cannot make again (:mod:`.rebuild`).
    """
    from .rebuild import rebuild_records

    check_count(partitions)
    if partition_count(cur) == partitions:
        return False
    rebuild_records(cur, partitions=partitions, by=by, again=again)
    return True


def partition_records(target: Any, partitions: int) -> tuple[int, int]:
    """``shardcat catalog partition``: set the partitions of a catalog at head; (before, after).

    ``target``: a URL or an engine.

    Raises
    ------
    CatalogError
        The catalog is not PostgreSQL.
    SchemaVersionError
        It is not at the newest revision (upgrade it first).
    RecordsRebuildError, SettingError
        As :func:`set_partitions`.
    """
    from .migrate import engine_of, verify_schema
    from .session import display_url, translate_errors

    check_count(partitions)
    with engine_of(target) as engine, translate_errors(engine.url):
        if engine.dialect.name != "postgresql":
            raise CatalogError(
                f"catalog {display_url(engine.url)} is {engine.dialect.name}: records has "
                "partitions on PostgreSQL only (nothing to do on SQLite)"
            )
        verify_schema(engine)
        with engine.begin() as conn:
            cur: Any = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
            try:
                before = partition_count(cur)
                set_partitions(
                    cur, partitions, by="shardcat catalog partition", again="run it again"
                )
                after = partition_count(cur)
            finally:
                cur.close()
        return before, after
