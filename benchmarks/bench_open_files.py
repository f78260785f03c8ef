"""Lookups by the number of shard files a dataset has, against ``max_open_shards`` (issue 33).

A lookup reads its record from a shard file its thread keeps open; with more
shards than the thread keeps open, random lookups close one file and open
another, and the compiled point path (which reads only open files) hands
them to the Python one. This measures that cost apart from the catalog's
size: the same keys in many small shards (``--per-shard``), one catalog,
lookups timed with each ``--max-open`` value in turn (``auto``: the
``max_open_shards`` setting's default), alternating ``--rounds`` times, all
in one process, every payload checked:

- ``Catalog.get`` of ``--points`` random keys: p50 and p99;
- ``get_many`` of ``--batch`` random keys, five times: median keys/s.

The catalog and the shards are read once before timing (page cache warm).

    .venv/bin/python benchmarks/bench_open_files.py [--keys 1e6] [--per-shard 5000]
        [--max-open 64,auto] [--rounds 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from typing import Any

# Run as a script, or imported (tests): make the benchmarks package importable.
if not __package__:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.bench_scale import (
    ALIGNMENT,
    DATASET,
    batch_lookups,
    load,
    parse_count,
    point_lookups,
    read_through,
)
from benchmarks.peers.bigcatalog import read_info, write_tiny_shards

COMMIT_EVERY = 50
"""Shards registered per job (one commit each)."""


def build(scratch: str, keys: int, per_shard: int) -> tuple[str, list[str]]:
    """Tiny shards of ``per_shard`` keys and a SQLite catalog of them; returns (url, paths)."""
    import shardcat

    paths = write_tiny_shards(
        os.path.join(scratch, "shards"), keys, per_shard, processes=2, alignment=ALIGNMENT
    )
    url = f"sqlite:///{os.path.join(scratch, 'catalog.db')}"
    with shardcat.Catalog(url) as cat:
        cat.create_dataset(DATASET, os.path.dirname(paths[0]))
        for lo in range(0, len(paths), COMMIT_EVERY):
            part = paths[lo : lo + COMMIT_EVERY]
            job = cat.begin_job(DATASET)
            for path in part:
                cat.register_shard(DATASET, read_info(path), job=job)
            cat.commit_job(job, shards=part)
        cat.analyze()
    return url, paths


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import shardcat
    import shardcat.config

    with (
        shardcat.config.set(history_in_bucket=False),
        tempfile.TemporaryDirectory(prefix="shardcat-open-files-") as scratch,
    ):
        t = time.perf_counter()
        url, paths = build(scratch, args.keys, args.per_shard)
        built = time.perf_counter() - t
        for path in (*paths, url.removeprefix("sqlite:///")):
            read_through(path)
        runs: list[dict[str, Any]] = []
        for r in range(args.rounds):
            for value in args.max_open:
                with shardcat.Catalog(url, max_open_shards=value) as cat:
                    rng = random.Random(r)
                    point = point_lookups(cat, args.keys, args.points, rng)
                    batch = batch_lookups(cat, args.keys, args.batch, 5, rng)
                    runs.append(
                        {
                            "round": r,
                            "max_open": value,
                            "files_open": cat.max_open_shards,
                            **point,
                            "batch_keys_per_s": batch["keys_per_s"],
                            "load": load(),
                        }
                    )
    return {
        "command": args.command,
        "keys": args.keys,
        "shards": len(paths),
        "build_s": built,
        "runs": runs,
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=parse_count, default=1_000_000)
    ap.add_argument("--per-shard", type=parse_count, default=5_000)
    ap.add_argument("--max-open", type=lambda s: s.split(","), default=["64", "auto"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--points", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    given = sys.argv[1:] if argv is None else argv
    args.command = " ".join(["benchmarks/bench_open_files.py", *given])
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    out = measure(args)
    print(f"command: {out['command']}")
    print(f"{out['keys']:,} keys in {out['shards']:,} shards (built in {out['build_s']:.0f} s)")
    print(
        f"{'round':>5} {'max_open':>8} {'open':>5} {'p50 us':>7} {'p99 us':>8} {'batch k/s':>9} {'load':>5}"
    )
    for run in out["runs"]:
        print(
            f"{run['round']:5} {run['max_open']:>8} {run['files_open']:5} "
            f"{run['p50_ms'] * 1000:7.1f} {run['p99_ms'] * 1000:8.1f} "
            f"{run['batch_keys_per_s']:9,.0f} {run['load']:5.1f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main()
