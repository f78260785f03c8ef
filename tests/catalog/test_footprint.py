"""records_footprint: bytes per key of ``records`` and each index, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from shardcat.catalog.footprint import Footprint, records_footprint
from shardcat.reading import Catalog

from .helpers import write_shard

N = 3_000


def _register(cat: Catalog, root: Path, name: str, width: int) -> None:
    cat.create_dataset(name, str(root))
    keys = [f"{i:0{width}d}" for i in range(N)]
    cat.register_shard(name, write_shard(str(root / f"{name}.shard"), keys, make=_small))


def _small(key: str) -> dict[str, bytes]:
    return {"txt": b"x"}


def test_each_index_is_measured_and_the_key_index_pays_for_key_text(
    catalog_url: str, tmp_path: Path
):
    with Catalog(catalog_url) as cat:
        empty = records_footprint(cat.engine)
        assert empty.rows == 0 and empty.per_key()["total"] == empty.total
        _register(cat, tmp_path, "short", 8)
        short = records_footprint(cat.engine)
        with cat.engine.connect() as conn:
            assert records_footprint(conn) == short  # an engine or a connection
    assert short.rows == N
    assert {"ix_records_dataset_id_key", "ix_records_dataset_id_key_hash"} <= set(short.indexes)
    assert short.total == short.table + sum(short.indexes.values())
    per = short.per_key()
    # Every key is at least its hash, its offset and its spans in the table...
    assert per["table"] > 8 + 8 + 12
    # ...and the hash index holds at least the 8-byte hash per key.
    assert per["ix_records_dataset_id_key_hash"] >= 8
    assert "B/key" in short.describe() and f"{N:,} rows" in short.describe()

    with Catalog(catalog_url) as cat:  # same rows with 300-character keys in a second dataset
        _register(cat, tmp_path, "long", 300)
        both = records_footprint(cat.engine)
    long_key_bytes = (
        both.indexes["ix_records_dataset_id_key"] - short.indexes["ix_records_dataset_id_key"]
    )
    assert long_key_bytes / N > 300  # the key index stores each key's text
    assert both.table - short.table > 300 * N  # and so does the table


def test_per_key_divides_by_rows():
    fp = Footprint(rows=4, table=400, indexes={"a": 40, "b": 8})
    assert fp.total == 448
    assert fp.per_key() == {"table": 100.0, "a": 10.0, "b": 2.0, "total": 112.0}
