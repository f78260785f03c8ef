"""Run every system on the same data and measure it; write docs/BENCHMARKS.md and its plots.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.peers [--scale 1.0] [--backends local,s3]
                                         [--systems floor,shardcat,lance,...] [--out docs]
                                         [--moto process|in-process]
                                         [--profiles direct,loopback,same-region,cross-region]

``--scale 0.05`` writes 10,000 samples instead of 200,000 (a quick run).
``--profiles`` runs the S3 backend once per profile, each on a fresh moto
server (every system writes again): ``direct`` reaches moto with nothing in
between (the backend ``s3``), any other name goes through
``benchmarks/latency_proxy.py`` with that profile (the backend ``s3 NAME``),
so the report shows loopback and cloud-latency rows side by side, each
system's ratios taken to the floor of the same backend.
Every value a system returns is checked byte for byte against the source
sample; a mismatch stops the run (``MismatchError``). Nothing here is a test.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import pickle
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from benchmarks.latency_proxy import (
    PROFILES,
    PROXY_MODES,
    LatencyProxy,
    ProxyProcess,
    peak_concurrency,
)
from benchmarks.moto_server import MODES
from benchmarks.peers.base import Store, System
from benchmarks.peers.data import Dataset, MismatchError
from benchmarks.peers.floor import Floor
from benchmarks.peers.lance_system import Lance
from benchmarks.peers.litdata_system import LitData
from benchmarks.peers.mds_system import MosaicStreaming
from benchmarks.peers.s3 import DIRECT
from benchmarks.peers.shardcat_system import Shardcat
from benchmarks.peers.wds_system import WebDataset

SYSTEMS: list[type[System]] = [Floor, Shardcat, Lance, MosaicStreaming, WebDataset, LitData]
BULK = 64 << 10
"""A streaming response this large or larger counts as one streaming connection: it outlasts
the proxy's burst (``latency_proxy.BURST``), so the bandwidth cap, not the latency, paces it."""
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
log = logging.getLogger("benchmarks.peers")


@dataclass
class Result:
    """What one system measured on one backend (absent measures stay None)."""

    system: str
    backend: str
    write_mbps: float | None = None
    registration_kps: float | None = None
    point_ms: list[float] = field(default_factory=list)
    point_bytes: float | None = None  # median bytes fetched per lookup
    batch_kps: float | None = None
    batch_bytes_per_key: float | None = None
    cold_ms: float | None = None
    stream_mbps: float | None = None
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    mmap_reads: bool = False  # its local bytes fetched cannot be counted
    catalog_small_ms: float | None = None  # point p50 with --catalog-small keys (bigcatalog)
    catalog_large_ms: float | None = None  # point p50 with --catalog-keys keys
    # The floor on S3: its ranged GET of the record alone, timed apart from its SQL query.
    ranged_get_ms: list[float] = field(default_factory=list)
    batch_requests: float | None = None  # median requests per batch (through the latency proxy)
    # Streaming through the latency proxy: the most responses of >= BULK bytes in flight at
    # once, their mean number in flight over the stream, and the line rate the profile's
    # per-connection bandwidth gives that peak (None: unlimited, or no proxy).
    stream_connections: int | None = None
    stream_mean_connections: float | None = None
    stream_line_mbps: float | None = None
    # Keys per CPU-second (time.process_time: every thread of this process; moto and the proxy
    # run in processes of their own): what the work cost, apart from the machine's load.
    registration_cpu_kps: float | None = None
    batch_cpu_kps: float | None = None  # of the median (by CPU time) batch
    batch_faults: float | None = None  # median minor page faults of this process per batch


def fetched_counter(store: Store) -> Callable[[], int]:
    """Bytes fetched so far: the moto server's GET bodies (S3), or this process's read syscalls.

    Locally that is ``rchar`` of ``/proc/self/io`` (every thread's read/pread
    bytes, page cache hits included); reads through ``mmap`` are not counted.
    """
    if store.kind == "s3":
        from benchmarks.peers.s3 import bytes_sent

        return bytes_sent

    def rchar() -> int:
        with open("/proc/self/io", "rb") as f:
            for line in f:
                if line.startswith(b"rchar:"):
                    return int(line.split()[1])
        return 0

    return rchar


