"""Point lookups with versions: latest, at a version number, at a tag, against the floor.

The floor is a raw sqlite3 query on the same index (``records (dataset_id,
key_hash)``, the key's hash precomputed) plus one ``os.pread`` of the same
bytes on a file kept open: what the hardware and SQLite allow. Each lookup
is timed interleaved with the floor for the same key, so load on the machine
hits both alike; the figures are medians of per-lookup times and their ratio.

Usage::

    .venv/bin/python benchmarks/bench_versions.py [--keys 100000] [--point 5000]
        [--versions 3] [--latest-only]

``--versions N`` runs N-1 rounds before measuring, each two versions: an
append replacing 10 % of the keys, then a delete of 1 %; ``--latest-only`` measures only the latest
version (and runs against a shardcat without versions, for a before/after).
Nothing here is a test: it prints measured values and ratios, never asserts.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import tempfile
import time
from typing import Any

import shardcat
from shardcat.format.checksums import signed_key_hash
from shardcat.reading import Catalog

FLOOR_SQL = (
    "SELECT s.url, r.byte_offset, r.byte_length FROM records r JOIN shards s ON s.id = r.shard_id "
    "WHERE r.dataset_id = ? AND r.key_hash = ? AND r.key = ?"
)


def write(cat: Catalog, root: str, keys: list[str], tag: str, per_shard: int, **kw: Any) -> None:
    job = cat.begin_job("train")
    for i in range(0, len(keys), per_shard):
        with shardcat.ShardWriter(f"{root}/{tag}-{i // per_shard:06d}.shard") as w:
            for k in keys[i : i + per_shard]:
                w.add(k, {"txt": f"{k}@{tag}", "bin": os.urandom(64)})
        cat.register_shard("train", w.close(), job=job)
    cat.commit_job(job, **kw)


def measure(
    cat: Catalog, db: str, keys: list[str], version: Any, rng: random.Random, count: int
) -> tuple[float, float]:
    conn = sqlite3.connect(db)
    dataset_id = cat.info("train").id
    files: dict[str, int] = {}

    def floor(key: str, h: int) -> bytes:
        url, offset, length = conn.execute(FLOOR_SQL, (dataset_id, h, key)).fetchone()
        fd = files.get(url)
        if fd is None:
            fd = files[url] = os.open(url, os.O_RDONLY)
        return os.pread(fd, length, offset)

    def ours(key: str) -> Any:
        if version is None:
            return cat.get("train", key)
        return cat.get("train", key, version=version)

    sample = rng.sample(keys, count)
    hashes = {k: signed_key_hash(k.encode()) for k in sample}
    for k in sample[:200]:
        ours(k)
        floor(k, hashes[k])
    a: list[int] = []
    b: list[int] = []
    clock = time.perf_counter_ns
    for k in sample:
        t0 = clock()
        ours(k)
        t1 = clock()
        floor(k, hashes[k])
        t2 = clock()
        a.append(t1 - t0)
        b.append(t2 - t1)
    for fd in files.values():
        os.close(fd)
    conn.close()
    return statistics.median(a) / 1000, statistics.median(b) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--per-shard", type=int, default=10_000)
    parser.add_argument("--point", type=int, default=5000)
    parser.add_argument("--versions", type=int, default=3)
    parser.add_argument("--latest-only", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    keys = [f"img/{i:08d}" for i in range(args.keys)]
    with tempfile.TemporaryDirectory() as tmp:
        db = f"{tmp}/catalog.db"
        with Catalog(f"sqlite:///{db}") as cat:
            cat.create_dataset("train", tmp)
            write(cat, tmp, keys, "v1", args.per_shard)
            if not args.latest_only:
                cat.tag("train", 1, "first")
                for n in range(2, args.versions + 1):
                    replaced = rng.sample(keys, len(keys) // 10)
                    write(cat, tmp, replaced, f"v{n}", args.per_shard, on_duplicate="replace")
                    cat.delete_keys("train", rng.sample(keys, len(keys) // 100), missing_ok=True)
            cat.analyze()
            live = list(cat.keys("train"))
            cases: list[tuple[str, Any, list[str]]] = [("latest", None, live)]
            if not args.latest_only:
                cases += [("version 1 (number)", 1, keys), ("version 1 (tag)", "first", keys)]
            print(f"{args.keys:,} keys, {cat.info('train').version} version(s), SQLite, local")
            print("| lookup | shardcat get (µs) | floor: raw sqlite3 + os.pread (µs) | ratio |")
            print("| --- | --- | --- | --- |")
            for name, version, pool in cases:
                ours, floor = measure(cat, db, pool, version, rng, args.point)
                print(f"| {name} | {ours:.1f} | {floor:.1f} | {ours / floor:.2f} |")


if __name__ == "__main__":
    main()
