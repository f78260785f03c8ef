"""A bulk commit refreshes PostgreSQL's planner statistics itself: lookups plan for the new size."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa

import shardcat
from shardcat.catalog.statistics import ANALYZE_MIN_ROWS, refresh_after_growth
from shardcat.format.checksums import signed_key_hashes
from shardcat.reading import Catalog
from shardcat.reading.statements import batch_sql as _batch_sql

PER_SHARD = ANALYZE_MIN_ROWS // 2 + 5_000  # two shards: a commit just over the threshold


def _shard(path: Path, keys: list[str]) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(str(path)) as w:
        for k in keys:
            w.write({"__key__": k, "txt": b"x"})
    return w.close()


def _known_rows(cat: Catalog) -> float:
    with cat.engine.connect() as conn:
        return float(
            conn.execute(
                sa.text("SELECT reltuples FROM pg_class WHERE oid = to_regclass('records')")
            ).scalar_one()
        )


def test_a_bulk_commit_analyzes_and_get_many_uses_the_index(postgres_url: str, tmp_path: Path):
    with Catalog(postgres_url) as cat:
        with cat.engine.begin() as conn:  # only this commit may refresh the statistics
            conn.execute(sa.text("ALTER TABLE records SET (autovacuum_enabled = false)"))
        cat.create_dataset("d", str(tmp_path))
        cat.register_shard("d", _shard(tmp_path / "small.shard", [f"s{i}" for i in range(100)]))
        cat.analyze()  # statistics of a 100-record table, as before any bulk load
        assert _known_rows(cat) == 100
        job = cat.begin_job("d")
        for s in range(2):
            keys = [f"k{s}/{i:06d}" for i in range(PER_SHARD)]
            cat.register_shard("d", _shard(tmp_path / f"b{s}.shard", keys), job=job)
        cat.commit_job(job)
        # No manual analyze: the commit's own brought the statistics up to date.
        assert _known_rows(cat) >= 0.9 * (2 * PER_SHARD + 100)
        keys = [f"k0/{i:06d}" for i in range(0, PER_SHARD, PER_SHARD // 64)]
        hashes = [int(h) for h in signed_key_hashes(k.encode() for k in keys)]
        raw = cat.engine.raw_connection()
        try:
            cur = raw.cursor()
            cur.execute("EXPLAIN " + _batch_sql("postgresql"), ("d", hashes))
            plan = "\n".join(row[0] for row in cur.fetchall())
        finally:
            raw.close()
        assert "Index Scan" in plan and "on records" in plan, plan
        assert "Seq Scan on records" not in plan, plan
        assert cat.get_many("d", keys).ok
        # A small commit analyzes nothing (not even a query); a large one again.
        assert not refresh_after_growth(cat.engine, ANALYZE_MIN_ROWS - 1)
        assert refresh_after_growth(cat.engine, 10 * ANALYZE_MIN_ROWS)


def test_sqlite_never_analyzes_on_commit(sqlite_url: str):
    with Catalog(sqlite_url) as cat:
        assert not refresh_after_growth(cat.engine, 10 * ANALYZE_MIN_ROWS)
