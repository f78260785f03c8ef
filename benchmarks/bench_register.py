"""Registration on SQLite against a bare bulk insert into the same indexed table (issue 10).

The peers' samples (``benchmarks.peers.data``) are written once as 64 MiB
shards; then, in interleaved rounds, each into a fresh database:

``floor``
    the issue's "bare bulk insert into the same indexed table": one raw
    ``sqlite3`` ``executemany`` in one transaction into shardcat's
    ``records`` table and its indexes (DDL read from a fresh catalog), with
    the catalog's connection settings; rows computed before the clock, as in
    ``benchmarks/peers/floor.py``;
``register_shard``
    a loop of ``Catalog.register_shard``, one committed version per shard;
``register_shards``
    one ``Catalog.register_shards`` call: one transaction, one version.

SQLite runs in this process, so CPU time (``time.process_time``) is the
load-independent measure; wall time is printed too. Medians of ``--rounds``.

    .venv/bin/python -m benchmarks.bench_register [--scale 0.5] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.peers.base import SHARD_BYTES
from benchmarks.peers.data import Dataset

import shardcat
from shardcat.catalog.register import prepare_shard

_PRAGMAS = ("journal_mode = WAL", "synchronous = NORMAL", "cache_size = -65536")


def floor(root: str, name: str, infos: list[Any]) -> tuple[float, float]:
    shardcat.Catalog(f"sqlite:///{root}/{name}-schema.db").close()
    src = sqlite3.connect(f"{root}/{name}-schema.db")
    ddl = [
        r[0]
        for r in src.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'records' AND sql IS NOT NULL"
            " ORDER BY type DESC"
        )
    ]
    src.close()
    conn = sqlite3.connect(f"{root}/{name}.db", isolation_level=None)
    for pragma in (*_PRAGMAS, "wal_autocheckpoint = 16384"):
        conn.execute(f"PRAGMA {pragma}")
    for stmt in ddl:
        conn.execute(stmt)
    rows: list[tuple[Any, ...]] = []
    for i, info in enumerate(infos):
        p = prepare_shard(info)
        n = p.record_count
        rows += zip(
            [i] * n,
            [1] * n,
            p.offsets.tolist(),
            p.key_hashes.tolist(),
            p.keys,
            p.lengths.tolist(),
            [1] * n,
            p.spans.tolist(),
        )
    t, w = time.process_time(), time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO records (shard_id, dataset_id, byte_offset, key_hash, key, byte_length,"
        " layout_id, spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    conn.execute("COMMIT")
    out = time.process_time() - t, time.perf_counter() - w
    conn.close()
    return out


def ours(root: str, name: str, infos: list[Any], bulk: bool) -> tuple[float, float]:
    with shardcat.Catalog(f"sqlite:///{root}/{name}.db") as cat:
        cat.create_dataset("train", root)
        t, w = time.process_time(), time.perf_counter()
        if bulk:
            cat.register_shards("train", infos)
        else:
            for info in infos:
                cat.register_shard("train", info)
        return time.process_time() - t, time.perf_counter() - w


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.5, help="fraction of 200,000 samples")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    ds = Dataset.scaled(args.scale)
    root = tempfile.mkdtemp(prefix="bench-register-")
    try:
        with shardcat.RollingShardWriter(root, max_bytes=SHARD_BYTES) as writer:
            for s in ds:
                writer.add(s.key, {"bin": s.payload, "json": s.label})
        infos = writer.shards
        with shardcat.Catalog("sqlite://") as warm:  # imports stay out of the first round
            warm.create_dataset("warm", root)
            warm.register_shards("warm", infos[:1])
        runs: dict[str, Callable[[str], tuple[float, float]]] = {
            "floor (bare executemany)": lambda n: floor(root, n, infos),
            "register_shard loop": lambda n: ours(root, n, infos, bulk=False),
            "register_shards": lambda n: ours(root, n, infos, bulk=True),
        }
        times: dict[str, list[tuple[float, float]]] = {k: [] for k in runs}
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for i, name in enumerate(order):
                times[name].append(runs[name](f"r{r}-{i}"))
        keys = len(ds.order)
        base = statistics.median(c for c, _ in times["floor (bare executemany)"])
        base_wall = statistics.median(w for _, w in times["floor (bare executemany)"])
        print(f"{keys:,} keys in {len(infos)} shards, median of {args.rounds} interleaved rounds")
        print(f"{'':26} {'keys/CPU-s':>11} {'ratio':>6} {'keys/s wall':>12} {'ratio':>6}")
        for name, values in times.items():
            cpu = statistics.median(c for c, _ in values)
            wall = statistics.median(w for _, w in values)
            print(
                f"{name:26} {keys / cpu:11,.0f} {base / cpu:6.2f} "
                f"{keys / wall:12,.0f} {base_wall / wall:6.2f}"
            )
        print(f"load average {os.getloadavg()[0]:.2f}")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
