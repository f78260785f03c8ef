"""Reads from S3 (moto on 127.0.0.1, ranged GETs by seek + read): streaming and batch gaps.

``stream``: shards written by ``ShardWriter`` (2-8 KiB records, ~70 MB each)
and the same records as a Lance dataset, then, alternating: a raw sequential
read of the files (s3fs ``fs.open(block_size=8 MiB)``, 8 MiB ``read()``
calls, as the peers harness's floor), the same 8 MiB ranges in one
concurrent ``cat_ranges`` call per file, ``ShardReader`` iteration per shard
(with the process's ``SHARDCAT_S3_TRANSPORT``, ``auto`` when unset) and
``shardcat.iter_shards`` over all of them with each ``--transports`` value
(touching every record's entries, as a user would), optionally the per-shard
stream with another version's read-ahead (``--before-prefetch``), and
Lance's ``to_batches``. Each row names the client that read it.
Reports the median MB/s of each, its ratio to the raw read, and the CPU
(this process's: the client alone with the moto server in its own process,
the default; with ``--moto in-process`` its threads included) and
cyclic-GC time of each pass: the figures behind ``format/stream.py``'s batch size,
``format/prefetch.py`` and ``storage/streaming.py``.

``batch``: the peers harness's data (``benchmarks.peers``) written by
shardcat and Lance; batches of random keys through ``Catalog.get_many`` for
each ``remote_max_gap`` (``auto``: derived per store, ``storage/gap.py``, with
the estimate and the gaps it chose printed; and, with ``--spans``, ``max_span``), with Lance's
``key IN (...)`` in the same run: keys/s, bytes the server sent per key, and
S3 requests per batch, beside the floor's (one query + one ``cat_ranges`` of
the exact ranges) and its ratio to it. The figures behind ``storage/gap.py``.
``--profile same-region`` (either command) puts ``benchmarks/latency_proxy.py``
between the clients and moto: first-byte latency and a bandwidth cap per connection.

    .venv/bin/python -m benchmarks.bench_s3_read stream [--shards 3] [--repeat 6] [--no-lance]
        [--moto process|in-process]  # also for batch: where the moto server runs
        [--before-prefetch FILE]   # e.g. FILE from: git show main:src/shardcat/format/prefetch.py
        [--transports auto,fsspec] # iter_shards with each SHARDCAT_S3_TRANSPORT value
    .venv/bin/python -m benchmarks.bench_s3_read batch [--scale 0.2] [--gaps auto,64KiB,1MiB] [--no-lance]
        [--no-floor] [--profile loopback|same-region|cross-region]
        [--transports fsspec,auto,obstore]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.latency_proxy import PROFILES, PROXY_MODES, peak_concurrency
from benchmarks.moto_server import MODES
from benchmarks.peers.s3 import MotoS3

from shardcat._units import parse_size


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
    from shardcat.format import stream as stream_module
    from shardcat.storage import choose_transport

    server = MotoS3(args.moto, args.profile, args.proxy)
    opts = server.store().storage_options
    fs = fsspec.filesystem("s3", **opts)
    rng = random.Random(0)
    blob = os.urandom(16 << 20)
    urls = []
    columns: dict[str, list[Any]] = {"key": [], "bin": [], "json": []}
    for s in range(args.shards):
        url = f"s3://bench/stream/{s}.shard"
        urls.append(url)
        with shardcat.ShardWriter(url, storage_options=opts) as w:
            for i in range(args.records):
                n = rng.randint(2048, 8192)
                o = rng.randint(0, len(blob) - n)
                key, payload = f"img/{s}/{i:08d}", blob[o : o + n]
                w.add(key, {"bin": payload, "json": b'{"label": 3}'})
                if not args.no_lance:
                    columns["key"].append(key)
                    columns["bin"].append(payload)
                    columns["json"].append(b'{"label": 3}')
    total = sum(fs.size(u) for u in urls)
    lance_ds = None if args.no_lance else _lance_dataset(server, columns)
    del columns

    def raw() -> None:
        for u in urls:
            with fs.open(u, "rb", block_size=8 << 20) as f:
                while f.read(8 << 20):
                    pass

    def raw_concurrent() -> None:
        # Every 8 MiB range of a file in one cat_ranges call (all in flight at once).
        for u in urls:
            size = fs.size(u)
            starts = list(range(0, size, 8 << 20))
            fs.cat_ranges([u] * len(starts), starts, [min(a + (8 << 20), size) for a in starts])

    def touch(records: Any) -> None:
        touched = 0
        for rec in records:
            touched += len(rec["bin"].data) + len(rec["json"].data)
        assert touched > 0

    def before() -> None:
        # The per-shard stream with another version's read-ahead (``--before-prefetch``).
        real = stream_module.ReadAhead
        stream_module.ReadAhead = before_read_ahead  # type: ignore[misc]
        try:
            per_shard()
        finally:
            stream_module.ReadAhead = real  # type: ignore[misc]

    def per_shard() -> None:
        for u in urls:
            with shardcat.ShardReader(u, storage_options=opts) as reader:
                touch(reader)

    def ahead() -> None:
        touch(shardcat.iter_shards(urls, storage_options=opts))

    def ahead_with(transport: str) -> Callable[[], None]:
        def run() -> None:
            with _transport(transport):
                ahead()

        return run

    def used(transport: str | None) -> str:
        with _transport(transport):
            return choose_transport(urls[0], opts).transport

    def lance() -> None:
        touched = 0
        for b in lance_ds.to_batches(columns=["key", "bin", "json"]):
            for p, j in zip(b.column(1).to_pylist(), b.column(2).to_pylist()):
                touched += len(p) + len(j)
        assert touched > 0

    passes: list[tuple[str, Callable[[], None]]] = [
        ("raw", raw),
        ("raw concurrent", raw_concurrent),
        (f"shardcat ({used(None)})", per_shard),
    ]
    passes += [(f"iter_shards {t} ({used(t)})", ahead_with(t)) for t in args.transports]
    before_read_ahead: Any = None
    if args.before_prefetch:
        before_read_ahead = _load_prefetch(args.before_prefetch).ReadAhead
        passes.insert(2, ("shardcat before", before))
    if lance_ds is not None:
        passes.append(("lance", lance))
    clock = _GcClock()
    runs: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in passes}
    for _ in range(args.repeat):
        for name, fn in passes:
            clock.reset()
            t, c = time.perf_counter(), time.process_time()
            fn()
            runs[name].append((time.perf_counter() - t, time.process_time() - c, clock.seconds))
    server.stop()
    print(
        f"{args.shards} shards, {total / 1e6:.0f} MB, {args.repeat} alternations,"
        f" load {os.getloadavg()[0]:.1f}"
    )
    print(
        "(CPU: this process's"
        + (", the moto server's threads included" if args.moto == "in-process" else "")
        + "; (client): who read)"
    )
    for name, rows in runs.items():
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        in_gc = statistics.median(r[2] for r in rows)
        ratio = statistics.median(runs["raw"][i][0] / rows[i][0] for i in range(args.repeat))
        vs_lance = ""
        if "lance" in runs:
            lance_ratio = statistics.median(
                runs["lance"][i][0] / rows[i][0] for i in range(args.repeat)
            )
            vs_lance = f"  {lance_ratio:5.2f} x lance"
        print(
            f"{name:30} {total / wall / 1e6:6.0f} MB/s  {ratio:5.2f} x raw{vs_lance}"
            f"  cpu {cpu:.3f} s  gc {in_gc:.3f} s"
        )
    print("x raw, x lance: medians of per-alternation ratios of wall times")


def _transport(value: str | None) -> contextlib.AbstractContextManager[Any]:
    """The ``s3_transport`` setting (``SHARDCAT_S3_TRANSPORT``) set to ``value`` inside the block
    (None: as it is)."""
    import shardcat.config

    return contextlib.nullcontext() if value is None else shardcat.config.set(s3_transport=value)


def _load_prefetch(path: str) -> Any:
    """Another version of ``shardcat/format/prefetch.py`` (``git show REV:src/...``), as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("shardcat.format._before_prefetch", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _lance_dataset(server: MotoS3, columns: dict[str, list[Any]]) -> Any:
    """The same records as a Lance dataset on the same server (as the peers harness writes it)."""
    import lance
    import pyarrow as pa
    from benchmarks.peers.base import SHARD_BYTES

    options = {
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_endpoint": server.endpoint,
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    table = pa.table(columns)
    lance.write_dataset(
        table, "s3://bench/stream.lance", max_bytes_per_file=SHARD_BYTES, storage_options=options
    )
    return lance.dataset("s3://bench/stream.lance", storage_options=options)


def batch(args: argparse.Namespace) -> None:
    from benchmarks.peers.data import Dataset
    from benchmarks.peers.shardcat_system import Shardcat

    import shardcat.storage.cache as cache

    logging.disable(logging.WARNING)
    server = MotoS3(args.moto, args.profile, args.proxy)
    store = server.store()
    ds = Dataset.scaled(args.scale)
    mine = Shardcat(store, ds)
    mine.write()
    floor: Any = None
    if not args.no_floor:
        from benchmarks.peers.floor import Floor

        floor = Floor(store, ds)
        floor.write()
        floor.open()
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
    # The gaps each batch merged with (the rule's choice where the gap is auto).
    used: list[int] = []
    merge_sorted = cache.merge_sorted

    def seen(file: Any, start: Any, end: Any, gaps: Any, *a: Any, **k: Any) -> Any:
        used.append(int(gaps.max()) if len(gaps) else 0)
        return merge_sorted(file, start, end, gaps, *a, **k)

    cache.merge_sorted = seen  # type: ignore[assignment]

    peaks: list[int] = []  # the median batch's most requests in flight at once (the proxy's)

    def measure(fn: Callable[[list[str]], Any]) -> tuple[float, float, int]:
        secs, nbytes, nreq, peak = [], [], [], []
        for b in batches:
            b0, r0, t = server.bytes_sent(), server.gets(), time.perf_counter()
            since = time.monotonic()
            fn(b)
            secs.append(time.perf_counter() - t)
            nbytes.append(server.bytes_sent() - b0)
            nreq.append(server.gets() - r0)  # GETs the server answered: every client's
            if server.proxy is not None:
                peak.append(peak_concurrency(server.proxy.responses(since)))
        i = secs.index(statistics.median(secs))
        peaks[:] = peak[i : i + 1]
        return len(batches[i]) / secs[i], nbytes[i] / len(batches[i]), nreq[i]

    def in_flight() -> str:
        return f" {peaks[0]:3} at once" if peaks else ""

    where = "moto directly" if server.proxy is None else server.proxy.profile.describe()
    print(
        f"{ds.count:,} samples, batches of {len(batches[0]):,} keys, median of {args.repeat};"
        f" S3: {where}; load {os.getloadavg()[0]:.1f}"
        + (f"; proxy {args.proxy}" if server.proxy is not None else "")
    )
    for _ in range(args.rounds):
        base: tuple[float, float] | None = None
        lance_kps: float | None = None
        if floor is not None:
            kps, bpk, nreq = measure(floor.get_many)
            base = kps, bpk
            print(
                f"floor (cat_ranges)                     {kps:7.0f} keys/s {bpk:9,.0f} B/key"
                f" {nreq:5} requests{in_flight()}"
            )
        if lance is not None:
            kps, bpk, nreq = measure(lance.get_many)
            lance_kps = kps
            print(
                f"lance                                  {kps:7.0f} keys/s {bpk:9,.0f} B/key"
                f" {nreq:5} requests{in_flight()}"
            )
        for transport in args.transports:
            for gap in args.gaps:
                for span in args.spans:

                    def spanned(self: Any, *a: Any, _span: int = span, **k: Any) -> Any:
                        k["max_span"] = _span
                        return read_sorted(self, *a, **k)

                    cache.SourceCache.read_sorted = spanned  # type: ignore[method-assign]
                    used.clear()
                    with _transport(transport):
                        mine.cat = shardcat_catalog(mine, gap)
                        try:
                            kps, bpk, nreq = measure(mine.get_many)
                            chosen = "" if gap is not None else _chosen(mine, used)
                        finally:
                            mine.cat.close()
                    shown = f"{nreq:5}"
                    vs = "" if base is None else f"  {kps / base[0]:5.2f} x floor keys/s"
                    vs += "" if base is None else f" {bpk / base[1]:6.1f} x floor B/key"
                    vs += "" if lance_kps is None else f"  {kps / lance_kps:5.2f} x lance"
                    shown_gap = "auto     " if gap is None else f"{gap >> 10:5} KiB"
                    print(
                        f"shardcat {transport:7} gap {shown_gap} span {span >> 20:2} MiB"
                        f" {kps:7.0f} keys/s {bpk:9,.0f} B/key {shown} requests{in_flight()}{vs}"
                    )
                    if chosen:
                        print(f"    {chosen}")
    cache.SourceCache.read_sorted = read_sorted  # type: ignore[method-assign]
    if floor is not None:
        floor.close()
    server.stop()


def _chosen(system: Any, used: list[int]) -> str:
    """What the derived gap's rule saw and chose (storage/gap.py), for one line of output."""
    from shardcat.storage import gap, open_source

    shard = system.cat.shards("train")[0].url
    source = open_source(shard, system.store.storage_options)
    e = gap.estimate(source.store_key)
    derived = gap.derived_gap(e.latency, e.bandwidth, source.in_flight)
    return (
        f"rule: L {e.latency * 1e3:.1f} ms, B {e.bandwidth / 1e6:.0f} MB/s"
        f" ({e.bandwidth_samples} of {e.samples} calls measured it), C {source.in_flight}"
        f" -> {derived >> 10} KiB; merged with (read budget applied) "
        + ", ".join(f"{g >> 10} KiB" for g in used)
    )


def shardcat_catalog(system: Any, gap: int | None) -> Any:
    import shardcat

    return shardcat.Catalog(
        system.catalog_url, storage_options=system.store.storage_options, remote_max_gap=gap
    )


def _gap_arg(text: str) -> int | None:
    """A ``--gaps`` value: a size, 0, or ``auto`` (None: the gap derived per store)."""
    if text == "auto":
        return None
    return 0 if text == "0" else parse_size(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("stream")
    s.add_argument("--shards", type=int, default=3)
    s.add_argument("--records", type=int, default=13_000, help="records per shard (~70 MB)")
    s.add_argument("--repeat", type=int, default=6)
    s.add_argument("--no-lance", action="store_true")
    s.add_argument(
        "--transports",
        default="auto,fsspec",
        help="iter_shards with each SHARDCAT_S3_TRANSPORT value: auto,fsspec,obstore",
    )
    s.add_argument("--obstore", action="store_true", help="also iter_shards with obstore forced")
    s.add_argument(
        "--before-prefetch",
        metavar="FILE",
        help="a prefetch.py of another version, streamed per shard as 'shardcat before'",
    )
    b = sub.add_parser("batch")
    b.add_argument("--scale", type=float, default=0.2)
    b.add_argument("--batch", type=int, default=1000)
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--rounds", type=int, default=2)
    b.add_argument(
        "--gaps", default="auto,64KiB,256KiB,1MiB", help="sizes, or auto: the derived gap"
    )
    b.add_argument("--spans", default="16MiB")
    b.add_argument("--no-lance", action="store_true")
    b.add_argument("--no-floor", action="store_true", help="skip the floor (one cat_ranges)")
    b.add_argument(
        "--transports", default="fsspec", help="SHARDCAT_S3_TRANSPORT values: fsspec,auto,obstore"
    )
    for each in (s, b):
        each.add_argument(
            "--moto", choices=MODES, default="process", help="the moto server's process"
        )
        each.add_argument(
            "--profile",
            choices=list(PROFILES),
            default=None,
            help="reach moto through benchmarks/latency_proxy.py with this profile (default:"
            " directly)",
        )
        each.add_argument(
            "--proxy",
            choices=PROXY_MODES,
            default="process",
            help="where the latency proxy runs (its own process: not sharing this one's GIL)",
        )
    args = p.parse_args()
    if args.what == "stream":
        args.transports = [t.strip() for t in args.transports.split(",") if t.strip()]
        if args.obstore and "obstore" not in args.transports:
            args.transports.append("obstore")
        stream(args)
    else:
        args.gaps = [_gap_arg(g.strip()) for g in args.gaps.split(",")]
        args.spans = [parse_size(x.strip()) for x in args.spans.split(",")]
        args.transports = [t.strip() for t in args.transports.split(",")]
        batch(args)


if __name__ == "__main__":
    main()
