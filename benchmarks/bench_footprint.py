"""Bytes per key of ``records`` and each of its indexes, on SQLite and PostgreSQL (issue 33).

Writes ``--keys`` samples (keys ``sample/000000001``: 16 characters; two
small entries each) as 64 MiB shards, registers them with one
``register_shards`` into a fresh SQLite file and a fresh PostgreSQL schema,
and prints :func:`shardcat.catalog.footprint.records_footprint` of each
(PostgreSQL after ``VACUUM ANALYZE``; ``--reindex``: also after ``REINDEX
TABLE records``, the indexes packed). Registration keys/s is printed for
scale, not as a figure to compare (``bench_register.py`` measures that).

    .venv/bin/python benchmarks/bench_footprint.py [--keys 1000000] [--reindex]
        [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
import uuid

import sqlalchemy as sa

import shardcat
from shardcat.catalog.footprint import records_footprint

POSTGRES = os.environ.get(
    "SHARDCAT_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def measure(url: str, root: str, infos: list[shardcat.ShardInfo], reindex: bool) -> None:
    with shardcat.Catalog(url) as cat:
        cat.create_dataset("train", root)
        t = time.perf_counter()
        cat.register_shards("train", infos)
        keys_per_s = sum(i.record_count for i in infos) / (time.perf_counter() - t)
        pg = cat.engine.dialect.name == "postgresql"
        if pg:
            with cat.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(sa.text("VACUUM ANALYZE records"))
        name = cat.engine.dialect.name
        print(f"{name:10} {records_footprint(cat.engine).describe()}  ({keys_per_s:,.0f} keys/s)")
        if pg and reindex:
            with cat.engine.begin() as c:
                c.execute(sa.text("REINDEX TABLE records"))
            print(f"{'reindexed':10} {records_footprint(cat.engine).describe()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--reindex", action="store_true")
    ap.add_argument("--postgres", default=POSTGRES)
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-footprint-")
    schema = f"footprint_{uuid.uuid4().hex[:8]}"
    admin = None if args.no_postgres else sa.create_engine(args.postgres)
    try:
        root = f"{tmp}/shards"
        with shardcat.RollingShardWriter(root, max_bytes=64 << 20) as writer:
            for i in range(args.keys):
                writer.add(f"sample/{i:09d}", {"bin": b"x" * 16, "json": b'{"l":1}'})
        measure(f"sqlite:///{tmp}/catalog.db", root, writer.shards, args.reindex)
        if admin is not None:
            with admin.begin() as c:
                c.execute(sa.text(f"CREATE SCHEMA {schema}"))
            sep = "&" if "?" in args.postgres else "?"
            url = f"{args.postgres}{sep}options=-csearch_path%3D{schema}"
            measure(url, root, writer.shards, args.reindex)
    finally:
        if admin is not None:
            with admin.begin() as c:
                c.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
            admin.dispose()
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
