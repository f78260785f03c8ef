"""Export throughput: ``shardcat.export`` to WebDataset tars vs ``webdataset.ShardWriter``.

Writes ``--mib`` of samples (a 2-8 KiB ``bin``, a small ``json`` and a
``cls``) as a shardcat dataset (local disk, SQLite catalog), reads them back
into memory once, then, in alternating rounds into fresh folders under one
local folder:

- webdataset: ``webdataset.ShardWriter`` writes the in-memory samples (bytes
  already, nothing to encode) as tars of ``--shard-size``, in this process;
- export: ``shardcat.export`` of the same dataset, on a LocalCluster of N
  worker processes started before the clock: plan from the catalog, one task
  per tar reads its samples from the shards (every CRC checked), writes the
  tar, syncs and publishes it write-once, and writes its ``.taridx``.

Both write the same samples into tars of the same size limit; ``export /
webdataset`` is the ratio of their samples/s (goal >= 1); MB/s counts the
entries' bytes (the same for both). The best round of
each counts (a shared VM's noise only ever slows a round down).

    .venv/bin/python benchmarks/bench_export.py [--mib 256] [--workers 1,2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from bench_copy import make_partition as copy_samples


def make_partition(seed: int, nbytes: int) -> list[dict]:
    """bench_copy's samples (a 2-8 KiB ``bin``), each with a small ``json`` and a ``cls``."""
    return [
        {**s, "json": {"i": i, "partition": seed}, "cls": str(i % 10).encode()}
        for i, s in enumerate(copy_samples(seed, nbytes))
    ]


def folder_bytes(folder: Path, suffix: str = ".tar") -> int:
    return sum(p.stat().st_size for p in folder.glob(f"*{suffix}"))


def main() -> None:
    import dask
    import dask.bag as db
    import webdataset as wds
    from distributed import Client, LocalCluster

    import shardcat
    from shardcat.reading import Catalog

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=256)
    p.add_argument("--workers", default="1,2", help="worker processes of the export's cluster")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--shard-size", default="64MB", help="the tars' size limit (both writers)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    limit = shardcat._units.parse_size(args.shard_size)
    root = Path(tempfile.mkdtemp(prefix="bench-export-"))
    catalog = f"sqlite:///{root}/catalog.db"
    per = args.mib * (1 << 20) // args.partitions
    try:
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster,
            Client(cluster) as client,
        ):
            parts = [dask.delayed(make_partition)(i, per) for i in range(args.partitions)]
            shardcat.write(
                db.from_delayed(parts),
                f"{root}/src",
                catalog=catalog,
                dataset="src",
                shard_size="16MB",
                client=client,
                progress=False,
            )
        with Catalog(catalog) as cat:
            samples = [
                {"__key__": r["__key__"], **{n: e.data for n, e in r.items() if n != "__key__"}}
                for r in shardcat.read(cat, "src", decode=False).compute(scheduler="sync")
            ]
        n = len(samples)
        payload = sum(len(v) for s in samples for k, v in s.items() if k != "__key__")
        print(
            f"{n:,} samples, {payload / 1e6:.1f} MB of entries; tars of at most "
            f"{args.shard_size}; {args.rounds} rounds, best of each"
        )

        def webdataset_round(out: Path) -> float:
            out.mkdir()
            t0 = time.perf_counter()
            with wds.ShardWriter(str(out / "src-%06d.tar"), maxsize=limit, verbose=0) as sink:
                for s in samples:
                    sink.write(s)
            return time.perf_counter() - t0

        workers = [int(w) for w in args.workers.split(",")]
        best: dict[str, float] = {}
        sizes: dict[str, int] = {}
        clusters = {
            w: LocalCluster(n_workers=w, threads_per_worker=1, dashboard_address=None)
            for w in workers
        }
        clients = {w: Client(c) for w, c in clusters.items()}
        try:
            for r in range(args.rounds):
                out = root / f"wds-{r}"
                seconds = webdataset_round(out)
                best["webdataset"] = min(best.get("webdataset", seconds), seconds)
                sizes["webdataset"] = folder_bytes(out)
                shutil.rmtree(out)
                for w in workers:
                    out = root / f"export-{w}-{r}"
                    t0 = time.perf_counter()
                    summary = shardcat.export(
                        catalog, "src", str(out), shard_size=limit, client=clients[w]
                    )
                    seconds = time.perf_counter() - t0
                    assert summary.samples == n
                    name = f"export, {w} worker{'s' if w > 1 else ''}"
                    best[name] = min(best.get(name, seconds), seconds)
                    sizes[name] = folder_bytes(out)
                    shutil.rmtree(out)
        finally:
            for c in clients.values():
                c.close()
            for c in clusters.values():
                c.close()
        base = n / best["webdataset"]
        # MB/s of the entries' bytes, the same for both (their tars differ: webdataset's
        # tarfile puts a pax header before each member, for its fractional mtime).
        print(
            f"{'writer':<24} {'seconds':>8} {'samples/s':>11} {'MB/s':>8} {'tars MB':>8} "
            f"{'ratio':>6}"
        )
        for name, seconds in best.items():
            rate = n / seconds
            print(
                f"{name:<24} {seconds:8.2f} {rate:11,.0f} {payload / 1e6 / seconds:8.1f} "
                f"{sizes[name] / 1e6:8.1f} {rate / base:6.2f}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
