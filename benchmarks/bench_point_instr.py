"""Instructions per point lookup (callgrind): ``Catalog.get`` vs issue 10's limit.

Wall and CPU time swing with the machine's load; instruction counts do not.
This driver makes a small SQLite catalog with local shards once (outside
valgrind), then runs N lookups of one kind under callgrind twice (N and 2N
lookups) and prints the difference divided by N: setup, imports and warm-up
cancel out. The children run with ``PYTHONHASHSEED=0`` and
``OPENBLAS_NUM_THREADS=1``: without them the counts move by thousands per
lookup from run to run.

* ``ours``: ``Catalog.get("train", key)`` (the public API, default codec);
* ``tar``: ``Catalog.get("tars", key)``: the same samples in a tar (Python's
  ``tarfile``, GNU format, one member per entry) registered in place
  (issue 11: a tar lookup's target is the native one's ratio to the limit);
* ``limit``: the raw sqlite3 query of ``bench_catalog.py`` (the key's hash
  precomputed) plus one ``os.pread`` on a descriptor kept open;
* ``miss`` (only with ``--modes``): ``Catalog.get("train", key)`` of keys the
  catalog does not have (``KeyNotFoundError``, its hints' queries included);
* ``batch`` (only with ``--modes``): ``Catalog.get_many("train", keys)`` of
  ``--batch-keys`` keys (default 1,000), per batch: the batch path's compiled
  ``rows()`` and ``read_packed``.
* ``batch_limit`` (only with ``--modes``): issue 36's raw limit of the same
  batches: one raw sqlite3 query of the batch's rows (``key_hash IN`` a JSON
  array of the hashes, precomputed as ``limit``'s are, and the key text
  checked in Python) plus one ``os.pread`` per record, sorted by shard and
  offset, on descriptors kept open; ``--modes batch,batch_limit`` prints the
  ratio of the two.

Usage::

    .venv/bin/python benchmarks/bench_point_instr.py [--lookups 2000] [--keys 20000]
    .venv/bin/python benchmarks/bench_point_instr.py --modes ours,batch --lookups 200
    .venv/bin/python benchmarks/bench_point_instr.py --modes batch,batch_limit --lookups 2 --batch-keys 10000

A single kind, for ``callgrind_annotate``::

    .venv/bin/python benchmarks/bench_point_instr.py --prepare /tmp/pi
    valgrind --tool=callgrind --callgrind-out-file=/tmp/pi/cg.out \\
        .venv/bin/python benchmarks/bench_point_instr.py --run /tmp/pi --mode ours --lookups 2000

Nothing here is a test: it prints counts and their ratio, never asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

FLOOR_POINT_SQL = (
    "SELECT s.url, r.byte_offset, r.byte_length FROM records r JOIN shards s ON s.id = r.shard_id "
    "WHERE r.dataset_id = ? AND r.key_hash = ? AND r.key = ?"
)
FLOOR_BATCH_SQL = (
    "SELECT s.url, r.byte_offset, r.byte_length, r.key FROM records r JOIN shards s"
    " ON s.id = r.shard_id WHERE r.dataset_id = ? AND r.key_hash IN (SELECT value FROM json_each(?))"
)
WARM = 300


def prepare(folder: str, n_keys: int, per_shard: int) -> None:
    import shardcat
    from shardcat.reading import Catalog
    from shardcat.reading.checks import scan_tar_url

    rng = random.Random(1)
    blob = rng.randbytes(4096)
    keys = [f"img/{i:08d}" for i in range(n_keys)]
    os.makedirs(os.path.join(folder, "shards"), exist_ok=True)
    os.makedirs(os.path.join(folder, "tars"), exist_ok=True)
    with Catalog(f"sqlite:///{folder}/catalog.db") as cat:
        infos = []
        tars = []
        for i, start in enumerate(range(0, n_keys, per_shard)):
            url = os.path.join(folder, "shards", f"train-{i:06d}.shard")
            tar_url = os.path.join(folder, "tars", f"train-{i:06d}.tar")
            with (
                shardcat.ShardWriter(url, shard_number=i) as w,
                tarfile.open(tar_url, "w", format=tarfile.GNU_FORMAT) as tar,
            ):
                for key in keys[start : start + per_shard]:
                    entries = {
                        "jpg": blob[: 512 + rng.randrange(1536)],
                        "json": json.dumps({"key": key}).encode(),
                    }
                    w.add(key, entries)
                    for name, payload in entries.items():
                        member = tarfile.TarInfo(f"{key}.{name}")
                        member.size = len(payload)
                        tar.addfile(member, io.BytesIO(payload))
            infos.append(w.close())
            tars.append(scan_tar_url(tar_url, None))
        cat.create_dataset("train", os.path.join(folder, "shards"))
        for info in infos:
            cat.register_shard("train", info)
        cat.create_dataset("tars", os.path.join(folder, "tars"))
        for info in tars:
            cat.register_shard("tars", info)
        cat.analyze()
    sample = rng.sample(keys, min(n_keys, 20_000))
    with open(os.path.join(folder, "keys.json"), "w") as f:
        json.dump(sample, f)


def run(folder: str, mode: str, count: int, batch_keys: int = 1000) -> None:
    with open(os.path.join(folder, "keys.json")) as f:
        sample = json.load(f)
    keys = sample[WARM : WARM + count]
    if mode == "batch":
        from shardcat.reading import Catalog

        cat = Catalog(f"sqlite:///{folder}/catalog.db")
        batches = [
            [sample[(i * batch_keys + j) % len(sample)] for j in range(batch_keys)]
            for i in range(count + 3)
        ]
        for b in batches[:3]:  # warm-up: the shards opened, the pool's buffers made
            cat.get_many("train", b)
        for b in batches[3:]:
            cat.get_many("train", b)
        return
    if mode == "batch_limit":
        batch_limit(folder, sample, count, batch_keys)
        return
    if mode == "miss":
        from shardcat.errors import KeyNotFoundError
        from shardcat.reading import Catalog

        cat = Catalog(f"sqlite:///{folder}/catalog.db")
        cat.get("train", sample[0])  # warm: the shard cache loaded, a shard open
        for k in [f"nope/{i}" for i in range(WARM // 10 + count)]:
            with contextlib.suppress(KeyNotFoundError):
                cat.get("train", k)
        return
    if mode in ("ours", "tar"):
        from shardcat.reading import Catalog

        cat = Catalog(f"sqlite:///{folder}/catalog.db")
        get = cat.get
        dataset = "train" if mode == "ours" else "tars"
        for k in sample[:WARM]:
            get(dataset, k)
        for k in keys:
            get(dataset, k)
        return
    import sqlite3

    from shardcat.format.checksums import signed_key_hash

    conn = sqlite3.connect(os.path.join(folder, "catalog.db"), isolation_level=None)
    (dataset_id,) = conn.execute("SELECT id FROM datasets WHERE name = 'train'").fetchone()
    hashes = {k: signed_key_hash(k.encode()) for k in sample[: WARM + count]}
    fds: dict[str, int] = {}

    def limit(key: str, h: int) -> bytes:
        url, offset, length = conn.execute(FLOOR_POINT_SQL, (dataset_id, h, key)).fetchone()
        fd = fds.get(url)
        if fd is None:
            fd = fds[url] = os.open(url.removeprefix("file://"), os.O_RDONLY)
        return os.pread(fd, length, offset)

    for k in sample[:WARM]:
        limit(k, hashes[k])
    if mode == "limit":
        for k in keys:
            limit(k, hashes[k])


def batch_limit(folder: str, sample: list[str], count: int, batch_keys: int) -> None:
    """The raw limit of ``count`` batches (after 3 to warm up), as ``batch`` reads them."""
    import sqlite3

    from shardcat.format.checksums import signed_key_hash

    conn = sqlite3.connect(os.path.join(folder, "catalog.db"), isolation_level=None)
    (dataset_id,) = conn.execute("SELECT id FROM datasets WHERE name = 'train'").fetchone()
    hashes = {k: signed_key_hash(k.encode()) for k in sample}
    fds: dict[str, int] = {}
    batches = [
        [sample[(i * batch_keys + j) % len(sample)] for j in range(batch_keys)]
        for i in range(count + 3)
    ]
    for batch in batches:
        wanted = set(batch)
        rows = conn.execute(
            FLOOR_BATCH_SQL, (dataset_id, json.dumps([hashes[k] for k in batch]))
        ).fetchall()
        rows.sort()
        found = {}
        for url, offset, length, key in rows:
            if key not in wanted:
                continue  # another key of the same hash
            fd = fds.get(url)
            if fd is None:
                fd = fds[url] = os.open(url.removeprefix("file://"), os.O_RDONLY)
            found[key] = os.pread(fd, length, offset)
        if len(found) != len(wanted):
            raise RuntimeError(f"batch limit: {len(found)} records for {len(wanted)} keys")


def instructions(folder: str, mode: str, count: int, batch_keys: int = 1000) -> int:
    out = os.path.join(folder, f"cg.{mode}.{count}.out")
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            os.path.abspath(__file__),
            "--run",
            folder,
            "--mode",
            mode,
            "--lookups",
            str(count),
            "--batch-keys",
            str(batch_keys),
        ],
        check=True,
        capture_output=True,
        # Deterministic counts: one hash seed, and no OpenBLAS worker threads
        # (numpy's, spinning while they wait: millions of instructions at random).
        env={**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"},
    )
    with open(out) as f:
        for line in f:
            m = re.match(r"summary: (\d+)", line) or re.match(r"totals: (\d+)", line)
            if m:
                return int(m.group(1))
    raise RuntimeError(f"no totals in {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--per-shard", type=int, default=5_000)
    parser.add_argument("--lookups", type=int, default=2_000)
    parser.add_argument("--prepare", metavar="DIR", help="only make the catalog and shards in DIR")
    parser.add_argument("--run", metavar="DIR", help="only run lookups on DIR (under valgrind)")
    parser.add_argument(
        "--mode",
        choices=["ours", "tar", "limit", "miss", "batch", "batch_limit", "none"],
        default="ours",
    )
    parser.add_argument(
        "--modes",
        default="ours,tar,limit",
        help="kinds measured, comma-separated (also: miss, batch, batch_limit)",
    )
    parser.add_argument("--batch-keys", type=int, default=1000, help="keys per get_many (batch)")
    args = parser.parse_args(argv)
    if args.prepare:
        prepare(args.prepare, args.keys, args.per_shard)
        return
    if args.run:
        run(args.run, args.mode, args.lookups, args.batch_keys)
        return
    folder = tempfile.mkdtemp(prefix="shardcat-instr-")
    try:
        prepare(folder, args.keys, args.per_shard)
        n = args.lookups
        per = {}
        for mode in args.modes.split(","):
            k = args.batch_keys
            per[mode] = (
                instructions(folder, mode, 2 * n, k) - instructions(folder, mode, n, k)
            ) / n
            unit = f"batch of {k} keys" if mode.startswith("batch") else "lookup"
            print(f"{mode:>5}: {per[mode]:,.0f} instructions per {unit}")
        if "ours" in per and "limit" in per:
            tar = f" (tar: {per['tar'] / per['limit']:.2f})" if "tar" in per else ""
            print(f"ratio: {per['ours'] / per['limit']:.2f}{tar}")
        if "batch" in per and "batch_limit" in per:
            print(f"batch ratio (batch / batch_limit): {per['batch'] / per['batch_limit']:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
