"""Indexing an MDS directory in place (``shardcat.index_directory``) against reading it, and its lookups.

Generates ``--samples`` samples (a key, a ``.jpg``-sized random blob of
``--file-kib``, a JSON label), has MosaicML Streaming's own ``MDSWriter``
write them (64 MiB shards) in another venv's python
(``benchmarks/mds_readers.py --write-only``: the library cannot live in the
project's venv), warms the page cache, then measures:

- **indexing throughput**: ``index_directory`` (``--key-column key``) on a
  LocalCluster of ``--workers`` worker processes (started, and warmed by an
  indexing into another catalog, before the clock runs; SQLite catalog), in
  MB/s of the shard files, against a plain sequential read of the same files
  in one process (``open().read()`` of each, no CRC). Goal: >= 0.8 x.
- **lookup p50**: ``Catalog.get`` of ``--lookups`` random keys of the MDS
  dataset, against the same samples written as a native dataset
  (``shardcat.write``) and looked up alike. Goal: <= 1.2 x. Both read one
  byte range; the floor (one ``os.pread`` of the sample's range on an open
  descriptor) is reported for each.

    .venv/bin/python benchmarks/bench_index_mds.py [--samples 20000] [--file-kib 16] \\
        [--workers 2] [--lookups 5000] [--mds-python /tmp/mdsvenv/bin/python]
"""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_index_files import arguments, lookup_p50s, p50_ms  # the same options and clocks

HERE = Path(__file__).resolve().parent


def make_samples(count: int, kib: int) -> list[tuple[str, bytes, int]]:
    rng = np.random.default_rng(0)
    blob = rng.integers(0, 256, size=1 << 20, dtype=np.uint8).tobytes()
    out = []
    for i in range(count):
        n = kib * 1024 + int(rng.integers(-512, 512))
        start = int(rng.integers(0, len(blob) - n))
        out.append((f"img{i:07d}", blob[start : start + n], i % 10))
    return out


def sequential_read(paths: list[str]) -> tuple[float, int]:
    """Every file read once with open().read(), in order: the baseline."""
    t = time.perf_counter()
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            total += len(f.read())
    return time.perf_counter() - t, total


def main() -> None:
    ap = arguments()
    ap.add_argument("--mds-python", default="/tmp/mdsvenv/bin/python")
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    import shardcat

    tmp = tempfile.mkdtemp(prefix="bench-index-mds-")
    try:
        samples = make_samples(args.samples, args.file_kib)
        with open(os.path.join(tmp, "samples.pkl"), "wb") as f:
            pickle.dump(samples, f)
        writer = [args.mds_python, str(HERE / "mds_readers.py"), "--write-only"]
        subprocess.run(
            [*writer, f"{tmp}/samples.pkl", tmp],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        root = os.path.join(tmp, "mds")
        shards = sorted(str(p) for p in Path(root).glob("shard.*.mds"))
        sequential_read(shards)  # warm the page cache
        read_s, total = min(sequential_read(shards) for _ in range(3))
        catalog = f"sqlite:///{tmp}/catalog.db"
        with (
            LocalCluster(
                n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            # The workers' first task imports shardcat (numpy, SQLAlchemy): not what is measured.
            warm = f"sqlite:///{tmp}/warm.db"
            shardcat.index_directory(root, catalog=warm, dataset="warm", client=client)
            t = time.perf_counter()
            summary = shardcat.index_directory(
                root, catalog=catalog, dataset="mds", key_column="key", client=client
            )
            index_s = time.perf_counter() - t
            assert summary.bytes == total and summary.records == args.samples
            native = [{"__key__": k, "jpg": jpg, "json": {"label": y}} for k, jpg, y in samples]
            shardcat.write(
                native, f"{tmp}/native", dataset="native", catalog=catalog, client=client
            )
        mb_s = {"read": total / 1e6 / read_s, "index": total / 1e6 / index_s}
        shape = f"{args.samples:,} samples in {len(shards)} MDS shards ({total / 1e6:.1f} MB)"
        print(f"{shape}, {args.workers} worker process(es), page cache warm")
        print(f"  sequential read (1 process): {read_s:.2f} s, {mb_s['read']:.1f} MB/s")
        ratio = mb_s["index"] / mb_s["read"]
        print(
            f"  index_directory (mds):       {index_s:.2f} s, {mb_s['index']:.1f} MB/s, "
            f"ratio {ratio:.2f} (goal >= 0.8)"
        )

        rng = random.Random(1)
        chosen = [rng.choice(samples)[0] for _ in range(args.lookups)]
        with shardcat.Catalog(catalog) as cat:
            p50 = lookup_p50s(cat, ("mds", "native"), chosen)
            mds_ms, native_ms = p50["mds"], p50["native"]
            where = {d: {k: cat.locate(d, k) for k in chosen} for d in ("mds", "native")}
        fds: dict[str, int] = {}

        def floor(dataset: str):
            def read(key: str) -> None:
                at = where[dataset][key]
                fd = fds.get(at.url)
                if fd is None:
                    fd = fds[at.url] = os.open(at.url, os.O_RDONLY)
                os.pread(fd, at.length, at.offset)

            return read

        mds_floor, native_floor = (p50_ms(floor(d), chosen) for d in ("mds", "native"))
        for fd in fds.values():
            os.close(fd)
        print(f"  lookups, p50 of {args.lookups:,} random keys (SQLite, local disk):")
        print(f"    mds:    {mds_ms:.4f} ms (floor: one pread {mds_floor:.4f} ms)")
        print(f"    native: {native_ms:.4f} ms (floor: one pread {native_floor:.4f} ms)")
        print(f"    mds / native: {mds_ms / native_ms:.2f} (goal <= 1.2)")
        print(json.dumps({"index_ratio": ratio, "lookup_ratio": mds_ms / native_ms}))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
