"""Samples per second through a torch DataLoader: shardcat.torch vs the plain streaming reader and WebDataset.

One dataset is written twice, as shardcat shards (with a SQLite catalog) and
as WebDataset tars of the same samples (``jpg`` bytes plus a ``json`` label).
Each reader decodes the same way (JSON decoded, image bytes left as bytes) and
hands batches of samples to the loop unchanged (a list-collate), so the
figures compare the readers, not torch's tensor collation. Ratios are taken
within one run (best of ``--repeat``), so they hold on a loaded machine.

    .venv/bin/python benchmarks/bench_readers.py [--samples 20000] [--shards 16] [--kib 4]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import webdataset as wds
from torch.utils.data import DataLoader

import shardcat
from shardcat.torch import ShardIterableDataset


def identity(batch: list[Any]) -> list[Any]:
    return batch


def write(root: str, samples: int, shards: int, kib: int) -> tuple[str, list[str]]:
    rng = np.random.default_rng(0)
    url = f"sqlite:///{root}/catalog.db"
    cat = shardcat.Catalog(url)
    cat.create_dataset("bench", f"{root}/sc")
    os.makedirs(f"{root}/sc")
    os.makedirs(f"{root}/wds")
    tars = []
    per = samples // shards
    for s in range(shards):
        tar = f"{root}/wds/bench-{s:06d}.tar"
        tars.append(tar)
        with (
            shardcat.ShardWriter(f"{root}/sc/bench-{s:06d}.shard", shard_number=s) as w,
            wds.TarWriter(tar) as t,
        ):
            for i in range(s * per, (s + 1) * per):
                size = int(rng.integers(kib * 512, kib * 1536))
                jpg = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
                key = f"{i:08d}"
                w.add(key, {"jpg": jpg, "json": {"label": i % 10}})
                t.write({"__key__": key, "jpg": jpg, "json": {"label": i % 10}})
        cat.register_shard("bench", w.close())
    cat.close()
    return url, tars


def rate(run: Callable[[], int], repeat: int) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        count = run()
        best = min(best, time.perf_counter() - t0)
    return count / best, count


def plain(cat_url: str) -> int:
    cat = shardcat.Catalog(cat_url)
    n = 0
    for row in cat.shards("bench"):
        with shardcat.ShardReader(row.url) as r:
            for rec in r.iter_records():
                rec.decode(writable=True)
                n += 1
    cat.close()
    return n


def ours(cat_url: str, workers: int, shuffle: bool) -> int:
    ds = ShardIterableDataset(cat_url, "bench", shuffle=shuffle, shuffle_buffer=1000)
    loader = DataLoader(ds, batch_size=64, num_workers=workers, collate_fn=identity)
    return sum(len(b) for b in loader)


def webdataset(tars: list[str], workers: int, shuffle: bool) -> int:
    ds = wds.WebDataset(
        tars,
        shardshuffle=100 if shuffle else False,
        nodesplitter=wds.split_by_node,
        workersplitter=wds.split_by_worker,
        empty_check=False,
    )
    if shuffle:
        ds = ds.shuffle(1000)
    ds = ds.decode()
    loader = DataLoader(ds, batch_size=64, num_workers=workers, collate_fn=identity)
    return sum(len(b) for b in loader)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--kib", type=int, default=4, help="mean sample size (KiB)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-readers-") as root:
        cat_url, tars = write(root, args.samples, args.shards, args.kib)
        base, n = rate(lambda: plain(cat_url), args.repeat)
        print(f"{n:,} samples of ~{args.kib} KiB in {args.shards} shards")
        print(f"plain streaming reader, one process: {base:,.0f} samples/s")
        print(
            "| workers | shuffle | shardcat.torch samples/s | vs plain | WebDataset samples/s | shardcat / WebDataset |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for shuffle in (False, True):
            for workers in (0, 1, 2):
                ours_rate, got = rate(partial(ours, cat_url, workers, shuffle), args.repeat)
                wds_rate, wgot = rate(partial(webdataset, tars, workers, shuffle), args.repeat)
                assert got == n and wgot == n, (got, wgot, n)
                print(
                    f"| {workers} | {'yes' if shuffle else 'no'} | {ours_rate:,.0f} | "
                    f"{ours_rate / base:.2f} | {wds_rate:,.0f} | {ours_rate / wds_rate:.2f} |"
                )


if __name__ == "__main__":
    main()
