"""Samples per second through a torch DataLoader: shardcat.torch vs the plain streaming reader and WebDataset.

One dataset is written twice, as shardcat shards (with a SQLite catalog) and
as WebDataset tars of the same samples (``jpg`` bytes plus a ``json`` label).
Each reader decodes the same way (JSON decoded, image bytes left as bytes) and
hands batches of samples to the loop unchanged (a list-collate), so the
figures compare the readers, not torch's tensor collation. Ratios are taken
within one run (best of ``--repeat``), so they hold on a loaded machine.

    .venv/bin/python benchmarks/bench_readers.py [--samples 20000] [--shards 16] [--kib 4]

With ``--s3`` it measures instead, against S3 on a moto server on 127.0.0.1
(``benchmarks/moto_server.py``, in its own process; no DataLoader workers):
the time to the first sample and the bytes fetched from the store per epoch,
streaming shards straight from the store vs with a local cache (cold, then
warm). Stock moto reads a whole object to
answer each ranged GET, so its times overstate what a real store costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import webdataset as wds
from torch.utils.data import DataLoader

import shardcat
from shardcat.torch import (
    ShardIterableDataset,
    ShardLoader,
    pack_samples,
    unchanged,
    widen_result_pipe,
)


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
    kept: list[tuple[str, bytes, int]] = []  # for MosaicML's side, in another python
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
                kept.append((key, jpg, i % 10))
                w.add(key, {"jpg": jpg, "json": {"label": i % 10}})
                t.write({"__key__": key, "jpg": jpg, "json": {"label": i % 10}})
        cat.register_shard("bench", w.close())
    cat.close()
    with open(f"{root}/samples.pkl", "wb") as f:
        pickle.dump(kept, f)
    return url, tars


def shard_urls(cat_url: str) -> list[str]:
    """The dataset's shards, listed once: no run pays for opening the catalog (setup, not reading)."""
    with shardcat.Catalog(cat_url) as cat:
        return [row.url for row in cat.shards("bench")]


def plain(urls: list[str]) -> int:
    n = 0
    for url in urls:
        with shardcat.ShardReader(url) as r:
            for rec in r.iter_records():
                rec.decode(writable=True)
                n += 1
    return n


def ours(ds: ShardIterableDataset, workers: int) -> int:
    """A fresh DataLoader (batch_size=64): workers started for this epoch, as without persistence."""
    loader = DataLoader(ds, batch_size=64, num_workers=workers, collate_fn=identity)
    return sum(len(b) for b in loader)


def ours_batched(ds: ShardIterableDataset, workers: int) -> int:
    """Batches of 64 made in the dataset's workers (``batch_size=``), passed on by a fresh loader."""
    loader = DataLoader(ds, batch_size=None, num_workers=workers, collate_fn=unchanged)
    return sum(len(b) for b in loader)


def _ipc_bytes(obj: Any) -> Any:
    """``obj`` pickled as a DataLoader worker's queue pickles it (ForkingPickler, torch's reductions)."""
    from multiprocessing.reduction import ForkingPickler

    return ForkingPickler.dumps(obj)


def packed(batch: list[dict[str, Any]]) -> tuple[list[str], bytes, np.ndarray, list[Any]]:
    """A batch as keys, one buffer of every ``jpg`` with offsets, and the labels."""
    sizes = np.fromiter((len(s["jpg"]) for s in batch), dtype=np.int64, count=len(batch))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return (
        [s["__key__"] for s in batch],
        b"".join(s["jpg"] for s in batch),
        offsets,
        [s["json"] for s in batch],
    )


