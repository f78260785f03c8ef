"""verify in the client (``Catalog.verify``) against the Dask job (``shardcat.orchestration.verify``).

On ``--keys`` tiny samples (``benchmarks/peers/bigcatalog.py``'s
``write_tiny_shards``, ``--per-shard`` a shard, into ``--scratch``) registered
in a SQLite file catalog: each way of verifying runs in a fresh process of
its own (so its peak RSS is its own: ``ru_maxrss``, the workers are other
processes), the Dask job on a local cluster of ``--workers`` worker
processes (its start included). Prints one JSON line per way: seconds, peak
client RSS, records checked, and ``/proc/loadavg`` before and after.

    PYTHONPATH=src python benchmarks/bench_verify_job.py --keys 1000000 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DATASET = "big"


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def build(scratch: str, keys: int, per_shard: int) -> str:
    """The catalog URL of ``keys`` samples (built once per size and shard size)."""
    from benchmarks.peers.bigcatalog import read_info, write_tiny_shards

    import shardcat

    folder = os.path.join(scratch, f"verify-{keys}-{per_shard}")
    url = f"sqlite:///{folder}/catalog.db"
    if os.path.exists(os.path.join(folder, "done")):
        return url
    paths = write_tiny_shards(folder, keys, per_shard, processes=2)
    with shardcat.Catalog(url) as cat:
        cat.create_dataset(DATASET, folder)
        for p in paths:
            cat.register_shard(DATASET, read_info(p))
        cat.analyze()
    open(os.path.join(folder, "done"), "w").close()
    return url


def run(way: str, url: str, workers: int) -> dict[str, object]:
    """One way of verifying, in this process (a child of the driver, which imports no more)."""
    import resource

    import shardcat
    from shardcat.orchestration import DaskCluster
    from shardcat.orchestration.verify import verify

    before = load()
    t = time.perf_counter()
    with shardcat.Catalog(url) as cat:
        if way == "client":
            report = cat.verify(DATASET, history=False)
        else:
            report = verify(cat, DATASET, history=False, client=DaskCluster(workers=workers))
    seconds = time.perf_counter() - t
    if report.problems:
        raise RuntimeError(f"{way}: problems {report.problems[:3]}")
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "way": way,
        "workers": workers if way == "dask" else None,
        "records": report.records_checked,
        "shards": report.shards_checked,
        "seconds": round(seconds, 2),
        "peak_client_rss_mib": round(rss_kib / 1024, 1),
        "load": [before, load()],
    }


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    """Run each way in a child process; their figures, as printed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--per-shard", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scratch", default="/tmp/bench_verify_job")
    ap.add_argument("--ways", default="client,dask")
    ap.add_argument("--run", help=argparse.SUPPRESS)  # the child: one way
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run:
        figures = run(args.run, args.url, args.workers)
        print(json.dumps(figures), flush=True)
        return [figures]
    url = build(args.scratch, args.keys, args.per_shard)
    results: list[dict[str, object]] = []
    for way in args.ways.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--run", way, "--url", url, "--workers", str(args.workers)],
            check=True,
            capture_output=True,
            text=True,
        )
        line = out.stdout.strip().splitlines()[-1]
        print(line, flush=True)
        results.append(json.loads(line))
    return results


if __name__ == "__main__":
    main()
