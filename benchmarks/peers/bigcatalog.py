"""Point lookups in a large catalog vs a small one (``--catalog-keys``), shardcat and the floor, local.

Two datasets of tiny records (an 8-byte payload each, keys ``img/%08d``), one
of ``--catalog-small`` keys (100,000) and one of ``--catalog-keys`` keys (e.g.
10,000,000), each in its own shardcat SQLite catalog and its own floor table
(``key TEXT PRIMARY KEY`` + ``os.pread`` of the record's frame in the same
shards). The same number of random keys is looked up in each, interleaving
shardcat and the floor; the figure is p50(large) / p50(small), target <= 1.5.
Every shardcat result must be the key's payload; every floor read must hold
the key and the payload bytes (it reads the raw frame).
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from benchmarks.peers.data import Dataset, MismatchError

log = logging.getLogger("benchmarks.peers")


def _payload(i: int) -> bytes:
    return i.to_bytes(8, "little")


@dataclass
class Built:
    keys: int
    catalog_url: str
    floor_db: str
    paths: list[str]


def build(folder: str, keys: int) -> Built:
    import shardcat

    os.makedirs(folder, exist_ok=True)
    infos: list[Any] = []
    with shardcat.RollingShardWriter(
        folder,
        "big-{number:06d}.shard",
        max_bytes=1 << 30,
        max_records=1_000_000,
        on_shard_closed=infos.append,
    ) as w:
        for i in range(keys):
            w.add(Dataset.key(i), {"bin": _payload(i)})
    url = f"sqlite:///{folder}/catalog.db"
    with shardcat.Catalog(url) as cat:
        cat.create_dataset("big", folder)
        for info in infos:
            cat.register_shard("big", info)
        cat.analyze()
    db = os.path.join(folder, "floor.db")
    conn = sqlite3.connect(db)
    conn.execute(
        "CREATE TABLE samples (key TEXT PRIMARY KEY, file INTEGER, offset INTEGER,"
        " length INTEGER) WITHOUT ROWID"
    )
    with conn:
        for n, info in enumerate(infos):
            rec = info.records
            conn.executemany(
                "INSERT INTO samples VALUES (?, ?, ?, ?)",
                zip(info.keys, [n] * len(rec), rec["offset"].tolist(), rec["length"].tolist()),
            )
    conn.close()
    return Built(keys, url, db, [str(info.path) for info in infos])


def lookups(built: Built, count: int, rng: random.Random) -> tuple[float, float]:
    """p50 ms of (shardcat, floor) over ``count`` random keys, every result checked."""
    import shardcat

    conn = sqlite3.connect(built.floor_db, isolation_level=None)
    fds = [os.open(p, os.O_RDONLY) for p in built.paths]
    sql = "SELECT file, offset, length FROM samples WHERE key = ?"
    numbers = [rng.randrange(built.keys) for _ in range(count + 200)]
    ours: list[float] = []
    base: list[float] = []
    clock = time.perf_counter_ns
    with shardcat.Catalog(built.catalog_url) as cat:
        for n, i in enumerate(numbers):
            key = Dataset.key(i)
            t0 = clock()
            rec = cat.get("big", key)
            t1 = clock()
            file, offset, length = conn.execute(sql, (key,)).fetchone()
            frame = os.pread(fds[file], length, offset)
            t2 = clock()
            if rec["bin"].data != _payload(i):
                raise MismatchError(
                    f"shardcat: wrong payload for {key} in a {built.keys:,}-key catalog"
                )
            if key.encode() not in frame or _payload(i) not in frame:
                raise MismatchError(f"floor: frame of {key} does not hold its key and payload")
            if n >= 200:  # the first 200 warm connections, statements and the page cache
                ours.append((t1 - t0) / 1e6)
                base.append((t2 - t1) / 1e6)
    for fd in fds:
        os.close(fd)
    conn.close()
    return float(np.median(ours)), float(np.median(base))


def compare(scratch: str, small: int, large: int, count: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {"small_keys": small, "large_keys": large}
    for label, keys in (("small", small), ("large", large)):
        t = time.perf_counter()
        built = build(os.path.join(scratch, f"catalog-{keys}"), keys)
        log.info("catalog of %s keys built in %.0f s", f"{keys:,}", time.perf_counter() - t)
        out[label] = lookups(built, count, random.Random(seed))
    return out