def prepare(
    cls: type[System], store: Store, ds: Dataset, args: argparse.Namespace, rng: random.Random
) -> tuple[System, Result]:
    """Write (timed), take the cold lookup, open and warm the system up."""
    res = Result(cls.name, store.backend, mmap_reads=cls.mmap_reads and store.kind == "local")
    system = cls(store, ds)
    t = time.perf_counter()
    system.write()
    res.write_mbps = ds.nbytes / (time.perf_counter() - t) / 1e6
    system.after_write()
    if system.registration_seconds:
        res.registration_kps = ds.count / system.registration_seconds
    if system.registration_cpu_seconds:
        res.registration_cpu_kps = ds.count / system.registration_cpu_seconds
    log.info("%s/%s: written at %.0f MB/s", store.backend, cls.name, res.write_mbps)
    if args.cold:
        res.cold_ms = cold_lookup(system, rng.choice(ds.keys()), store)
    system.open()
    for key in rng.sample(ds.keys(), min(50, ds.count)):  # connections, handles, caches
        p, lab = system.get(key)
        ds.check(key, p, lab)
    return system, res


def point_lookups(
    opened: list[tuple[System, Result]], store: Store, ds: Dataset, points: list[str]
) -> None:
    """The same keys for every system, interleaved (who goes first rotates), so load drift hits all alike."""
    fetched = fetched_counter(store)
    c0 = fetched()
    overhead = fetched() - c0  # what reading the counter itself adds (the read of /proc/self/io)
    got: dict[str, list[int]] = {res.system: [] for _, res in opened}
    clock = time.perf_counter_ns
    for n, key in enumerate(points):
        for k in range(len(opened)):
            system, res = opened[(n + k) % len(opened)]
            b0 = fetched()
            t0 = clock()
            p, lab = system.get(key)
            dt = clock() - t0
            got[res.system].append(fetched() - b0 - overhead)
            res.point_ms.append(dt / 1e6)
            ds.check(key, p, lab)
            if isinstance(system, Floor) and store.kind == "s3":
                # One ranged GET of the record and nothing else (its location found untimed).
                where = system.locate(key)
                t0 = clock()
                p, lab = system.read(*where)
                res.ranged_get_ms.append((clock() - t0) / 1e6)
                ds.check(key, p, lab)
    for _, res in opened:
        if not res.mmap_reads:
            res.point_bytes = float(np.median(got[res.system]))
        log.info("%s/%s: point p50 %.3f ms", store.backend, res.system, np.median(res.point_ms))