def breakdown(cat_url: str, urls: list[str], repeat: int) -> None:
    """What a worker adds per sample, in this process (CPU time, best of ``repeat``, unshuffled)."""
    ds = ShardIterableDataset(cat_url, "bench", shuffle=False, batch_size=64)
    packing = ShardIterableDataset(
        cat_url, "bench", shuffle=False, batch_size=64, collate=pack_samples
    )

    def pickled() -> int:
        n = 0
        for b in ds:
            _ipc_bytes(b)
            n += len(b)
        return n

    steps: dict[str, Callable[[], int]] = {
        "plain streaming reader": partial(plain, urls),
        "dataset, batches of 64 (what a worker iterates)": lambda: sum(len(b) for b in ds),
        "+ pickled for the queue": pickled,
        "+ pickled and unpickled": lambda: sum(len(pickle.loads(_ipc_bytes(b))) for b in ds),
        "+ packed (one buffer + offsets), pickled and unpickled": lambda: sum(
            len(pickle.loads(_ipc_bytes(packed(b)))[0]) for b in ds
        ),
        "+ pack_samples (shared memory), pickled and unpickled": lambda: sum(
            len(pickle.loads(_ipc_bytes(pack_samples(b)))) for b in ds
        ),
        "dataset with collate=pack_samples (what a packing worker iterates)": lambda: sum(
            len(b) for b in packing
        ),
    }
    best: dict[str, float] = {}
    n = 0
    for _ in range(repeat):
        for label, step in steps.items():
            c0 = time.process_time()
            n = step()
            best[label] = min(best.get(label, float("inf")), time.process_time() - c0)
    base = best["plain streaming reader"]
    print(f"In one process, {n:,} samples, CPU time, best of {repeat}:")
    print("| step | µs per sample | plain / this |")
    print("| --- | --- | --- |")
    for label, t in best.items():
        print(f"| {label} | {t / n * 1e6:.2f} | {base / t:.2f} |")


def packed_cpu(cat_url: str, urls: list[str], repeat: int) -> None:
    """What a packing worker pays per sample, in this process: shuffle off/on, batches of 64/256.

    Each packed dataset read straight from shard bytes (``direct``) and from records
    (``direct=False``: the path a shuffle buffer took before it held positions), CPU time,
    best of ``repeat``, interleaved with the plain reader.
    """
    steps: dict[str, Callable[[], int]] = {"plain streaming reader": partial(plain, urls)}
    for shuffle in (False, True):
        for size in (64, 256):
            for direct in (True, False):
                ds = ShardIterableDataset(
                    cat_url,
                    "bench",
                    shuffle=shuffle,
                    shuffle_buffer=1000,
                    batch_size=size,
                    collate=pack_samples,
                )
                ds.stream = dataclasses.replace(ds.stream, direct=direct)
                label = (
                    f"shuffle buffer {'1,000' if shuffle else 'off'}, batches of {size}, "
                    f"{'straight from shard bytes' if direct else 'from records'}"
                )
                steps[label] = lambda ds=ds: sum(len(b) for b in ds)
    best: dict[str, float] = {}
    n = 0
    for _ in range(repeat):
        for label, step in steps.items():
            c0 = time.process_time()
            n = step()
            best[label] = min(best.get(label, float("inf")), time.process_time() - c0)
    base = best["plain streaming reader"]
    print(f"In one process (a worker's share), {n:,} samples, CPU time, best of {repeat}:")
    print("| packed batches | samples per CPU second | vs plain |")
    print("| --- | --- | --- |")
    for label, t in best.items():
        print(f"| {label} | {n / t:,.0f} | {base / t:.2f} |")


