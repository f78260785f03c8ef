"""Dask write throughput: shardcat.write vs plain fsspec writes by the same workers.

Generates ``--gib`` of 2-8 KiB samples on the workers (the generator is part
of both runs, so it cancels out of the ratio), then for 1 and 2 worker
processes:

- plain:    each partition writes its samples' bytes to one file with fsspec;
- shardcat: ``shardcat.write`` of the same partitions, with CRCs, hashing,
            footers and SQLite catalog registration and the job commit.

Targets (issue 4): shardcat ≥ 0.8 × plain (catalog registration included) and
2 workers ≥ 1.7 × 1 worker. Peak worker memory (RSS) is reported against the
shard size: memory per worker must be bounded by the shard, not the dataset.

    .venv/bin/python benchmarks/bench_dask_write.py [--gib 1] [--partitions 16] [--shard-size 64MB]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import fsspec
import numpy as np


def make_partition(seed: int, nbytes: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
    out, size, i = [], 0, 0
    while size < nbytes:
        n = int(rng.integers(2048, 8193))
        start = int(rng.integers(0, len(blob) - n))
        out.append({"__key__": f"p{seed:04d}/{i:08d}", "bin": blob[start : start + n]})
        size += n
        i += 1
    return out


def plain_partition(samples: list[dict], url: str) -> int:
    with fsspec.open(url, "wb") as f:
        for s in samples:
            f.write(s["bin"])
    return len(samples)


def peak_rss_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(workers: int, args: argparse.Namespace, root: str) -> dict:
    import dask
    import dask.bag as db
    from distributed import Client, LocalCluster

    import shardcat

    per_part = (args.gib << 30) // args.partitions
    result: dict = {"workers": workers}
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        bag = db.from_delayed(
            [dask.delayed(make_partition)(i, per_part) for i in range(args.partitions)]
        )
        # Generate once into worker memory, so both runs measure writing only.
        bag = bag.persist()
        client.wait_for_workers(workers)
        from distributed import wait

        wait(bag)
        nbytes = args.gib << 30

        plain_root = f"{root}/plain-{workers}"
        os.makedirs(plain_root, exist_ok=True)
        parts = bag.to_delayed()
        t0 = time.perf_counter()
        dask.compute(
            *[
                dask.delayed(plain_partition)(p, f"{plain_root}/part-{i:04d}.bin")
                for i, p in enumerate(parts)
            ]
        )
        result["plain_s"] = time.perf_counter() - t0

        catalog = f"sqlite:///{root}/catalog-{workers}.db"
        t0 = time.perf_counter()
        summary = shardcat.write(
            bag,
            f"{root}/shards-{workers}",
            catalog=catalog,
            dataset=f"bench{workers}",
            shard_size=args.shard_size,
            progress=False,
            client=client,
        )
        result["shardcat_s"] = time.perf_counter() - t0
        result["records"] = summary.records
        result["shards"] = len(summary.shards)
        result["mb"] = nbytes / 1e6
        result["rss_mib"] = max(client.run(peak_rss_mib).values())
    return result


def writer_memory(root: str, shard_size: str, nbytes: int) -> tuple[float, float]:
    """Peak Python memory of one partition task writing ``nbytes`` from a lazy generator.

    The samples are produced one at a time, so what tracemalloc sees at its
    peak is the writer's own memory: one record, the shard's index, the
    catalog rows of one shard. Returns (peak MiB, shard size MiB).
    """
    import tracemalloc

    import shardcat
    from shardcat._units import parse_size
    from shardcat.orchestration.plan import WritePlan
    from shardcat.orchestration.tasks import write_partition

    def lazy():
        rng = np.random.default_rng(7)
        blob = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
        size = i = 0
        while size < nbytes:
            n = int(rng.integers(2048, 8193))
            start = int(rng.integers(0, len(blob) - n))
            yield {"__key__": f"m/{i:08d}", "bin": blob[start : start + n]}
            size += n
            i += 1

    catalog = f"sqlite:///{root}/memory.db"
    cat = shardcat.Catalog(catalog)
    cat.create_dataset("mem", f"{root}/mem")
    job = cat.begin_job("mem")
    plan = WritePlan(
        dataset="mem",
        root=f"{root}/mem",
        prefix="mem",
        job_id=job.id,
        catalog=cat.handle(),
        shard_size=parse_size(shard_size),
    )
    tracemalloc.start()
    write_partition(lazy(), plan, 0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 2**20, parse_size(shard_size) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=16)
    ap.add_argument("--shard-size", default="64MB")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="shardcat-dask-bench-")
    try:
        one = run(1, args, root)
        two = run(2, args, root)
        peak, shard = writer_memory(root, args.shard_size, 4 * parse_shard(args.shard_size))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.gib} GiB of 2-8 KiB samples, {args.partitions} partitions, shard size {args.shard_size}"
    )
    print(
        f"{'workers':>8}{'plain MB/s':>12}{'shardcat MB/s':>15}{'ratio':>8}{'records':>11}{'shards':>8}{'peak RSS MiB':>14}"
    )
    for r in (one, two):
        print(
            f"{r['workers']:>8}{r['mb'] / r['plain_s']:>12.0f}{r['mb'] / r['shardcat_s']:>15.0f}"
            f"{r['plain_s'] / r['shardcat_s']:>8.2f}{r['records']:>11,}{r['shards']:>8}{r['rss_mib']:>14.0f}"
        )
    print(
        f"2 workers vs 1 (shardcat): {one['shardcat_s'] / two['shardcat_s']:.2f}x (target >= 1.7); "
        f"plain: {one['plain_s'] / two['plain_s']:.2f}x"
    )
    print(
        f"writer memory: one task writing 4 shards of {shard:.0f} MiB from a lazy source peaked at "
        f"{peak:.1f} MiB of Python allocations (bounded by the shard's index, not the data)"
    )


def parse_shard(size: str) -> int:
    from shardcat._units import parse_size

    return parse_size(size)


if __name__ == "__main__":
    main()
