"""The cold first lookup: a fresh interpreter imports shardcat, opens a catalog and gets one key.

Compared, interleaved, with the same in a fresh interpreter without shardcat:
``import sqlite3``, the raw query of the record's location on the same
catalog file, and one ``os.pread`` (the point limit, cold). Each run is a new
process (interpreter start-up included in both); the figures are the median
wall time and the median CPU time (user + system of the child, the steadier
figure on a loaded machine) of ``--runs`` runs each, and their ratios. The
page cache is warm: every file was just written or read.

Usage::

    .venv/bin/python benchmarks/bench_cold.py [--records 20000] [--runs 7]

Nothing here is a test: it prints measured values and ratios, never asserts.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import shardcat
from shardcat.format.checksums import signed_key_hash

OURS = """
import sys, shardcat
cat = shardcat.Catalog(sys.argv[1])
assert cat.get("train", sys.argv[2])["bin"].data
"""

LIMIT = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1].removeprefix("sqlite:///"))
url, offset, length = conn.execute(
    "SELECT s.url, r.byte_offset, r.byte_length FROM records r JOIN shards s ON s.id = r.shard_id "
    "WHERE r.dataset_id = 1 AND r.key_hash = ? AND r.key = ?", (int(sys.argv[3]), sys.argv[2])
).fetchone()
fd = os.open(url, os.O_RDONLY)
assert os.pread(fd, length, offset)
"""


def run(code: str, *args: str) -> tuple[float, float]:
    """Wall and CPU seconds of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as root:
        url = f"sqlite:///{root}/catalog.db"
        with shardcat.Catalog(url) as cat:
            cat.create_dataset("train", root)
            with shardcat.ShardWriter(f"{root}/train-000000.shard") as w:
                for i in range(args.records):
                    w.add(f"img/{i:08d}", {"bin": rng.randbytes(2048 + i % 6144)})
            cat.register_shard("train", w.close())
            assert cat.info("train").id == 1
        keys = [f"img/{rng.randrange(args.records):08d}" for _ in range(args.runs)]
        ours: list[tuple[float, float]] = []
        limit: list[tuple[float, float]] = []
        run(OURS, url, keys[0])  # byte-compile, page cache
        for i, key in enumerate(keys):
            pair = [
                lambda key=key: ours.append(run(OURS, url, key)),
                lambda key=key: limit.append(
                    run(LIMIT, url, key, str(signed_key_hash(key.encode())))
                ),
            ]
            for j in (i % 2, 1 - i % 2):  # alternate which runs first
                pair[j]()
    wall_o, wall_l = (statistics.median(x[0] for x in s) * 1e3 for s in (ours, limit))
    cpu_o, cpu_l = (statistics.median(x[1] for x in s) * 1e3 for s in (ours, limit))
    print(f"cold first lookup, {args.runs} fresh processes each, python {sys.version.split()[0]}")
    print(f"{'measure':24} {'shardcat':>10} {'limit':>10} {'ratio':>7}")
    print(f"{'wall ms (median)':24} {wall_o:10.0f} {wall_l:10.0f} {wall_o / wall_l:7.2f}")
    print(f"{'CPU ms (median)':24} {cpu_o:10.0f} {cpu_l:10.0f} {cpu_o / cpu_l:7.2f}")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