def worker_cpu(cat_url: str, urls: list[str], repeat: int) -> None:
    """Who bounds one persistent worker: CPU per sample of the worker (from /proc) and of the loop.

    With one worker the two processes run side by side, so the loader's rate
    is at most the slower one's: a worker that costs more per sample than
    the plain reader caps the ratio below 1 whatever the training process
    saves. Medians of ``repeat`` epochs (after a first one that starts the
    worker), interleaved with the same dataset iterated in this process and
    the plain reader.
    """
    import statistics

    def proc_cpu(pid: int) -> float:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICK

    print(f"One persistent worker, µs of CPU per sample, median of {repeat} epochs:")
    print("| batches | worker | training process | same dataset in one process | plain reader |")
    print("| --- | --- | --- | --- | --- |")
    for label, collate, size, direct in (
        ("lists of 64 sample dicts", None, 64, False),
        ("64 packed from records (direct=False)", pack_samples, 64, False),
        ("64 packed straight from shard bytes", pack_samples, 64, True),
        ("256 packed from records (direct=False)", pack_samples, 256, False),
        ("256 packed straight from shard bytes", pack_samples, 256, True),
    ):
        ds = ShardIterableDataset(cat_url, "bench", shuffle=False, batch_size=size, collate=collate)
        ds.stream = dataclasses.replace(ds.stream, direct=direct)
        loader = ShardLoader(ds, num_workers=1)
        sum(len(b) for b in loader)
        pid = loader._iterator._workers[0].pid
        worker, main, alone, plain_ = [], [], [], []
        for epoch in range(1, repeat + 1):
            ds.set_epoch(epoch)
            w0, m0 = proc_cpu(pid), time.process_time()
            n = sum(len(b) for b in loader)
            worker.append((proc_cpu(pid) - w0) / n * 1e6)
            main.append((time.process_time() - m0) / n * 1e6)
            c0 = time.process_time()
            n = sum(len(b) for b in ds)
            alone.append((time.process_time() - c0) / n * 1e6)
            c0 = time.process_time()
            n = plain(urls)
            plain_.append((time.process_time() - c0) / n * 1e6)
        med = statistics.median
        print(
            f"| {label} | {med(worker):.2f} | {med(main):.2f} | {med(alone):.2f} | "
            f"{med(plain_):.2f} |"
        )
        del loader


class Persistent:
    """One epoch per call of a loader whose workers stay (``ShardLoader``'s default).

    The workers start in the first call, made before timing (``warm``):
    what is timed is the steady state of a training job, an epoch after the
    first. Each call reads the next epoch.
    """

    def __init__(
        self,
        cat_url: str,
        workers: int,
        shuffle: bool,
        batched: bool,
        pipe: int | None = None,
        packed: bool = False,
        direct: bool = True,
        batch_size: int = 64,
        bundle: int | None = None,
    ) -> None:
        if batched:
            ds = ShardIterableDataset(
                cat_url,
                "bench",
                shuffle=shuffle,
                shuffle_buffer=1000,
                batch_size=batch_size,
                collate=pack_samples if packed else None,
            )
            # direct=False: packed from decoded records (the path before packed batches were
            # read straight from shard bytes), for a comparison in the same run.
            ds.stream = dataclasses.replace(ds.stream, direct=direct)
            # bundle=None: ShardLoader's default, batches bundled to >= 256 samples per trip.
            self.loader: DataLoader[Any] = ShardLoader(ds, num_workers=workers, bundle=bundle)
        else:
            ds = ShardIterableDataset(cat_url, "bench", shuffle=shuffle, shuffle_buffer=1000)
            self.loader = ShardLoader(ds, batch_size=64, num_workers=workers, collate_fn=identity)
        self.dataset = ds
        self.epoch = 0
        self.warm = self()
        if pipe is not None:  # back to this pipe size (ShardLoader widens it to 1 MiB)
            widen_result_pipe(self.loader._iterator, pipe)

    def __call__(self) -> int:
        self.dataset.set_epoch(self.epoch)
        self.epoch += 1
        return sum(len(b) for b in self.loader)


_TICK = os.sysconf("SC_CLK_TCK")


def _live_children_cpu() -> float:
    """CPU seconds of this process's live children (persistent workers), from /proc."""
    total = 0.0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                pids = f.read().split()
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime
    return total


