"""Packing a folder of files (``shardcat.from_files``) with 1 and 2 worker processes.

Generates ``--files`` small files (``--file-kib`` each, one sample per file,
in sub-folders of 1,000) in a temporary folder, then packs them with
``shardcat.write(shardcat.from_files(folder), ...)`` on a LocalCluster of 1
and then 2 worker processes (one thread each), SQLite catalog, and reports:

- seconds, files/s and MB/s per run, and the ratio 2 workers / 1 worker
  (target: >= 1.7; the client only lists, the workers read and write);
- the shards' sizes against ``--shard-size`` (partitions are planned by bytes
  from the listing: every shard but the last should be near the target);
- the client's peak RSS (it holds the listing, never the files' bytes).

``--labels`` gives every sample a small ``.json`` label beside its file (an
image dataset's shape), which the write parses to check it (the write-time
check of issue 37); ``--workers 1`` runs one cluster only.

The cluster is started before the clock runs; the page cache is warm for both
runs (the files are read once before the first run), so the ratio compares
packing, not the first read from disk.

    .venv/bin/python benchmarks/bench_pack_files.py [--files 50000] [--file-kib 4] [--shard-size 16MB] [--labels] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time

import numpy as np


def make_files(root: str, count: int, kib: int, labels: bool = False) -> int:
    rng = np.random.default_rng(0)
    blob = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
    total = 0
    for i in range(count):
        folder = os.path.join(root, f"d{i // 1000:04d}")
        if i % 1000 == 0:
            os.makedirs(folder, exist_ok=True)
        n = kib * 1024 + int(rng.integers(-512, 512))
        start = int(rng.integers(0, len(blob) - n))
        with open(os.path.join(folder, f"f{i:07d}.bin"), "wb") as f:
            f.write(blob[start : start + n])
        total += n
        if labels:
            label = b'{"label": %d, "source": "bench", "box": [%d, 4, 20, 30]}' % (i % 10, i % 7)
            with open(os.path.join(folder, f"f{i:07d}.json"), "wb") as f:
                f.write(label)
            total += len(label)
    return total


def warm(root: str) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                f.read()


def run(workers: int, src: str, out: str, shard_size: str) -> dict:
    from distributed import Client, LocalCluster

    import shardcat

    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(workers)
        catalog = f"sqlite:///{out}/catalog-{workers}.db"
        t0 = time.perf_counter()
        summary = shardcat.write(
            shardcat.from_files(src),
            f"{out}/shards-{workers}",
            catalog=catalog,
            dataset=f"pack{workers}",
            shard_size=shard_size,
            client=client,
            progress=False,
        )
        seconds = time.perf_counter() - t0
        sizes = [s.size_bytes for s in shardcat.Catalog(catalog).shards(f"pack{workers}")]
    return {
        "workers": workers,
        "seconds": seconds,
        "records": summary.records,
        "bytes": summary.bytes,
        "shards": len(sizes),
        "sizes": sorted(sizes),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=50_000)
    ap.add_argument("--file-kib", type=int, default=4)
    ap.add_argument("--shard-size", default="16MB")
    ap.add_argument("--labels", action="store_true", help="a .json label beside each file")
    ap.add_argument("--workers", default="1,2", help="worker counts to run, e.g. 1 or 1,2")
    args = ap.parse_args()
    from shardcat._units import format_bytes, parse_size

    tmp = tempfile.mkdtemp(prefix="shardcat-pack-bench-")
    try:
        src = os.path.join(tmp, "src")
        total = make_files(src, args.files, args.file_kib, args.labels)
        warm(src)
        runs = [run(int(w), src, tmp, args.shard_size) for w in args.workers.split(",")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    target = parse_size(args.shard_size)
    print(
        f"{args.files:,} files of ~{args.file_kib} KiB ({format_bytes(total)}), "
        f"shard size {args.shard_size}" + (", each with a .json label" if args.labels else "")
    )
    print(f"{'workers':>8}{'seconds':>9}{'files/s':>10}{'MB/s':>7}{'shards':>8}  shard sizes")
    for r in runs:
        rest = r["sizes"][1:] or r["sizes"]
        print(
            f"{r['workers']:>8}{r['seconds']:>9.2f}{r['records'] / r['seconds']:>10,.0f}"
            f"{total / 1e6 / r['seconds']:>7.0f}{r['shards']:>8}  "
            f"{min(rest) / target:.2f}-{max(rest) / target:.2f} x target (all but the smallest)"
        )
    if len(runs) == 2:
        print(f"2 workers vs 1: {runs[0]['seconds'] / runs[1]['seconds']:.2f}x (target >= 1.7)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"client peak RSS: {peak:.0f} MiB (listing only; file bytes stay on the workers)")


if __name__ == "__main__":
    main()
