"""Reads from S3 (moto on 127.0.0.1, ranged GETs by seek + read): streaming and batch gaps.

``stream``: shards written by ``ShardWriter`` (2-8 KiB records, ~70 MB each),
then, alternating, a raw sequential read of the same files (s3fs
``fs.open(block_size=8 MiB)``, 8 MiB ``read()`` calls, as the peers
harness's floor) and ``ShardReader`` iteration touching every record's
entries (as a user would). Reports the median MB/s of each, their ratio, and
the CPU and cyclic-GC time of each pass: the figures behind
``format/stream.py``'s batch size and ``format/prefetch.py``.

``batch``: the peers harness's data (``benchmarks.peers``) written by
shardcat and Lance; batches of random keys through ``Catalog.get_many`` for
each ``remote_max_gap`` (and, with ``--spans``, ``max_span``), with Lance's
``key IN (...)`` in the same run: keys/s, bytes the server sent per key, and
S3 requests per batch. The figures behind ``_ranges.REMOTE_MAX_GAP``.

    .venv/bin/python -m benchmarks.bench_s3_read stream [--shards 3] [--repeat 6]
    .venv/bin/python -m benchmarks.bench_s3_read batch [--scale 0.2] [--gaps 64KiB,1MiB] [--no-lance]
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.peers.s3 import MotoS3, bytes_sent

from shardcat._units import parse_size

_requests = [0]


def _count_requests() -> None:
    import s3fs

    call = s3fs.S3FileSystem._call_s3

    async def counted(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        _requests[0] += 1
        return await call(self, method, *args, **kwargs)

    s3fs.S3FileSystem._call_s3 = counted  # type: ignore[method-assign]


class _GcClock:
    """Wall time spent in cyclic GC collections (any thread), and full collections."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._t0 = 0.0
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.full += info["generation"] == 2

    def reset(self) -> None:
        self.seconds, self.full = 0.0, 0


def stream(args: argparse.Namespace) -> None:
    import fsspec

    import shardcat

    server = MotoS3()
    opts = server.store().storage_options
    fs = fsspec.filesystem("s3", **opts)
    rng = random.Random(0)
    blob = os.urandom(16 << 20)
    urls = []
    for s in range(args.shards):
        url = f"s3://bench/stream/{s}.shard"
        urls.append(url)
        with shardcat.ShardWriter(url, storage_options=opts) as w:
            for i in range(args.records):
                n = rng.randint(2048, 8192)
                o = rng.randint(0, len(blob) - n)
                w.add(f"img/{s}/{i:08d}", {"bin": blob[o : o + n], "json": b'{"label": 3}'})
    total = sum(fs.size(u) for u in urls)

    def raw() -> None:
        for u in urls:
            with fs.open(u, "rb", block_size=8 << 20) as f:
                while f.read(8 << 20):
                    pass

    def sc() -> None:
        for u in urls:
            touched = 0
            for rec in shardcat.ShardReader(u, storage_options=opts):
                touched += len(rec["bin"].data) + len(rec["json"].data)
            assert touched > 0

    clock = _GcClock()
    runs: dict[str, list[tuple[float, float, float]]] = {"raw": [], "shardcat": []}
    for _ in range(args.repeat):
        for name, fn in (("raw", raw), ("shardcat", sc)):
            clock.reset()
            t, c = time.perf_counter(), time.process_time()
            fn()
            runs[name].append((time.perf_counter() - t, time.process_time() - c, clock.seconds))
    server.stop()
    print(f"{args.shards} shards, {total / 1e6:.0f} MB, {args.repeat} alternations")
    for name, rows in runs.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        in_gc = statistics.median(r[2] for r in rows)
        print(f"{name:9} {total / wall / 1e6:6.0f} MB/s  cpu {cpu:.3f} s  gc {in_gc:.3f} s")
    ratio = statistics.median(
        runs["raw"][i][0] / runs["shardcat"][i][0] for i in range(args.repeat)
    )
    print(f"shardcat / raw read: {ratio:.2f} (median of per-alternation ratios)")


def batch(args: argparse.Namespace) -> None:
    from benchmarks.peers.data import Dataset
    from benchmarks.peers.shardcat_system import Shardcat

    import shardcat.storage.cache as cache

    logging.disable(logging.WARNING)
    _count_requests()
    server = MotoS3()
    store = server.store()
    ds = Dataset.scaled(args.scale)
    mine = Shardcat(store, ds)
    mine.write()
    lance: Any = None
    if not args.no_lance:
        from benchmarks.peers.lance_system import Lance

        if Lance.available() is None:
            lance = Lance(store, ds)
            lance.write()
            lance.open()
    rng = random.Random(1)
    keys = ds.keys()
    batches = [rng.sample(keys, min(args.batch, len(keys) // 2)) for _ in range(args.repeat)]
    read_sorted = cache.SourceCache.read_sorted

    def measure(fn: Callable[[list[str]], Any]) -> tuple[float, float, int]:
        secs, nbytes, nreq = [], [], []
        for b in batches:
            b0, r0, t = bytes_sent(), _requests[0], time.perf_counter()
            fn(b)
            secs.append(time.perf_counter() - t)
            nbytes.append(bytes_sent() - b0)
            nreq.append(_requests[0] - r0)
        i = secs.index(statistics.median(secs))
        return len(batches[i]) / secs[i], nbytes[i] / len(batches[i]), nreq[i]

    print(f"{ds.count:,} samples, batches of {len(batches[0]):,} keys, median of {args.repeat}")
    for _ in range(args.rounds):
        if lance is not None:
            kps, bpk, _ = measure(lance.get_many)
            print(f"lance                       {kps:7.0f} keys/s {bpk:9,.0f} B/key")
        for gap in args.gaps:
            for span in args.spans:

                def spanned(self: Any, *a: Any, _span: int = span, **k: Any) -> Any:
                    k["max_span"] = _span
                    return read_sorted(self, *a, **k)

                cache.SourceCache.read_sorted = spanned  # type: ignore[method-assign]
                mine.cat = shardcat_catalog(mine, gap)
                try:
                    kps, bpk, nreq = measure(mine.get_many)
                finally:
                    mine.cat.close()
                print(
                    f"shardcat gap {gap >> 10:5} KiB span {span >> 20:2} MiB"
                    f" {kps:7.0f} keys/s {bpk:9,.0f} B/key {nreq:5} requests"
                )
    cache.SourceCache.read_sorted = read_sorted  # type: ignore[method-assign]
    server.stop()


def shardcat_catalog(system: Any, gap: int) -> Any:
    import shardcat

    return shardcat.Catalog(
        system.catalog_url, storage_options=system.store.storage_options, remote_max_gap=gap
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("stream")
    s.add_argument("--shards", type=int, default=3)
    s.add_argument("--records", type=int, default=13_000, help="records per shard (~70 MB)")
    s.add_argument("--repeat", type=int, default=6)
    b = sub.add_parser("batch")
    b.add_argument("--scale", type=float, default=0.2)
    b.add_argument("--batch", type=int, default=1000)
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--rounds", type=int, default=2)
    b.add_argument("--gaps", default="64KiB,256KiB,1MiB,4MiB")
    b.add_argument("--spans", default="16MiB")
    b.add_argument("--no-lance", action="store_true")
    args = p.parse_args()
    if args.what == "stream":
        stream(args)
    else:
        args.gaps = [0 if g.strip() == "0" else parse_size(g.strip()) for g in args.gaps.split(",")]
        args.spans = [parse_size(x.strip()) for x in args.spans.split(",")]
        batch(args)


if __name__ == "__main__":
    main()
