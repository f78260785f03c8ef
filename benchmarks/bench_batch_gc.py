"""What batch lookups cost the cyclic garbage collector: collections per generation and their CPU time.

Builds a catalog of ``--keys`` keys in 20-odd shards (SQLite, local disk,
under ``--root``, reused if present), then runs ``--batches`` calls of
``Catalog.get_many`` of ``--batch`` random keys, holding each result while
the next one runs (as ``bench_catalog.py`` does), and prints the CPU time of
the batches, the collections of each generation with their CPU time (a
``gc.callbacks`` hook) and the objects the collector tracks at the end.

``--touch view`` reads every record's entries as the peers harness does
(``rec["bin"].view, rec["json"].view``, held until the next batch), ``data``
as bytes; ``--heap N`` holds N more tracked objects (small lists), as a
process that imported torch, pandas or the peers' libraries has: a full
collection walks them all. ``--imports lance,litdata,webdataset,wids,torch``
imports those modules first instead (about 240,000 tracked objects, what the
peers harness has loaded).

Usage::

    .venv/bin/python benchmarks/bench_batch_gc.py [--keys 200000] [--batch 10000] [--batches 10]
                                                  [--touch none|view|data] [--heap 0]
                                                  [--imports lance,litdata,...]

To compare with another checkout, put its ``src`` first on ``PYTHONPATH``.
Nothing here is a test: it prints measured values, never asserts.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import random
import tempfile
import time
from typing import Any

import shardcat
from shardcat import Catalog


def build(root: str, keys: list[str], per_shard: int, rng: random.Random) -> None:
    blob = rng.randbytes(4096)
    with Catalog(f"sqlite:///{root}/cat.db") as cat:
        cat.create_dataset("train", "bench")
        for i, start in enumerate(range(0, len(keys), per_shard)):
            with shardcat.ShardWriter(f"{root}/train-{i:06d}.shard", shard_number=i) as w:
                for n, key in enumerate(keys[start : start + per_shard]):
                    w.add(key, {"jpg": blob[: 512 + (n * 7919) % 1536], "json": {"key": key}})
            cat.register_shard("train", w.close())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--per-shard", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=10_000)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "shardcat-bench-gc"))
    ap.add_argument("--touch", choices=["none", "view", "data"], default="none")
    ap.add_argument("--heap", type=int, default=0, help="extra tracked objects held meanwhile")
    ap.add_argument("--imports", default="", help="modules to import first (comma-separated)")
    args = ap.parse_args()
    rng = random.Random(7)
    keys = [f"img/{i:08d}" for i in range(args.keys)]
    rng.shuffle(keys)
    if not os.path.exists(f"{args.root}/cat.db"):
        os.makedirs(args.root, exist_ok=True)
        build(args.root, keys, args.per_shard, rng)
    stats = {g: [0, 0.0] for g in range(3)}
    started = [0.0]

    def hook(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            s = stats[info["generation"]]
            s[0] += 1
            s[1] += time.process_time() - started[0]

    for name in filter(None, args.imports.split(",")):
        importlib.import_module(name)
    heap = [[i] for i in range(args.heap)]
    gc.collect()
    tracked = len(gc.get_objects())
    with Catalog(f"sqlite:///{args.root}/cat.db") as cat:
        cat.get_many("train", rng.sample(keys, 100))  # warm
        gc.callbacks.append(hook)
        cpu, wall = time.process_time(), time.perf_counter()
        result: Any = None
        for _ in range(args.batches):
            result = cat.get_many("train", rng.sample(keys, args.batch))
            if not result.ok:
                raise SystemExit("a batch missed keys: the catalog under --root is not this one")
            if args.touch == "view":
                result = [(r["jpg"].view, r["json"].view) for r in result.records]
            elif args.touch == "data":
                result = [(r["jpg"].data, r["json"].data) for r in result.records]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        gc.callbacks.remove(hook)
    del heap
    print(
        f"{args.batches} batches of {args.batch:,} keys of {args.keys:,} (touch {args.touch}, "
        f"{tracked:,} tracked at the start): {cpu:.3f} CPU-s, {wall:.3f} s; "
        + "; ".join(f"gen {g}: {n} collections, {t:.3f} CPU-s" for g, (n, t) in stats.items())
        + f"; {len(gc.get_objects()):,} objects tracked"
    )


if __name__ == "__main__":
    main()
