"""What keeping a dataset's history in its folder costs a commit (docs/LIFECYCLE.md §8).

Times ``delete_keys`` of one key, N times, on a local SQLite catalog and local
files, with the ``history_in_bucket`` setting off and on, alternating rounds
in one run; prints milliseconds per commit and the ratio (on / off). Each
commit with history writes one small manifest (synced, like a shard) after
its transaction, which the smallest commits feel most.

    python benchmarks/bench_history.py [--commits 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import shardcat
import shardcat.config
from shardcat import Catalog


def per_commit(history: bool, commits: int) -> float:
    folder = tempfile.mkdtemp()
    with shardcat.config.set(history_in_bucket=history), Catalog(f"sqlite:///{folder}/c.db") as cat:
        cat.create_dataset("ds", folder)
        with shardcat.ShardWriter(f"{folder}/a.shard") as w:
            for i in range(commits):
                w.add(f"k{i}", {"txt": "v"})
        cat.register_shard("ds", w.close())
        t0 = time.perf_counter()
        for i in range(commits):
            cat.delete_keys("ds", [f"k{i}"])
        return (time.perf_counter() - t0) / commits * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    off, on = [], []
    for _ in range(args.rounds):
        off.append(per_commit(False, args.commits))
        on.append(per_commit(True, args.commits))
    a, b = statistics.median(off), statistics.median(on)
    print(f"delete_keys commit, history off: {a:.2f} ms; on: {b:.2f} ms; ratio {b / a:.2f}")


if __name__ == "__main__":
    main()
