"""Column groups (issue 32): adding, reading and streaming a caption group, and Lance ``add_columns``.

A dataset of ``--samples`` samples of 2-8 KiB (``bin``) and a label, in
shards of ``--per-shard``, gets a group of ~``--caption-bytes`` captions
(``txt``) keyed like it, from a list in the base's order (so aligned). In one
run, each against its baseline:

- **add**: ``shardcat.add_entries`` vs ``shardcat.write`` of the same caption
  samples as a dataset of their own (the same Dask cluster, alternating,
  best of ``--repeat``): throughput ratio (goal >= 0.9) and bytes written
  per byte of caption payload (goal <= 1.1), beside the plain write's own.
- **get**: ``Catalog.get`` p50 of a sample with the group vs a get of the
  same sample from a twin dataset without the group (the same samples and
  shards, written beside it), alternating key by key in one window so the
  machine's load hits both alike (goal <= 1.5).
- **stream**: one pass over every sample with its group (``iter_task_records``
  of the planned tasks: the join) vs streaming the base shards (the same
  reader, tasks without the join) and the group's shards
  (``ShardReader.iter_records``) separately, touching every entry's bytes
  (goal >= 0.8); rounds alternate, best of each; the ratio of the process's
  CPU time is printed beside the wall-clock one (a loaded machine's
  descheduling shows in wall time only).
- **lance**: the same base as a Lance dataset, ``add_columns`` of the same
  captions in row order (a reader of the new column): its time and bytes
  written, then ``take`` of random rows by position, a lookup by key (a
  filtered read through a BTREE scalar index on the key column, its build
  timed; each row's caption checked) and a scan of every column. Skipped, with a
  note, when ``lance`` does not import (``PYTHONPATH=...:/tmp/peers/site``).

Usage::

    PYTHONPATH=$PWD/src:/tmp/peers/site .venv/bin/python benchmarks/bench_groups.py \\
        [--samples 20000] [--per-shard 2000] [--caption-bytes 100] [--lookups 2000] [--repeat 2]

Nothing here is a test: it prints measured values and ratios, never asserts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import shardcat
from shardcat.readers import iter_task_records, plan_tasks
from shardcat.reading import Catalog


def base_samples(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"__key__": f"k{i:08d}", "bin": os.urandom(rng.randint(2048, 8192)), "cls": str(i % 10)}
        for i in range(n)
    ]


_WORDS = [
    "a",
    "an",
    "the",
    "photo",
    "picture",
    "of",
    "dog",
    "cat",
    "man",
    "woman",
    "child",
    "car",
    "tree",
    "house",
    "street",
    "beach",
    "mountain",
    "red",
    "blue",
    "green",
    "small",
    "large",
    "old",
    "young",
    "running",
    "sitting",
    "standing",
    "near",
    "under",
    "beside",
    "with",
    "in",
    "on",
    "at",
    "sunset",
    "night",
    "snow",
    "rain",
    "light",
    "dark",
    "bright",
    "city",
    "field",
    "river",
    "boat",
    "bird",
    "sky",
]


def captions(n: int, size: int, seed: int = 2) -> list[dict[str, Any]]:
    """Captions of ``size`` bytes drawn from a small vocabulary (text, not filler)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        text = ""
        while len(text) < size:
            text += rng.choice(_WORDS) + " "
        out.append({"__key__": f"k{i:08d}", "txt": text[:size]})
    return out


