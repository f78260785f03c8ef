"""What the ``records`` table and each of its indexes cost on disk, per key (issue 33).

One row of ``records`` per sample is the catalog's whole design, so its
bytes per key decide how large a dataset one database holds. This module
measures them, for benchmarks and for people sizing a catalog:

- SQLite: the ``dbstat`` virtual table (pages of each b-tree, including
  their free space: what the file really spends). A build without it gets
  the file's total only, under ``table``.
- PostgreSQL: ``pg_table_size`` (heap, TOAST and their maps) and
  ``pg_relation_size`` of each index of ``records`` in the search path's
  schema; of a partitioned ``records``, the sums over its partitions.

Sizes are of the whole table (every dataset), divided by its row count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import OperationalError

__all__ = ["Footprint", "records_footprint"]


@dataclass(frozen=True, slots=True)
class Footprint:
    """Bytes on disk of ``records`` and of each of its indexes."""

    rows: int
    table: int
    """Bytes of the table itself (SQLite ``WITHOUT ROWID``: its primary-key b-tree)."""
    indexes: dict[str, int] = field(default_factory=dict)
    """Bytes of each secondary index (PostgreSQL: the primary key's too), by name."""

    @property
    def total(self) -> int:
        return self.table + sum(self.indexes.values())

    def per_key(self) -> dict[str, float]:
        """Bytes per row of the table, each index and the total (0 when the table is empty)."""
        n = self.rows or 1
        out = {"table": self.table / n}
        out.update({name: size / n for name, size in self.indexes.items()})
        out["total"] = self.total / n
        return out

    def describe(self) -> str:
        """One line: ``145.0 B/key (table 84.0, ix_... 23.0, ...) over 1,000,000 rows``."""
        per = self.per_key()
        parts = ", ".join(f"{k} {v:.1f}" for k, v in per.items() if k != "total")
        return f"{per['total']:.1f} B/key ({parts}) over {self.rows:,} rows"


def records_footprint(bind: Engine | Connection) -> Footprint:
    """Measure ``records`` and its indexes.

    Parameters
    ----------
    bind:
        An engine or connection on a shardcat catalog (``Catalog.engine``).
        PostgreSQL sizes are what is on disk: run ``VACUUM`` or ``CHECKPOINT``
        first for settled figures after a bulk load.
    """
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return records_footprint(conn)
    rows = int(bind.execute(text("SELECT count(*) FROM records")).scalar_one())
    if bind.dialect.name == "postgresql":
        return _postgresql(bind, rows)
    return _sqlite(bind, rows)


# A relation and, partitioned, its partitions (pg_partition_tree lists none of a plain one).
_TREE = "(SELECT {0}::regclass AS r UNION SELECT relid FROM pg_partition_tree({0})) tree"


def _postgresql(conn: Connection, rows: int) -> Footprint:
    # A partitioned records (catalog/partitions.py) stores nothing itself: its partitions
    # do, and each of its indexes is one per partition.
    table = conn.execute(
        text("SELECT sum(pg_table_size(r)) FROM " + _TREE.format("to_regclass('records')"))
    ).scalar_one()
    indexes = conn.execute(
        text(
            "SELECT c.relname, (SELECT sum(pg_relation_size(r)) FROM "
            + _TREE.format("i.indexrelid")
            + ") FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " WHERE i.indrelid = to_regclass('records') ORDER BY c.relname"
        )
    ).all()
    return Footprint(rows, int(table), {name: int(size) for name, size in indexes})


def _sqlite(conn: Connection, rows: int) -> Footprint:
    names = [
        r[0]
        for r in conn.execute(
            text("SELECT name FROM sqlite_master WHERE tbl_name = 'records' AND type = 'index'")
        )
    ]
    try:
        sizes: dict[str, int] = dict(
            conn.execute(text("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")).all()
        )
    except OperationalError:  # a build without SQLITE_ENABLE_DBSTAT_VTAB: the file only
        pages = conn.execute(text("PRAGMA page_count")).scalar_one()
        size = conn.execute(text("PRAGMA page_size")).scalar_one()
        return Footprint(rows, int(pages) * int(size))
    # Autoindexes (sqlite_autoindex_records_1) belong to the table's own constraints.
    return Footprint(
        rows,
        int(sizes.get("records", 0)),
        {name: int(sizes.get(name, 0)) for name in sorted(names)},
    )