def cpu_seconds() -> float:
    """CPU time of this process and of its children: waited-for ones and live ones (workers)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _live_children_cpu()


def main_cpu_seconds() -> float:
    """CPU time of this process alone: what the training loop's process pays."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def interleaved(
    runs: dict[str, Callable[[], int]], repeat: int
) -> dict[str, tuple[float, float, int, float]]:
    """Best samples/s by wall clock, by CPU time and by this process's CPU time of each run.

    Round ``r`` runs every entry once, so a change in the machine's load
    reaches all of them alike; CPU time (with the workers') does not count
    waiting for a core. Returns ``(wall, cpu, samples, main_cpu)`` rates.
    """
    best: dict[str, tuple[float, float, int, float]] = {}
    for _ in range(repeat):
        for label, run in runs.items():
            m0, c0, t0 = main_cpu_seconds(), cpu_seconds(), time.perf_counter()
            n = run()
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
            main = main_cpu_seconds() - m0
            w, c, _, m = best.get(label, (0.0, 0.0, n, 0.0))
            best[label] = (max(w, n / wall), max(c, n / cpu), n, max(m, n / main))
    return best


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


def s3_epochs(samples: int, shards: int, kib: int) -> None:
    import s3fs

    if not __package__:  # run as a script: make the benchmarks package importable
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.moto_server import MotoServer

    # Stock moto (whole object per ranged GET), as measured before, in its own process.
    server = MotoServer("process", ranges=False)
    opts = server.storage_options()
    fetched = [0]
    real_range = s3fs.core._fetch_range
    real_get = s3fs.S3FileSystem._get_file
    real_cat = s3fs.S3FileSystem._cat_file

    def counting_range(*args, **kwargs):
        data = real_range(*args, **kwargs)
        fetched[0] += len(data)
        return data

    async def counting_get(self, rpath, lpath, **kwargs):
        out = await real_get(self, rpath, lpath, **kwargs)
        fetched[0] += os.path.getsize(lpath)
        return out

    async def counting_cat(self, path, *args, **kwargs):  # the footer's tail read
        data = await real_cat(self, path, *args, **kwargs)
        fetched[0] += len(data)
        return data

    s3fs.core._fetch_range = counting_range
    s3fs.S3FileSystem._get_file = counting_get
    s3fs.S3FileSystem._cat_file = counting_cat
    try:
        with tempfile.TemporaryDirectory(prefix="bench-readers-s3-") as root:
            local_url, _ = write(root, samples, shards, kib)
            cat = shardcat.Catalog(f"sqlite:///{root}/s3.db", storage_options=opts)
            cat.create_dataset("bench", "s3://bench/sc")
            fs = s3fs.S3FileSystem(**opts)
            for row in shardcat.Catalog(local_url).shards("bench"):
                name = os.path.basename(row.url)
                fs.put_file(row.url, f"bench/sc/{name}")
                cat.reindex("bench", [f"s3://bench/sc/{name}"])
            size = sum(r.size_bytes for r in cat.shards("bench"))
            print(f"{samples:,} samples, {size / 1e6:.1f} MB in {shards} shards on S3 (moto)")
            print(
                "| reader | epoch | first sample (ms) | epoch (s) | MB fetched | fetched / dataset |"
            )
            print("| --- | --- | --- | --- | --- | --- |")
            cache = f"{root}/cache"
            for label, kwargs in (
                ("stream, no cache", {}),
                ("local cache", {"cache_dir": cache, "cache_limit": "10GB"}),
            ):
                ds = ShardIterableDataset(cat, "bench", seed=0, **kwargs)
                for epoch in (0, 1):
                    ds.set_epoch(epoch)
                    fetched[0] = 0
                    t0 = time.perf_counter()
                    it = iter(ds)
                    next(it)
                    first = time.perf_counter() - t0
                    n = 1 + sum(1 for _ in it)
                    total = time.perf_counter() - t0
                    assert n == samples, (n, samples)
                    print(
                        f"| {label} | {epoch} | {first * 1e3:.0f} | {total:.2f} | "
                        f"{fetched[0] / 1e6:.1f} | {fetched[0] / size:.2f} |"
                    )
            cat.close()
    finally:
        s3fs.core._fetch_range = real_range
        s3fs.S3FileSystem._get_file = real_get
        s3fs.S3FileSystem._cat_file = real_cat
        server.stop()


