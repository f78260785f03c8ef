"""Lookups of a hash-only dataset (``keys="hash"``) against one with key text, same run.

One SQLite catalog, two datasets over the same samples (each its own shards,
written once): ``text`` keeps each key's text (the default), ``hash`` keeps
its hash only (docs/CATALOG.md, "Hash-only datasets"), so its lookup reads
each candidate row's record and compares the key the record holds. The
lookups alternate between the two datasets (which goes first rotates), all
on one thread's warm lookup; it prints each one's wall and CPU time p50/p99
per ``Catalog.get`` and the hash-only/text ratio, and which point lookup ran
(``--point-lookup``: ``compiled``, the default where it is built, or
``python``, the twin). ``--batch N`` times ``Catalog.get_many`` of N random
keys instead (``--lookups`` batches per dataset) and adds keys/s at the p50;
``--entries txt`` asks for those entries only (``get_many(entries=)``).
``--profile same-region`` writes the shards to S3 (moto in its own process)
behind ``benchmarks/latency_proxy.py`` with that profile's first-byte latency
and bandwidth: where a round of reads costs what it does on an object store.

Usage::

    .venv/bin/python benchmarks/bench_point_hash.py [--keys 20000] [--lookups 5000]
                                                    [--point-lookup compiled|python]
                                                    [--batch 1000] [--entries txt]
                                                    [--profile same-region]

Nothing here is a test: it prints measured values and ratios, never asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import shardcat
from shardcat import Catalog
from shardcat.reading import point


def write_shards(
    root: str, keys: list[str], per_shard: int, blob: bytes, storage_options: Any = None
) -> list[object]:
    """Samples of 0.5-2 KiB plus a small JSON entry each (``bench_catalog.py``'s)."""
    infos = []
    for i, start in enumerate(range(0, len(keys), per_shard)):
        url = f"{root}/train-{i:06d}.shard"
        with shardcat.ShardWriter(url, shard_number=i, storage_options=storage_options) as w:
            for n, key in enumerate(keys[start : start + per_shard], start):
                w.add(key, {"jpg": blob[: 512 + n % 1536], "json": {"key": key}})
        infos.append(w.close())
    return infos


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Run, print, and return each dataset's ``p50``, ``p99`` and ``cpu_p50`` (µs)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--per-shard", type=int, default=5_000, help="records per shard")
    parser.add_argument("--lookups", type=int, default=5_000, help="lookups per dataset")
    parser.add_argument("--point-lookup", choices=["compiled", "python"], default=None)
    parser.add_argument(
        "--batch", type=int, default=0, help="keys per get_many (0: point lookups, get)"
    )
    parser.add_argument("--entries", default=None, help="comma-separated entries to ask for")
    parser.add_argument(
        "--profile",
        default=None,
        help="shards on S3 (moto) behind the latency proxy with this profile: "
        "loopback, same-region or cross-region (default: local files)",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    previous = point.use(args.point_lookup) if args.point_lookup is not None else None
    try:
        wall, cpu = measure(args)
    finally:
        if previous is not None:
            point.use(previous)
    figures = {
        name: {
            "p50": percentile(wall[name], 50),
            "p99": percentile(wall[name], 99),
            "cpu_p50": percentile(cpu[name], 50),
        }
        for name in ("text", "hash")
    }
    for f in figures.values():
        if args.batch:
            f["keys_per_s"] = args.batch / (f["p50"] / 1e6)
    mode = args.point_lookup or point.active()
    what = f"batches of {args.batch}" if args.batch else "lookups"
    where = f"S3 behind the latency proxy ({args.profile})" if args.profile else "local files"
    asked = f", entries {args.entries}" if args.entries else ""
    print(f"point lookup: {mode}; {args.keys} keys, {args.lookups} {what} per dataset")
    print(f"shards: {where}{asked}")
    print(f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print(f"{'dataset':<10} {'p50 us':>8} {'p99 us':>8} {'cpu p50 us':>11} {'keys/s':>9}")
    for name, f in figures.items():
        rate = f"{f['keys_per_s']:9.0f}" if args.batch else f"{'':>9}"
        print(f"{name:<10} {f['p50']:8.2f} {f['p99']:8.2f} {f['cpu_p50']:11.2f} {rate}")
    print(f"hash-only / text p50: {figures['hash']['p50'] / figures['text']['p50']:.2f}")
    return figures


def measure(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each dataset's lookups' wall and CPU times (µs), alternating between the two."""
    rng = random.Random(args.seed)
    keys = [f"img/{i:08d}" for i in range(args.keys)]
    blob = rng.randbytes(2048)
    entries = args.entries.split(",") if args.entries else None
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_point_hash_"))
        options = None
        if args.profile:
            from benchmarks.peers.s3 import MotoS3

            server = MotoS3("process", args.profile)
            stack.callback(server.stop)
            options = server.storage_options()
        cat = stack.enter_context(Catalog(f"sqlite:///{tmp}/catalog.db", storage_options=options))
        for name, mode in (("text", "text"), ("hash", "hash")):
            root = f"s3://bench/{name}" if args.profile else os.path.join(tmp, name)
            if not args.profile:
                os.makedirs(root)
            cat.create_dataset(name, root, keys=mode)
            cat.register_shards(name, write_shards(root, keys, args.per_shard, blob, options))
        cat.analyze()
        sample: list[Any] = (
            [rng.sample(keys, args.batch) for _ in range(args.lookups)]
            if args.batch
            else [rng.choice(keys) for _ in range(args.lookups)]
        )
        lookup = cat.get_many if args.batch else cat.get
        if entries is not None:
            lookup = functools.partial(lookup, entries=entries)
        for key in sample[: 5 if args.batch else 200]:  # statements, descriptors, page cache
            lookup("text", key)
            lookup("hash", key)
        wall: dict[str, list[float]] = {"text": [], "hash": []}
        cpu: dict[str, list[float]] = {"text": [], "hash": []}
        clock, cpu_clock = time.perf_counter_ns, time.process_time_ns

        def timed(name: str, key: Any) -> None:
            c, t = cpu_clock(), clock()
            lookup(name, key)
            wall[name].append((clock() - t) / 1e3)
            cpu[name].append((cpu_clock() - c) / 1e3)

        order: list[Callable[[Any], None]] = [
            lambda k: timed("text", k),
            lambda k: timed("hash", k),
        ]
        for i, key in enumerate(sample):
            order[i % 2](key)
            order[(i + 1) % 2](key)
    return wall, cpu


if __name__ == "__main__":
    main()