def dir_bytes(path: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def p50s(fns: list[Callable[[str], Any]], keys: list[str], n: int) -> list[float]:
    """Each function's p50 over the same ``n`` random keys, called alternately key by key."""
    rng = random.Random(1)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(n):
        key = rng.choice(keys)
        for fn, out in zip(fns, times):
            t0 = time.perf_counter()
            fn(key)
            out.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def touch(records: Iterable[Any]) -> int:
    """Every entry's bytes looked at (as a reader that uses them would): bytes seen."""
    seen = 0
    for rec in records:
        for entry in rec.values():
            seen += len(entry.view)
    return seen


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    out = None
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    """``(wall s, CPU s of this process, result)`` of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def run_lance(root: str, base: list[dict], caps: list[dict], lookups: int, repeat: int) -> None:
    try:
        import lance
        import pyarrow as pa
    except ImportError as e:
        print(f"lance: skipped ({e}); PYTHONPATH=$PWD/src:/tmp/peers/site has it")
        return
    uri = f"{root}/lance.lance"
    table = pa.table(
        {
            "key": [s["__key__"] for s in base],
            "bin": pa.array([s["bin"] for s in base], pa.binary()),
            "cls": [s["cls"] for s in base],
        }
    )
    ds = lance.write_dataset(table, uri, max_rows_per_file=len(base))
    before = dir_bytes(uri)
    payload = sum(len(c["txt"].encode()) for c in caps)
    new = pa.table({"txt": [c["txt"] for c in caps]})
    t0 = time.perf_counter()
    ds.add_columns(pa.RecordBatchReader.from_batches(new.schema, new.to_batches(8192)))
    add_s = time.perf_counter() - t0
    ds = lance.dataset(uri)
    written = dir_bytes(uri) - before
    rng = random.Random(1)
    times = []
    for _ in range(lookups):
        i = rng.randrange(len(base))
        t0 = time.perf_counter()
        ds.take([i], columns=["key", "bin", "cls", "txt"])
        times.append(time.perf_counter() - t0)
    take = statistics.median(times)
    # By key, as a shardcat get is: Lance's BTREE scalar index on the key column, then a
    # filtered read of the row (fewer lookups: each is a query plan).
    t0 = time.perf_counter()
    ds.create_scalar_index("key", "BTREE")
    index_s = time.perf_counter() - t0
    ds = lance.dataset(uri)
    by_key = []
    for _ in range(min(lookups, 300)):
        i = rng.randrange(len(base))
        t0 = time.perf_counter()
        row = ds.to_table(
            columns=["key", "bin", "cls", "txt"], filter=f"key = '{base[i]['__key__']}'"
        )
        by_key.append(time.perf_counter() - t0)
        if row.column("txt")[0].as_py() != caps[i]["txt"]:
            raise SystemExit(f"lance returned another caption for {base[i]['__key__']}")
    scan_s, seen = best(
        lambda: sum(b.nbytes for b in ds.to_batches(columns=["key", "bin", "cls", "txt"])),
        repeat,
    )
    print(
        f"lance add_columns: {add_s:.3f} s ({payload / add_s / 1e6:.1f} MB/s of captions), "
        f"{written / payload:.2f} bytes written per caption byte"
    )
    print(
        f"lance take p50 (by row position) {take * 1e6:.0f} us; by key (BTREE index on key, "
        f"built in {index_s:.2f} s) p50 {statistics.median(by_key) * 1e6:.0f} us; scan "
        f"{len(base) / scan_s:,.0f} samples/s ({seen / scan_s / 1e6:.0f} MB/s)"
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=20_000)
    p.add_argument("--per-shard", type=int, default=2000)
    p.add_argument("--caption-bytes", type=int, default=100)
    p.add_argument("--lookups", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-lance", action="store_true")
    args = p.parse_args(argv)

    from distributed import Client, LocalCluster

    root = tempfile.mkdtemp(prefix="bench_groups-")
    base = base_samples(args.samples)
    caps = captions(args.samples, args.caption_bytes)
    payload = sum(len(c["txt"].encode()) for c in caps)
    keys = [s["__key__"] for s in base]
    per = args.per_shard
    options = {"max_records_per_shard": per, "batch_size": per, "progress": False}
    try:
        with (
            LocalCluster(
                n_workers=args.workers, threads_per_worker=1, dashboard_address=None
            ) as lc,
            Client(lc) as client,
            Catalog(f"sqlite:///{root}/catalog.db") as cat,
        ):
            shardcat.write(base, f"{root}/b", catalog=cat, dataset="b", client=client, **options)
            # The same samples and shards, never given a group: the get's baseline.
            shardcat.write(base, f"{root}/nb", catalog=cat, dataset="nb", client=client, **options)

            add_times, write_times, add_bytes, write_bytes = [], [], [], []
            for r in range(args.repeat):
                t0 = time.perf_counter()
                written = shardcat.write(
                    caps, f"{root}/plain{r}", catalog=cat, dataset=f"plain{r}", client=client,
                    **options,
                )  # fmt: skip
                write_times.append(time.perf_counter() - t0)
                write_bytes.append(written.bytes)
                if r:
                    cat.drop_group("b", f"captions{r - 1}")
                t0 = time.perf_counter()
                added = shardcat.add_entries(
                    caps, catalog=cat, dataset="b", group=f"captions{r}", client=client, **options
                )
                add_times.append(time.perf_counter() - t0)
                add_bytes.append(sum(Path(u).stat().st_size for u in added.shards))
            add_s, write_s = min(add_times), min(write_times)
            print(
                f"samples {args.samples} of 2-8 KiB in shards of {per}; captions of "
                f"{args.caption_bytes} B ({payload / 1e6:.2f} MB); {args.workers} workers"
            )
            print(
                f"add_entries {add_s:.2f} s, {payload / add_s / 1e6:.2f} MB/s vs write of the "
                f"same samples "
                f"{payload / write_s / 1e6:.2f} MB/s: ratio {write_s / add_s:.2f} (goal >= 0.9)"
            )
            print(
                f"bytes written per caption byte: add_entries {add_bytes[-1] / payload:.2f} "
                f"(goal <= 1.1), plain write {write_bytes[-1] / payload:.2f} "
                f"(keys, record headers and footer index included); ratio of the two "
                f"{add_bytes[-1] / write_bytes[-1]:.2f}"
            )

            assert "txt" in cat.get("b", keys[0]) and "txt" not in cat.get("nb", keys[0])
            group_get, base_get = p50s(
                [lambda k: cat.get("b", k), lambda k: cat.get("nb", k)], keys, args.lookups
            )
            print(
                f"get p50: with the group {group_get * 1e6:.1f} us vs the same samples without "
                f"it {base_get * 1e6:.1f} us (alternating): ratio {group_get / base_get:.2f} "
                f"(goal <= 1.5)"
            )

            tasks = plan_tasks(cat, "b", None, None)
            joins = [j for t in tasks for j in t.joins]
            keyed = sum(j.keyed_count for j in joins)
            group_shards = [s.url for s in cat.shards("b") if f"captions{args.repeat - 1}" in s.url]

            def joined() -> int:
                return sum(touch(iter_task_records(t, {}, None)) for t in tasks)

            # The base through the same reader (its checks, its generators), without the join.
            base_tasks = [dataclasses.replace(t, joins=()) for t in tasks]

            def separate() -> int:
                total = sum(touch(iter_task_records(t, {}, None)) for t in base_tasks)
                for url in group_shards:
                    with shardcat.ShardReader(url) as r:
                        total += touch(r.iter_records())
                return total

            rounds_joined, rounds_separate = [], []
            for _ in range(args.repeat + 1):  # alternating: drift hits both alike
                rounds_separate.append(timed(separate))
                rounds_joined.append(timed(joined))
            j_s, j_cpu = min(r[0] for r in rounds_joined), min(r[1] for r in rounds_joined)
            s_s, s_cpu = min(r[0] for r in rounds_separate), min(r[1] for r in rounds_separate)
            assert rounds_joined[0][2] == rounds_separate[0][2]  # the same bytes touched
            print(
                f"stream with the aligned group ({keyed} keyed records) "
                f"{args.samples / j_s:,.0f} samples/s vs base and group shards separately "
                f"{args.samples / s_s:,.0f}/s: ratio {s_s / j_s:.2f} (goal >= 0.8); "
                f"CPU time ratio {s_cpu / j_cpu:.2f}"
            )
        if args.no_lance:
            print("lance: skipped (--no-lance)")
        else:
            run_lance(root, base, caps, args.lookups, args.repeat)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
