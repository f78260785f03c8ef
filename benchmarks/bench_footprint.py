"""Bytes per key of ``records`` and each of its indexes, on SQLite and PostgreSQL (issue 33).

Writes ``--keys`` samples (keys ``sample/000000001``: 16 characters; two
small entries each) as 64 MiB shards, registers them with one
``register_shards`` into a fresh SQLite file and a fresh PostgreSQL schema,
and prints :func:`shardcat.catalog.footprint.records_footprint` of each
(PostgreSQL after ``VACUUM ANALYZE``; ``--reindex``: also after ``REINDEX
TABLE records``, the indexes packed). Registration keys/s is printed for
scale, not as a figure to compare (``bench_register.py`` measures that).

``--key-mode``: a dataset with key text (``text``, the default of
``create_dataset``), one that keeps the text out of the key-order index
(``unsorted``: ``records.key_sorted`` false), a hash-only one (``hash``:
``records.key`` NULL, no bytes in the partial key index), or ``all`` (each in a
catalog of its own; the default), so the lines of each database compare in the
same run.

    .venv/bin/python benchmarks/bench_footprint.py [--keys 1000000] [--reindex]
        [--key-mode text|unsorted|hash|all] [--postgres URL | --no-postgres]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import sqlalchemy as sa

import shardcat
from shardcat.catalog.footprint import Footprint, records_footprint
from shardcat.testing.postgres import postgres_schema

POSTGRES = os.environ.get(
    "SHARDCAT_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def measure(url: str, root: str, infos: list[shardcat.ShardInfo], reindex: bool, keys: str) -> None:
    with shardcat.Catalog(url) as cat:
        # A name per catalog and mode: each commit writes its history beside the shards.
        dataset = f"{cat.engine.dialect.name}-{keys}"
        cat.create_dataset(dataset, root, keys=keys)
        t = time.perf_counter()
        cat.register_shards(dataset, infos)
        keys_per_s = sum(i.record_count for i in infos) / (time.perf_counter() - t)
        pg = cat.engine.dialect.name == "postgresql"
        if pg:
            with cat.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                c.execute(sa.text("VACUUM ANALYZE records"))
        name = f"{cat.engine.dialect.name} keys={keys}"
        out = {name: records_footprint(cat.engine)}
        print(f"{name:21} {out[name].describe()}  ({keys_per_s:,.0f} keys/s)")
        if pg and reindex:
            with cat.engine.begin() as c:
                c.execute(sa.text("REINDEX TABLE records"))
            out[f"{name} reindexed"] = records_footprint(cat.engine)
            print(f"{'  reindexed':21} {out[f'{name} reindexed'].describe()}")
        return out


MODES = ("text", "unsorted", "hash")


def main(argv: list[str] | None = None) -> dict[str, Footprint]:
    """Run the benchmark (``argv``: its arguments); the footprints by catalog and key mode."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--reindex", action="store_true")
    ap.add_argument("--key-mode", choices=[*MODES, "all"], default="all")
    ap.add_argument("--postgres", default=POSTGRES)
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args(argv)
    modes = list(MODES) if args.key_mode == "all" else [args.key_mode]
    figures: dict[str, Footprint] = {}
    tmp = tempfile.mkdtemp(prefix="bench-footprint-")
    try:
        root = f"{tmp}/shards"
        with shardcat.RollingShardWriter(root, max_bytes=64 << 20) as writer:
            for i in range(args.keys):
                writer.add(f"sample/{i:09d}", {"bin": b"x" * 16, "json": b'{"l":1}'})
        for mode in modes:
            figures.update(
                measure(
                    f"sqlite:///{tmp}/catalog-{mode}.db", root, writer.shards, args.reindex, mode
                )
            )
        if not args.no_postgres:
            for mode in modes:
                with postgres_schema(args.postgres, "footprint") as url:
                    figures.update(measure(url, root, writer.shards, args.reindex, mode))
    finally:
        shutil.rmtree(tmp)
    return figures


if __name__ == "__main__":
    main()
