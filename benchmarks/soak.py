"""Soak: mixed get / get_many from 4 processes against a PostgreSQL catalog, unloaded then while writing.

Builds a dataset of ``--keys`` records (local shards, one PostgreSQL schema of
its own), then runs two phases of ``--seconds`` each with ``--procs`` reader
processes doing point lookups (``get``) and batches (``get_many`` of
``--batch`` keys), half and half, on keys drawn at random:

* **unloaded**: the readers alone;
* **loaded**: the same readers while a writer process runs append jobs into
  the same dataset (begin, stage ``--write-shards`` shards, commit; again
  until the phase ends).

Every record's payload is derived from its key, so a reader checks what it
gets: a wrong payload or any exception counts as an error. Printed per phase:
operations/s, p50 and p99 latency of each kind, errors; then the ratio of the
loaded p99 to the unloaded p99 (target: zero errors, ratio <= 3). Afterwards
the dataset holds exactly the keys written, none twice.

Usage::

    .venv/bin/python benchmarks/soak.py [--keys 1000000] [--seconds 20] [--procs 4] [--no-analyze]

Nothing here is a test: it prints measured values, never asserts. Wall-clock
latencies depend on the machine's load; compare the two phases of one run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import tempfile
import time
import uuid
from typing import Any

import numpy as np
import sqlalchemy as sa

import shardcat
from shardcat.reading import Catalog

POSTGRES_URL = os.environ.get(
    "SHARDCAT_BENCH_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
DATASET = "soak"


def _key(i: int) -> str:
    return f"k/{i:09d}"


def _payload(key: str) -> bytes:
    """64 to 319 bytes that depend only on the key, so a reader can check what it got."""
    return (key.encode() * 32)[: 64 + sum(key.encode()) % 256]


def _write_shard(path: str, keys: list[str]) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(path) as w:
        for k in keys:
            w.write({"__key__": k, "bin": _payload(k)})
    return w.close()


def _build(url: str, root: str, n: int, per_shard: int, analyze: bool) -> float:
    t0 = time.perf_counter()
    with Catalog(url) as cat:
        cat.create_dataset(DATASET, root)
        for s, start in enumerate(range(0, n, per_shard)):
            keys = [_key(i) for i in range(start, min(n, start + per_shard))]
            cat.register_shard(DATASET, _write_shard(f"{root}/base-{s:05d}.shard", keys))
        if analyze:  # as after any bulk load (docs/CATALOG.md): plans from real statistics
            cat.analyze()
    return time.perf_counter() - t0


def _reader(url: str, n: int, batch: int, seed: int, go: Any, stop: Any, out: Any) -> None:
    rng = random.Random(seed)
    lat: dict[str, list[float]] = {"get": [], "get_many": []}
    errors: list[str] = []
    with Catalog(url) as cat:
        cat.get(DATASET, _key(0))  # connect and warm up before the clock starts
        go.wait()
        while not stop.is_set():
            try:
                if rng.random() < 0.5:
                    k = _key(rng.randrange(n))
                    t = time.perf_counter()
                    rec = cat.get(DATASET, k)
                    lat["get"].append(time.perf_counter() - t)
                    if rec["bin"].data != _payload(k):
                        errors.append(f"wrong payload for {k}")
                else:
                    keys = [_key(rng.randrange(n)) for _ in range(batch)]
                    t = time.perf_counter()
                    res = cat.get_many(DATASET, keys)
                    lat["get_many"].append(time.perf_counter() - t)
                    if res.missing:
                        errors.append(f"missing {res.missing[:3]}")
                    for k, r in zip(keys, res):
                        if r is None or r["bin"].data != _payload(k):
                            errors.append(f"wrong payload for {k}")
                            break
            except Exception as e:  # counted and reported, the soak goes on
                errors.append(f"{type(e).__name__}: {e}")
    out.put((lat, errors[:1000]))


def _writer(
    url: str, root: str, first: int, per_job: int, shards: int, stop: Any, out: Any
) -> None:
    jobs, next_key = 0, first
    errors: list[str] = []
    with Catalog(url) as cat:
        while not stop.is_set():
            try:
                job = cat.begin_job(DATASET)
                size = per_job // shards
                for s in range(shards):
                    keys = [_key(next_key + s * size + i) for i in range(size)]
                    info = _write_shard(f"{root}/load-{jobs:04d}-{s:02d}.shard", keys)
                    cat.register_shard(DATASET, info, job=job)
                cat.commit_job(job)
                jobs, next_key = jobs + 1, next_key + size * shards
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
                break
    out.put((jobs, next_key - first, errors))


def _phase(args: argparse.Namespace, url: str, root: str, load: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    go = ctx.Barrier(args.procs + 1 + int(load))
    stop = ctx.Event()
    out, wout = ctx.Queue(), ctx.Queue()
    procs = [
        ctx.Process(
            target=_reader, args=(url, args.keys, args.batch, 1000 * load + i, go, stop, out)
        )
        for i in range(args.procs)
    ]
    if load:
        wargs = (url, root, args.keys, args.write_keys, args.write_shards, stop, wout)
        writer = ctx.Process(target=_gated_writer, args=(go, *wargs))
        procs.append(writer)
    for p in procs:
        p.start()
    go.wait()
    t0 = time.perf_counter()
    time.sleep(args.seconds)
    stop.set()
    results = [out.get(timeout=120) for _ in range(args.procs)]
    wall = time.perf_counter() - t0
    written = wout.get(timeout=600) if load else None
    for p in procs:
        p.join(120)
    lat: dict[str, list[float]] = {"get": [], "get_many": []}
    errors: list[str] = []
    for r_lat, r_err in results:
        for kind in lat:
            lat[kind].extend(r_lat[kind])
        errors.extend(r_err)
    row: dict[str, Any] = {"phase": "loaded" if load else "unloaded", "seconds": wall}
    for kind, xs in lat.items():
        a = np.array(xs) * 1000
        row[kind] = {
            "ops": len(xs),
            "ops_per_s": len(xs) / wall,
            "p50_ms": float(np.percentile(a, 50)) if len(a) else float("nan"),
            "p99_ms": float(np.percentile(a, 99)) if len(a) else float("nan"),
        }
    row["errors"] = len(errors)
    row["error_samples"] = sorted(set(errors))[:5]
    if written is not None:
        row["write_jobs"], row["written_keys"], row["write_errors"] = written
    return row


def _gated_writer(go: Any, *wargs: Any) -> None:
    go.wait()
    _writer(*wargs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--per-shard", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each phase")
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64, help="keys per get_many")
    parser.add_argument("--write-keys", type=int, default=20_000, help="keys per write job")
    parser.add_argument("--write-shards", type=int, default=4, help="shards per write job")
    parser.add_argument(
        "--no-analyze",
        action="store_true",
        help="skip Catalog.analyze() after the bulk load (plans from stale statistics)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()

    schema = f"soak_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(POSTGRES_URL)
    with admin.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in POSTGRES_URL else "?"
    url = f"{POSTGRES_URL}{sep}options=-csearch_path%3D{schema}"
    try:
        with tempfile.TemporaryDirectory(prefix="shardcat-soak-") as root:
            build_s = _build(url, root, args.keys, args.per_shard, not args.no_analyze)
            rows = [_phase(args, url, root, load=False), _phase(args, url, root, load=True)]
            with Catalog(url) as cat:
                expected = args.keys + rows[1]["written_keys"]
                count = cat.count(DATASET)
                keys = list(cat.keys(DATASET))
                exact = count == expected == len(keys) == len(set(keys))
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()
    ratio = {k: rows[1][k]["p99_ms"] / rows[0][k]["p99_ms"] for k in ("get", "get_many")}
    summary = {
        "keys": args.keys,
        "procs": args.procs,
        "batch": args.batch,
        "build_seconds": build_s,
        "phases": rows,
        "p99_ratio": ratio,
        "final_count": count,
        "expected_count": expected,
        "exact": exact,
    }
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
        return
    print(
        f"{args.keys:,} keys (built in {build_s:.0f} s"
        f"{', no ANALYZE' if args.no_analyze else ', then ANALYZE'}), {args.procs} reader processes, "
        f"get_many of {args.batch}, {args.seconds:.0f} s per phase"
    )
    print("| phase | get/s | get p50 / p99 ms | get_many/s | get_many p50 / p99 ms | errors |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        g, m = r["get"], r["get_many"]
        print(
            f"| {r['phase']} | {g['ops_per_s']:,.0f} | {g['p50_ms']:.1f} / {g['p99_ms']:.1f} "
            f"| {m['ops_per_s']:,.0f} | {m['p50_ms']:.1f} / {m['p99_ms']:.1f} | {r['errors']} |"
        )
    load = rows[1]
    print(
        f"writer during the loaded phase: {load['write_jobs']} jobs, "
        f"{load['written_keys']:,} keys committed, errors: {load['write_errors'] or 0}"
    )
    print(
        f"p99 loaded / unloaded: get {ratio['get']:.2f}, get_many {ratio['get_many']:.2f} (target <= 3)"
    )
    print(f"after: count {count:,}, expected {expected:,}, exact and no key twice: {exact}")
    for r in rows:
        for e in r["error_samples"]:
            print(f"  {r['phase']} error: {e}")


if __name__ == "__main__":
    main()