def mds_compare(
    python: str,
    root: str,
    repeat: int,
    ours: dict[bool, dict[str, tuple[float, float, int, float]]],
) -> None:
    """MosaicML Streaming on the same samples, in ``python`` (run after ours, not interleaved)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mds_readers.py")
    out = subprocess.run(
        [python, script, f"{root}/samples.pkl", root, "--repeat", str(repeat)],
        check=True,
        capture_output=True,
        text=True,
    )
    rates = json.loads(out.stdout.strip().splitlines()[-1])
    print("MosaicML Streaming (StreamingDataset from MDSWriter shards), same samples, after ours:")
    print("| shuffle | workers | MDS samples/s | shardcat.torch row | samples/s | shardcat / MDS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shuffle in (False, True):
        for workers in (0, 1, 2):
            mds = rates[f"{'shuffle' if shuffle else 'plain'} {workers}"]
            # The per-sample loader where it ran, else (--packed-only) packed batches of 64.
            for row in (f"ours {workers}", f"packed persistent {workers}", f"packed {workers}"):
                if row in ours[shuffle]:
                    mine = ours[shuffle][row][0]
                    print(
                        f"| {'yes' if shuffle else 'no'} | {workers} | {mds:,.0f} | {row} | "
                        f"{mine:,.0f} | {mine / mds:.2f} |"
                    )
                    break
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--kib", type=int, default=4, help="mean sample size (KiB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--s3", action="store_true", help="first sample and bytes per epoch on S3")
    ap.add_argument("--no-webdataset", action="store_true", help="leave WebDataset out (faster)")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="only what a worker adds per sample (dataset, pickling), in one process",
    )
    ap.add_argument(
        "--worker-cpu",
        action="store_true",
        help="only CPU per sample of one persistent worker vs the training process (Linux)",
    )
    ap.add_argument(
        "--packed-cpu",
        action="store_true",
        help="only CPU per sample of packed datasets in one process (shuffle off/on, 64/256)",
    )
    ap.add_argument(
        "--packed-only",
        action="store_true",
        help="only the plain reader and packed batches (from shard bytes, from records, 256)",
    )
    ap.add_argument(
        "--shuffle",
        choices=("both", "off", "on"),
        default="both",
        help="which shuffle settings to measure",
    )
    ap.add_argument(
        "--mds-python",
        help="a python with mosaicml-streaming (another venv): MDS reads the same samples after ours",
    )
    args = ap.parse_args()
    if args.s3:
        s3_epochs(args.samples, args.shards, args.kib)
        return
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-readers-") as root:
        cat_url, tars = write(root, args.samples, args.shards, args.kib)
        urls = shard_urls(cat_url)
        if args.breakdown:
            breakdown(cat_url, urls, args.repeat)
            return
        if args.worker_cpu:
            worker_cpu(cat_url, urls, args.repeat)
            return
        if args.packed_cpu:
            packed_cpu(cat_url, urls, args.repeat)
            return
        best_plain: dict[bool, dict[str, tuple[float, float, int, float]]] = {}
        settings = {"both": (False, True), "off": (False,), "on": (True,)}[args.shuffle]
        for shuffle in settings:
            runs: dict[str, Callable[[], int]] = {"plain": partial(plain, urls)}
            # Datasets made once (opening the catalog and planning is setup, as for the plain
            # reader's shard list); each run reads one epoch.
            per_sample = ShardIterableDataset(
                cat_url, "bench", shuffle=shuffle, shuffle_buffer=1000
            )
            batched = ShardIterableDataset(
                cat_url, "bench", shuffle=shuffle, shuffle_buffer=1000, batch_size=64
            )
            packs = ShardIterableDataset(
                cat_url,
                "bench",
                shuffle=shuffle,
                shuffle_buffer=1000,
                batch_size=64,
                collate=pack_samples,
            )
            for workers in (0, 1, 2):
                if args.packed_only:
                    if workers:
                        for label, kw in (
                            ("packed persistent", {}),
                            ("packed persistent unbundled", {"bundle": 1}),
                            ("packed persistent records", {"direct": False}),
                            ("packed persistent 256", {"batch_size": 256}),
                        ):
                            runs[f"{label} {workers}"] = Persistent(
                                cat_url, workers, shuffle, batched=True, packed=True, **kw
                            )
                    else:
                        runs["packed 0"] = partial(ours_batched, packs, 0)
                    continue
                runs[f"ours {workers}"] = partial(ours, per_sample, workers)
                runs[f"batched {workers}"] = partial(ours_batched, batched, workers)
                runs[f"packed {workers}"] = partial(ours_batched, packs, workers)
                if workers:
                    runs[f"ours persistent {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=False
                    )
                    runs[f"batched persistent {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=True
                    )
                    runs[f"batched persistent 64k {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=True, pipe=2**16
                    )
                    runs[f"packed persistent {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=True, packed=True
                    )
                    runs[f"packed persistent unbundled {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=True, packed=True, bundle=1
                    )
                    runs[f"packed persistent records {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=True, packed=True, direct=False
                    )
                    runs[f"packed persistent 256 {workers}"] = Persistent(
                        cat_url, workers, shuffle, batched=True, packed=True, batch_size=256
                    )
                if not args.no_webdataset:
                    runs[f"wds {workers}"] = partial(webdataset, tars, workers, shuffle)
            best = interleaved(runs, args.repeat)
            base_wall, base_cpu, n, base_main = best["plain"]
            best_plain[shuffle] = best
            assert all(v[2] == n for v in best.values()), best
            print(
                f"{n:,} samples of ~{args.kib} KiB in {args.shards} shards, shuffle "
                f"{'buffer 1,000' if shuffle else 'off'}; plain streaming reader: "
                f"{base_wall:,.0f} samples/s wall, {base_cpu:,.0f} per CPU second"
            )
            print(
                "| workers | batches made in | workers started | samples/s | vs plain | "
                "vs plain, CPU | vs plain, CPU of the loop's process | WebDataset samples/s |"
            )
            print("| --- | --- | --- | --- | --- | --- | --- | --- |")
            for workers in (0, 1, 2):
                w_wall = best.get(f"wds {workers}", (float("nan"), 0.0, 0, 0.0))[0]
                for label, made, started in (
                    ("ours", "loader (batch_size=64)", "every epoch"),
                    ("batched", "dataset (batch_size=64)", "every epoch"),
                    ("ours persistent", "loader (batch_size=64)", "once"),
                    # ShardLoader's persistent workers bundle batches (several per trip).
                    ("batched persistent", "dataset (batch_size=64), bundled", "once"),
                    (
                        "batched persistent 64k",
                        "dataset (batch_size=64), bundled",
                        "once, 64 KiB pipe",
                    ),
                    ("packed", "dataset, packed (collate=pack_samples)", "every epoch"),
                    (
                        "packed persistent",
                        "dataset, packed (collate=pack_samples), bundled",
                        "once",
                    ),
                    (
                        "packed persistent unbundled",
                        "dataset, packed, one batch per trip (bundle=1)",
                        "once",
                    ),
                    (
                        "packed persistent records",
                        "dataset, packed from records (direct=False), bundled",
                        "once",
                    ),
                    ("packed persistent 256", "dataset, packed, batch_size=256", "once"),
                ):
                    if f"{label} {workers}" not in best:
                        continue
                    wall, cpu, _, main = best[f"{label} {workers}"]
                    print(
                        f"| {workers} | {made} | {started if workers else '-'} | {wall:,.0f} | "
                        f"{wall / base_wall:.2f} | {cpu / base_cpu:.2f} | "
                        f"{main / base_main:.2f} | {w_wall:,.0f} |"
                    )
            for run in runs.values():
                if isinstance(run, Persistent):
                    del run.loader  # stops its workers
        if args.mds_python:
            mds_compare(args.mds_python, root, args.repeat, best_plain)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
