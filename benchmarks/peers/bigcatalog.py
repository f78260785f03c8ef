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
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from benchmarks.peers.data import Dataset, MismatchError

log = logging.getLogger("benchmarks.peers")


SHARD_NAME = "big-{number:06d}.shard"


def payload(i: int) -> bytes:
    """Sample ``i``'s one entry (``bin``): its number, 8 bytes."""
    return i.to_bytes(8, "little")


SHUFFLE_STEP = 2_654_435_761
"""A prime: ``i * SHUFFLE_STEP % n`` visits every number below ``n`` once (any ``n`` it does not divide)."""


def shuffled(i: int, keys: int) -> int:
    """The number of the sample at position ``i`` of ``keys`` written in shuffled order.

    A permutation, so every key is written once; consecutive positions land far
    apart in key order, so each shard's keys spread over the whole key range,
    as a dataset's keys do when they were not written sorted (the peers' data).
    """
    return i * SHUFFLE_STEP % keys


def write_tiny_shard(
    folder: str,
    number: int,
    start: int,
    stop: int,
    alignment: int = 64,
    shuffle_keys: int | None = None,
) -> str:
    """Shard ``number`` of samples ``start`` to ``stop - 1`` (key ``Dataset.key(i)``, ``payload(i)``).

    ``shuffle_keys``: the dataset's key count; position ``i`` then holds sample
    :func:`shuffled` ``(i, shuffle_keys)``, its key and its payload.
    """
    import shardcat

    path = os.path.join(folder, SHARD_NAME.format(number=number))
    with shardcat.ShardWriter(path, shard_number=number, alignment=alignment) as w:
        add = w.add
        for i in range(start, stop):
            j = i if shuffle_keys is None else shuffled(i, shuffle_keys)
            add(Dataset.key(j), {"bin": payload(j)})
    return path


def read_info(path: str) -> Any:
    """A written shard's ShardInfo, rebuilt from its header and footer."""
    import shardcat

    with shardcat.ShardReader(path) as reader:
        return reader.info


def write_tiny_shards(
    folder: str,
    keys: int,
    per_shard: int,
    *,
    processes: int = 1,
    alignment: int = 64,
    shuffle: bool = False,
) -> list[str]:
    """Shards of ``keys`` tiny samples, ``per_shard`` each, written by ``processes`` processes.

    What a catalog of many keys needs, at the writer's speed for tiny records
    (~10 µs each): one 8-byte entry per sample, so the files stay small
    (~180 bytes per sample at ``alignment=8``). Returns the paths in shard order.
    ``shuffle``: the keys in shuffled order (:func:`shuffled`), not in order.
    """
    if shuffle and keys % SHUFFLE_STEP == 0:
        raise ValueError(f"cannot shuffle {keys} keys: a multiple of {SHUFFLE_STEP}")
    os.makedirs(folder, exist_ok=True)
    order = keys if shuffle else None
    bounds = [(n, lo, min(keys, lo + per_shard)) for n, lo in enumerate(range(0, keys, per_shard))]
    if processes <= 1 or len(bounds) == 1:
        return [write_tiny_shard(folder, n, lo, hi, alignment, order) for n, lo, hi in bounds]
    with ProcessPoolExecutor(processes) as pool:
        futures = [
            pool.submit(write_tiny_shard, folder, n, lo, hi, alignment, order)
            for n, lo, hi in bounds
        ]
        return [f.result() for f in futures]


@dataclass
class Built:
    keys: int
    catalog_url: str
    floor_db: str
    paths: list[str]


def build(folder: str, keys: int) -> Built:
    import shardcat

    paths = write_tiny_shards(folder, keys, 1_000_000)
    infos: list[Any] = [read_info(p) for p in paths]
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
            if rec["bin"].data != payload(i):
                raise MismatchError(
                    f"shardcat: wrong payload for {key} in a {built.keys:,}-key catalog"
                )
            if key.encode() not in frame or payload(i) not in frame:
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
