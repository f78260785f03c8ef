"""Compaction against a write of the same bytes, and point lookups before and after it.

Writes ``--records`` samples of ``--size`` bytes (shards of ``--per-shard``
records), deletes ``--dead`` of the records of every other shard, then runs
``shardcat.compact`` (``min_live`` just above what is left) on the same
Dask cluster. The figure is the ratio of compaction throughput (live bytes
rewritten per second) to write throughput (bytes written per second) in the
same run, so machine load hits both alike; also the median latest-version
point lookup before and after (their ratio should be about 1).

With ``--fold``, then a caption group (``--caption`` bytes per live sample,
written in the base's order and shard size) is added and folded into the
base (``compact(fold_groups=True)``, which rewrites every base shard): the
figure is the fold's throughput (bytes of new base shards per second)
against the plain compaction's, in the same run.

Usage::

    .venv/bin/python benchmarks/bench_compact.py [--records 40000] [--size 1000]
        [--per-shard 2000] [--dead 0.8] [--workers 2] [--fold] [--caption 100]

Nothing here is a test: it prints measured values and ratios, never asserts.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time

import shardcat
from shardcat.catalog import internal
from shardcat.reading import Catalog


def _lookups(cat: Catalog, keys: list[str], n: int) -> float:
    """Median seconds of ``n`` latest-version point lookups of random keys."""
    rng = random.Random(0)
    times = []
    for _ in range(n):
        key = rng.choice(keys)
        t0 = time.perf_counter()
        cat.get("b", key)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=40_000)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--per-shard", type=int, default=2000)
    p.add_argument("--dead", type=float, default=0.8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--lookups", type=int, default=2000)
    p.add_argument("--fold", action="store_true", help="also add a caption group and fold it")
    p.add_argument("--caption", type=int, default=100, help="caption bytes (with --fold)")
    args = p.parse_args()

    from distributed import Client, LocalCluster

    root = tempfile.mkdtemp()
    payload = os.urandom(args.size)
    samples = [{"__key__": f"k{i:08d}", "bin": payload} for i in range(args.records)]
    keys = [s["__key__"] for s in samples]
    with (
        LocalCluster(n_workers=args.workers, threads_per_worker=1, dashboard_address=None) as lc,
        Client(lc) as client,
        Catalog(f"sqlite:///{root}/catalog.db") as cat,
    ):
        t0 = time.perf_counter()
        written = shardcat.write(
            samples,
            f"{root}/b",
            catalog=cat,
            dataset="b",
            max_records_per_shard=args.per_shard,
            batch_size=args.per_shard,
            client=client,
            progress=False,
        )
        write_s = time.perf_counter() - t0
        dead: list[str] = []
        for n, shard in enumerate(cat.shards("b")):
            if n % 2 == 0:
                rows = internal.record_rows(cat, shard.id)
                dead += [r.key for r in rows[: int(len(rows) * args.dead)]]
        cat.delete_keys("b", dead)
        live = sorted(set(keys) - set(dead))
        before = _lookups(cat, live, args.lookups)
        t0 = time.perf_counter()
        summary = shardcat.compact(
            cat, "b", min_live=1 - args.dead + 0.01, shard_size="256MB", client=client
        )
        compact_s = time.perf_counter() - t0
        after = _lookups(cat, live, args.lookups)
        if args.fold:
            caption = "c" * args.caption
            shardcat.add_entries(
                [{"__key__": k, "txt": caption} for k in live],
                catalog=cat,
                dataset="b",
                group="captions",
                max_records_per_shard=args.per_shard,
                client=client,
                progress=False,
            )
            t0 = time.perf_counter()
            folded = shardcat.compact(cat, "b", min_live=0, fold_groups=True, client=client)
            fold_s = time.perf_counter() - t0
    write_rate = written.bytes / write_s
    compact_rate = summary.bytes_after / compact_s
    print(f"write:   {written.bytes / 1e6:.1f} MB in {write_s:.2f} s ({write_rate / 1e6:.1f} MB/s)")
    print(
        f"compact: {len(summary.compacted)} shards ({summary.bytes_before / 1e6:.1f} MB) -> "
        f"{len(summary.written)} shards ({summary.bytes_after / 1e6:.1f} MB), "
        f"{summary.records:,} records in {compact_s:.2f} s ({compact_rate / 1e6:.1f} MB/s)"
    )
    print(f"compact / write throughput: {compact_rate / write_rate:.2f}")
    print(
        f"latest point lookup: {before * 1e6:.1f} us before, {after * 1e6:.1f} us after "
        f"(ratio {after / before:.2f})"
    )
    if args.fold:
        fold_rate = folded.bytes_after / fold_s
        print(
            f"fold:    {folded.folded} into {folded.records:,} base records, "
            f"{len(folded.compacted)} shards -> {len(folded.written)} shards "
            f"({folded.bytes_after / 1e6:.1f} MB) in {fold_s:.2f} s ({fold_rate / 1e6:.1f} MB/s)"
        )
        print(f"fold / compact throughput: {fold_rate / compact_rate:.2f}")
        print(f"fold / write throughput: {fold_rate / write_rate:.2f}")


if __name__ == "__main__":
    main()