def batch_lookups(
    opened: list[tuple[System, Result]],
    store: Store,
    ds: Dataset,
    args: argparse.Namespace,
    proxy: LatencyProxy | ProxyProcess | None = None,
) -> None:
    """The same batches for every system, interleaved as point lookups are (who goes first rotates).

    On a shared machine the load drifts over seconds: a system whose batches
    all ran in one slow stretch would look slower than it is, so each batch
    is handed to every system back to back and each keeps the median.
    """
    rng = random.Random(args.seed + 1)
    fetched = fetched_counter(store)
    c0 = fetched()
    overhead = fetched() - c0
    keys = ds.keys()
    size = min(args.batch if store.kind == "local" else args.s3_batch, len(keys) // 2)
    secs: dict[str, list[float]] = {res.system: [] for _, res in opened}
    cpu: dict[str, list[float]] = {res.system: [] for _, res in opened}
    faults: dict[str, list[int]] = {res.system: [] for _, res in opened}
    nbytes: dict[str, list[int]] = {res.system: [] for _, res in opened}
    requests: dict[str, list[int]] = {res.system: [] for _, res in opened}
    for n in range(args.batch_repeats):
        batch = rng.sample(keys, size)
        for k in range(len(opened)):
            system, res = opened[(n + k) % len(opened)]
            # Untimed: one process holds every system (~400,000 objects the cyclic GC
            # tracks with all peers loaded), where a full collection costs 200-270 ms,
            # more than a batch. Whoever's allocation tips the collector into one
            # would pay for every system's objects; each batch starts collected.
            gc.collect()
            r0 = proxy.snapshot().requests if proxy is not None else 0
            b0 = fetched()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0, cpu0 = time.perf_counter(), time.process_time()
            pairs = system.get_many(batch)
            secs[res.system].append(time.perf_counter() - t0)
            cpu[res.system].append(time.process_time() - cpu0)
            faults[res.system].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            nbytes[res.system].append(fetched() - b0 - overhead)
            if proxy is not None:
                requests[res.system].append(proxy.snapshot().requests - r0)
            if len(pairs) != len(batch):
                raise MismatchError(f"{res.system}: {len(pairs)} results for {len(batch)} keys")
            for key, (p, lab) in zip(batch, pairs):
                ds.check(key, p, lab)
            del pairs  # the next system's batch runs without this one's results alive
    for _, res in opened:
        res.batch_kps = size / float(np.median(secs[res.system]))
        res.batch_cpu_kps = size / float(np.median(cpu[res.system]))
        res.batch_faults = float(np.median(faults[res.system]))
        if not res.mmap_reads:
            res.batch_bytes_per_key = float(np.median(nbytes[res.system])) / size
        if requests[res.system]:
            res.batch_requests = float(np.median(requests[res.system]))
        log.info(
            "%s/%s: batch %.0f keys/s (ms: %s)",
            store.backend,
            res.system,
            res.batch_kps,
            ", ".join(f"{x * 1e3:.0f}" for x in secs[res.system]),
        )


def stream_and_close(
    system: System, res: Result, ds: Dataset, proxy: LatencyProxy | ProxyProcess | None = None
) -> None:
    """The full streaming read, every sample checked; closes the system.

    Through the latency proxy it also counts the connections the read kept
    busy: the most responses of ``BULK`` bytes or more in flight at once. The
    profile's line rate for this system is that many connections at the
    profile's bandwidth each: what the network would give the read as it
    issued its requests.
    """
    try:
        seen = 0
        since = time.monotonic()
        t0 = time.perf_counter()
        for key, p, lab in system.stream():
            ds.check(key, p, lab)  # in the timed loop for every system alike (a memcmp each)
            seen += 1
        dt = time.perf_counter() - t0
        if seen != ds.count:
            raise MismatchError(f"{res.system}: streamed {seen} samples of {ds.count}")
        res.stream_mbps = ds.nbytes / dt / 1e6
        if proxy is not None:
            bulk = [r for r in proxy.responses(since) if r.nbytes >= BULK]
            res.stream_connections = peak_concurrency(bulk)
            res.stream_mean_connections = sum(r.end - r.start for r in bulk) / dt
            rate = proxy.profile.bandwidth
            if rate is not None and res.stream_connections:
                res.stream_line_mbps = rate * res.stream_connections / 1e6
    finally:
        system.close()
    res.notes = system.notes


def measure(
    cls: type[System], store: Store, ds: Dataset, args: argparse.Namespace, rng: random.Random
) -> Result:
    """Every measure of one system on its own (the runner interleaves point lookups instead)."""
    system, res = prepare(cls, store, ds, args, rng)
    try:
        point_lookups(
            [(system, res)],
            store,
            ds,
            rng.sample(ds.keys(), min(ds.count, args.points[store.kind])),
        )
        batch_lookups([(system, res)], store, ds, args)
    except BaseException:
        system.close()
        raise
    stream_and_close(system, res, ds)
    return res


def cold_lookup(system: System, key: str, store: Store) -> float:
    """Import + open + first lookup in a fresh interpreter (the page cache stays warm)."""
    path = os.path.join(store.scratch, f"{system.name}.pickle")
    with open(path, "wb") as f:
        pickle.dump(system, f)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers.cold", path, key],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"cold lookup by {system.name} failed: {out.stderr[-2000:]}")
    import json

    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms"])


def standin_limits(
    server: Any, store: Store, opened: list[tuple[System, Result]], seconds: float
) -> dict[str, Any]:
    """What this backend's stand-in (moto, and the proxy if any) serves, measured now (``standin``).

    Large GETs through the proxy run as many at once as shardcat's streaming
    kept busy at its peak (``standin.STREAMS`` if it did not stream here).
    """
    from benchmarks.peers import standin

    peak = next((r.stream_connections for _, r in opened if r.system == "shardcat"), None)
    limits = standin.measure(
        server.server, server.proxy, store.fs(), seconds, peak or standin.STREAMS
    )
    log.info("%s/stand-in: %s", store.backend, limits.describe())
    return limits.as_dict()


def run(args: argparse.Namespace) -> tuple[list[Result], dict[str, Any]]:
    ds = Dataset.scaled(args.scale, args.seed)
    results: list[Result] = []
    chosen = [c for c in SYSTEMS if c.name in args.systems]
    started = {
        "load_start": os.getloadavg(),
        "time_start": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    # One run per S3 profile, each on a server of its own: every S3 row exists once per profile.
    runs = [(b, p) for b in args.backends for p in (args.profiles if b == "s3" else [None])]
    for kind, prof in runs:
        server = None
        if kind == "s3":
            from benchmarks.peers.s3 import MotoS3

            server = MotoS3(args.moto, prof, args.proxy)
            store = server.store()
        else:
            store = Store("local", tempfile.mkdtemp(prefix="shardcat-peers-data-"))
        backend = store.backend
        proxy = server.proxy if server is not None else None
        try:
            opened: list[tuple[System, Result]] = []
            try:
                for cls in chosen:
                    rng = random.Random(args.seed)  # the same keys for every system
                    if kind not in cls.backends:
                        results.append(
                            Result(cls.name, backend, skipped="local disk only (see its notes)")
                        )
                        continue
                    why = cls.available()
                    if why is not None:
                        log.warning("%s skipped: %s", cls.name, why)
                        results.append(Result(cls.name, backend, skipped=why))
                        continue
                    opened.append(prepare(cls, store, ds, args, rng))
                    results.append(opened[-1][1])
                rng = random.Random(args.seed)
                points = rng.sample(ds.keys(), min(ds.count, args.points[kind]))
                point_lookups(opened, store, ds, points)
                batch_lookups(opened, store, ds, args, proxy)
            except BaseException:
                for system, _ in opened:
                    system.close()
                raise
            for at, (system, res) in enumerate(opened):
                try:
                    stream_and_close(system, res, ds, proxy)
                except BaseException:
                    for later, _ in opened[at + 1 :]:
                        later.close()
                    raise
            if server is not None and args.standin_seconds > 0:
                started.setdefault("standin", {})[backend] = standin_limits(
                    server, store, opened, args.standin_seconds
                )
        finally:
            store.cleanup()
            if kind == "local":
                import shutil

                shutil.rmtree(store.base, ignore_errors=True)
            if server is not None:
                server.stop()
    if args.catalog_keys:
        from benchmarks.peers.bigcatalog import compare

        scratch = tempfile.mkdtemp(prefix="shardcat-peers-catalog-")
        try:
            big = compare(
                scratch, args.catalog_small, args.catalog_keys, args.points["local"], args.seed
            )
        finally:
            import shutil

            shutil.rmtree(scratch, ignore_errors=True)
        started["catalog"] = {"small": big["small_keys"], "large": big["large_keys"]}
        for r in results:
            if r.backend == "local" and r.system in ("shardcat", "floor") and not r.skipped:
                at = 0 if r.system == "shardcat" else 1
                r.catalog_small_ms, r.catalog_large_ms = big["small"][at], big["large"][at]
    started["load_end"] = os.getloadavg()
    versions: dict[str, str] = {}
    for cls in chosen:
        versions.update(cls.versions())
    git = subprocess.run(
        ["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    run_info = {
        **started,
        "commit": git.stdout.strip() or "unknown",
        "samples": ds.count,
        "cores": os.cpu_count(),
        "nbytes": ds.nbytes,
        "scale": args.scale,
        "versions": versions,
        "points": args.points,
        "batch": min(args.batch, ds.count // 2),
        "s3_batch": min(args.s3_batch, ds.count // 2),
        "batch_repeats": args.batch_repeats,
        "moto": args.moto if "s3" in args.backends else None,
        "profiles": args.profiles if "s3" in args.backends else [],
        "proxy": args.proxy if "s3" in args.backends else None,
        "docs": {
            c.name: (c.__module__, (sys.modules[c.__module__].__doc__ or "").strip())
            for c in chosen
        },
    }
    return results, run_info


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of 200,000 samples")
    parser.add_argument("--backends", default="local,s3")
    parser.add_argument("--systems", default=",".join(c.name for c in SYSTEMS))
    parser.add_argument("--points", type=int, default=2000, help="point lookups (S3: a tenth)")
    parser.add_argument("--batch", type=int, default=10_000, help="keys per batch lookup")
    parser.add_argument(
        "--s3-batch",
        type=int,
        default=1000,
        help="keys per batch lookup on S3 (the naive floor issues one GET per key)",
    )
    parser.add_argument("--batch-repeats", type=int, default=5)
    parser.add_argument("--no-cold", dest="cold", action="store_false")
    parser.add_argument(
        "--standin-seconds",
        type=float,
        default=1.5,
        help="S3: seconds per measure of the stand-in's own limits (moto's small GETs/s, the"
        " proxy's MB/s; benchmarks/peers/standin.py), after each S3 backend; 0 skips them",
    )
    parser.add_argument(
        "--catalog-keys",
        type=int,
        default=0,
        help="also compare point lookups in a catalog of this many keys (e.g. 10000000) with one"
        " of --catalog-small keys (shardcat and the floor, local; long)",
    )
    parser.add_argument("--catalog-small", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--moto",
        choices=MODES,
        default="process",
        help="S3: run the moto server in its own process (default: its Python code does not share"
        " the client's GIL, as with a real S3) or in this one (as before, to compare)",
    )
    parser.add_argument(
        "--proxy",
        choices=PROXY_MODES,
        default="process",
        help="S3 through a profile: run the latency proxy in its own process (default: its"
        " pacing does not share the client's GIL) or on a thread of this one",
    )
    parser.add_argument(
        "--profiles",
        default=DIRECT,
        help="S3: comma-separated, one S3 backend each, side by side in the report: 'direct'"
        " (moto with nothing in between: the backend 's3') or a profile of"
        f" benchmarks/latency_proxy.py ({', '.join(PROFILES)}: first-byte latency and a"
        " bandwidth cap per connection; the backend 's3 NAME'). Default: direct",
    )
    parser.add_argument(
        "--profile",
        choices=list(PROFILES),
        default=None,
        help="S3: one profile alone, as --profiles NAME (kept for older commands)",
    )
    parser.add_argument(
        "--out", default=os.path.join(REPO, "docs"), help="where BENCHMARKS.md goes"
    )
    args = parser.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    args.profiles = [args.profile] if args.profile else [p for p in args.profiles.split(",") if p]
    unknown = [p for p in args.profiles if p != DIRECT and p not in PROFILES]
    if unknown or not args.profiles or len(set(args.profiles)) != len(args.profiles):
        parser.error(
            f"--profiles {','.join(args.profiles)}: expected distinct names among"
            f" {DIRECT}, {', '.join(PROFILES)}"
        )
    args.systems = [s for s in args.systems.split(",") if s]
    args.points = {"local": args.points, "s3": max(20, args.points // 10)}
    args.argv = argv if argv is not None else sys.argv[1:]
    return args


def main(argv: list[str] | None = None) -> None:
    from benchmarks.peers.report import write_report

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    args = parse(argv)
    results, info = run(args)
    path = write_report(results, info, args)
    log.info("wrote %s", path)
