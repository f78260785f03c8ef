"""How long PostgreSQL takes to rebuild ``records`` in revision 0016's column order, and its bytes.

Registers ``--keys`` samples (as ``bench_footprint.py``: 16-character keys,
two entries) into a fresh PostgreSQL catalog, downgrades it to 0015 (the
rebuild into the previous order) and upgrades it to 0016 again, timing each
and printing :func:`shardcat.catalog.footprint.records_footprint` after each
(both rebuilt tables have indexes built once over all rows: packed).

    .venv/bin/python benchmarks/bench_rebuild_records.py [--keys 1000000]
        [--key-mode text|hash] [--postgres URL]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import sqlalchemy as sa

import shardcat
from shardcat.catalog import downgrade, upgrade
from shardcat.catalog.footprint import Footprint, records_footprint
from shardcat.testing.postgres import postgres_schema

POSTGRES = os.environ.get(
    "SHARDCAT_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def main(argv: list[str] | None = None) -> dict[str, Footprint]:
    """Run the benchmark (``argv``: its arguments); the footprints after registering and each step."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--key-mode", choices=["text", "hash"], default="text")
    ap.add_argument("--postgres", default=POSTGRES)
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="bench-rebuild-")
    try:
        root = f"{tmp}/shards"
        with shardcat.RollingShardWriter(root, max_bytes=64 << 20) as writer:
            for i in range(args.keys):
                writer.add(f"sample/{i:09d}", {"bin": b"x" * 16, "json": b'{"l":1}'})
        with postgres_schema(args.postgres, "rebuild") as url:
            with shardcat.Catalog(url) as cat:
                cat.create_dataset("d", root, keys=args.key_mode)
                cat.register_shards("d", writer.shards)
                figures = {"registered": records_footprint(cat.engine)}
                print(f"{'0016, registered':18} {figures['registered'].describe()}")
            engine = sa.create_engine(url)  # a Catalog refuses to open 0015
            try:
                for step, move in (("0015", downgrade), ("0016", upgrade)):
                    t = time.perf_counter()
                    move(url, "0015" if step == "0015" else "head")
                    seconds = time.perf_counter() - t
                    figures[step] = records_footprint(engine)
                    print(f"{'to ' + step:18} {figures[step].describe()}  ({seconds:.1f} s)")
            finally:
                engine.dispose()
    finally:
        shutil.rmtree(tmp)
    return figures


if __name__ == "__main__":
    main()
