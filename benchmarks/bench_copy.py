"""Copy throughput: shardcat.copy_dataset vs a plain fsspec copy of the same files.

Writes ``--mib`` of 2-8 KiB samples as a dataset (local disk, SQLite catalog),
then, on one LocalCluster of ``--workers`` processes:

- plain:    one task per shard file copies it with ``fs.cp_file`` (no check);
- copy:     ``shardcat.copy_dataset`` into an empty folder: one task per shard
            streams it, publishes it atomically, reads every byte back and checks
            every CRC and the file id against the catalog; then one commit;
- rerun:    the same copy again into the folder it filled (an interrupted copy's
            rerun): nothing is copied, every shard is verified and skipped.

``copy / plain`` is the price of the verification and the commit; ``rerun /
copy`` what a rerun costs when everything was copied already. Wall clock on a
shared VM is noisy: the ratios come from the same run.

    .venv/bin/python benchmarks/bench_copy.py [--mib 256] [--workers 2] [--shard-size 16MB]
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


def plain_copy(src: str, dst: str) -> int:
    fs = fsspec.filesystem("file")
    fs.cp_file(src, dst)
    return os.path.getsize(dst)


def main() -> None:
    import dask
    import dask.bag as db
    from distributed import Client, LocalCluster

    import shardcat

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--shard-size", default="16MB")
    args = p.parse_args()
    root = tempfile.mkdtemp(prefix="bench-copy-")
    catalog = f"sqlite:///{root}/catalog.db"
    per = args.mib * (1 << 20) // args.partitions
    try:
        with (
            LocalCluster(
                n_workers=args.workers, threads_per_worker=1, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            parts = [dask.delayed(make_partition)(i, per) for i in range(args.partitions)]
            summary = shardcat.write(
                db.from_delayed(parts),
                f"{root}/src",
                catalog=catalog,
                dataset="src",
                shard_size=args.shard_size,
                client=client,
                progress=False,
            )
            os.makedirs(f"{root}/plain")
            t0 = time.perf_counter()
            futures = client.map(
                plain_copy,
                summary.shards,
                [f"{root}/plain/{os.path.basename(s)}" for s in summary.shards],
                pure=False,
            )
            total = sum(client.gather(futures))
            plain = time.perf_counter() - t0
            t0 = time.perf_counter()
            shardcat.copy_dataset(catalog, "src", f"{root}/copy", name="copy", client=client)
            copy = time.perf_counter() - t0
            # The rerun of a copy that was interrupted just before its commit.
            cat = shardcat.Catalog(catalog)
            cat.delete_dataset("copy")
            t0 = time.perf_counter()
            again = shardcat.copy_dataset(cat, "src", f"{root}/copy", name="copy", client=client)
            rerun = time.perf_counter() - t0
            assert again.copied == 0
        mb = total / 1e6
        print(
            f"{len(summary.shards)} shards, {summary.records:,} records, {mb:,.0f} MB, "
            f"{args.workers} workers"
        )
        print(f"plain fsspec cp_file: {plain:6.2f} s  {mb / plain:7.0f} MB/s")
        print(
            f"copy_dataset:         {copy:6.2f} s  {mb / copy:7.0f} MB/s  copy/plain time {copy / plain:.2f}"
        )
        print(
            f"rerun (all skipped):  {rerun:6.2f} s  {mb / rerun:7.0f} MB/s  rerun/copy time {rerun / copy:.2f}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
