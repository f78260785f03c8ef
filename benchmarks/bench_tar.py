"""Tar scanning speed, as a ratio to a plain sequential read of the same bytes.

Writes a WebDataset tar of ~256 MiB of 2-8 KiB samples (``jpg`` + ``cls``
each; with webdataset's own TarWriter when it is installed, so every member
has the pax header it writes, else with tarfile in GNU format), then
alternates: a plain read of the file in 8 MiB chunks (``readinto`` one
buffer, nothing else) and ``scan_tar`` of the same file (every header parsed
and checksum-verified, a CRC32C of every payload, samples grouped, the
summary's arrays built). The file is in the page cache for both. Target
(issue 11): scan ≥ 0.8 × the plain read.

    .venv/bin/python benchmarks/bench_tar.py [--scale 1.0 | --size 1GiB] [--repeat 5]
        [--writer wds|gnu] [--walker both|compiled|python] [--json]

``--scale`` multiplies the 256 MiB (``--scale 0.25``: 64 MiB); ``--size``
sets the tar file's size instead (``--size 1GiB``: a 1 GiB tar). Each scan
runs under the tar walkers ``--walker`` names (``both``: the compiled one
and the Python reference, interleaved with the plain reads). Ratios are
given in wall-clock time and in CPU time (``time.process_time``), which a
loaded machine disturbs less.

``--lookups N`` (default 2000; 0 skips it) then measures point lookups by
key, p50 over N random keys, in one SQLite catalog on local disk:

* ``tar``: ``Catalog.get`` on the tar registered in place (one query, one
  ranged read of the sample, every payload's CRC32C checked);
* ``native``: ``Catalog.get`` of the same samples written as a native shard;
* ``floor`` (per dataset): a raw ``sqlite3`` query on the same index plus a
  raw ``fs.cat_file(path, start=, end=)`` of the same bytes, as in
  ``bench_catalog.py``.

Each is reported with its ratio to its floor (target, issue 11: the tar
ratio equal to the native one). Calls alternate, so neither always finds
the other's warm cache.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sqlite3
import statistics
import sys
import tarfile
import tempfile
import time

import numpy as np

from shardcat.format.tar import scan_tar

FLOOR_POINT_SQL = (
    "SELECT s.url, r.byte_offset, r.byte_length FROM records r JOIN shards s ON s.id = r.shard_id "
    "WHERE r.dataset_id = ? AND r.key_hash = ? AND r.key = ?"
)

CHUNK = 8 << 20


def write_tar(
    path: str, total: int, writer: str, seed: int = 0, *, file_bytes: bool = False
) -> tuple[int, int]:
    """A tar of samples of 2-8 KiB in all; returns (samples, members).

    ``total`` bytes of sample payload, or (``file_bytes``) of tar file.
    """
    rng = np.random.default_rng(seed)
    blob = rng.integers(0, 256, size=16 << 20, dtype=np.uint8).tobytes()
    samples = 0
    size = 0
    if writer == "wds":
        import webdataset as wds

        sink = wds.TarWriter(path)
        add = sink.write
    else:
        tar = tarfile.open(path, "w", format=tarfile.GNU_FORMAT)  # noqa: SIM115 - closed below

        def add(sample: dict[str, object]) -> None:
            for name, value in sample.items():
                if name == "__key__":
                    continue
                data = value if isinstance(value, bytes) else str(value).encode()
                info = tarfile.TarInfo(f"{sample['__key__']}.{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

    try:
        while size < total:
            n = int(rng.integers(2048, 8193)) - 2
            start = int(rng.integers(0, len(blob) - n))
            add({"__key__": f"train/{samples:09d}", "jpg": blob[start : start + n], "cls": "7"})
            samples += 1
            if file_bytes:
                # Headers (a pax header and its block per member for webdataset) and padding.
                per_member = 512 * (3 if writer == "wds" else 1)
                size += 2 * per_member + -(-n // 512) * 512 + 512
            else:
                size += n + 2
    finally:
        if writer == "wds":
            sink.close()
        else:
            tar.close()
    return samples, 2 * samples


def plain_read(path: str) -> int:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            total += n
    return total


def bench_lookups(
    tmp: str, path: str, info, count: int, seed: int = 0, s3: tuple[str, dict] | None = None
) -> dict[str, float]:
    """p50 (ms) of tar lookups, native lookups and each one's floor, on one SQLite catalog.

    With ``s3 = (root URL, storage options)`` both files are uploaded there first.
    """
    import random

    import shardcat
    from shardcat.format.checksums import signed_key_hash
    from shardcat.reading import Catalog
    from shardcat.reading.checks import scan_tar_url
    from shardcat.storage import resolve
    from shardcat.storage.shards import ShardReader

    opts = s3[1] if s3 else None
    db = os.path.join(tmp, "catalog.db")
    if os.path.exists(db):
        os.remove(db)
    native = os.path.join(tmp, "native-000000.shard")
    with open(path, "rb") as f:
        data = f.read()
    with shardcat.ShardWriter(native, shard_number=0) as w:
        for sample in info.samples():
            w.add(
                sample.key,
                {
                    e.name: data[e.payload_offset : e.payload_offset + e.size]
                    for e in sample.entries
                },
            )
    del data
    native_info = w.close()
    if s3 is not None:
        fs, root = resolve(s3[0], opts)
        upload(fs, path, f"{root}/bench.tar")
        upload(fs, native, f"{root}/native-000000.shard")
        info = scan_tar_url(f"{s3[0]}/bench.tar", opts)
        with ShardReader(f"{s3[0]}/native-000000.shard", storage_options=opts) as r:
            native_info = r.info
    rng = random.Random(seed)
    keys = rng.sample(info.keys, min(count, len(info.keys)))
    hashes = {k: signed_key_hash(k.encode()) for k in keys}
    conn = sqlite3.connect(db)
    fs_cache: dict[str, tuple[object, str]] = {}

    def floor(ds_id: int, key: str) -> bytes:
        url, offset, length = conn.execute(FLOOR_POINT_SQL, (ds_id, hashes[key], key)).fetchone()
        fs, p = fs_cache.get(url) or fs_cache.setdefault(url, resolve(url, opts))
        return bytes(fs.cat_file(p, start=offset, end=offset + length))  # type: ignore[attr-defined]

    clock = time.perf_counter_ns
    out: dict[str, float] = {}
    with Catalog(f"sqlite:///{db}", storage_options=opts) as cat:
        cat.create_dataset("tar", tmp)
        cat.register_shard("tar", info)
        cat.create_dataset("native", tmp)
        cat.register_shard("native", native_info)
        ids = {name: cat.info(name).id for name in ("tar", "native")}
        times: dict[str, list[float]] = {
            n: [] for n in ("tar", "native", "tar_floor", "native_floor")
        }
        for k in keys[: min(200, len(keys) // 4)]:  # connections, statements, files, page cache
            for name in ("tar", "native"):
                cat.get(name, k)
                floor(ids[name], k)
        for i, key in enumerate(keys):
            order = ("tar", "native") if i % 2 == 0 else ("native", "tar")
            for name in order:
                calls = [
                    (name, lambda n=name, k=key: cat.get(n, k)),
                    (f"{name}_floor", lambda n=name, k=key: floor(ids[n], k)),
                ]
                if i % 4 >= 2:
                    calls.reverse()
                for label, fn in calls:
                    t = clock()
                    fn()
                    times[label].append((clock() - t) / 1e6)
    conn.close()
    for label, values in times.items():
        out[f"{label}_p50_ms"] = round(statistics.median(values), 4)
    out["tar_ratio"] = round(out["tar_p50_ms"] / out["tar_floor_p50_ms"], 3)
    out["native_ratio"] = round(out["native_p50_ms"] / out["native_floor_p50_ms"], 3)
    out["tar_vs_native"] = round(out["tar_p50_ms"] / out["native_p50_ms"], 3)
    out["lookups"] = len(keys)
    return out


def upload(fs, local: str, remote: str) -> None:
    """One PUT of the whole file: moto fails to complete 1 GiB multipart uploads here."""
    size = os.path.getsize(local)
    with open(local, "rb") as src, fs.open(remote, "wb", block_size=max(size + 1, 5 << 20)) as dst:
        while chunk := src.read(CHUNK):
            dst.write(chunk)


def bench_s3(tmp: str, path: str, info, args) -> dict[str, float]:
    """Scan vs a plain 8 MiB-block stream of the tar on S3, then lookups there."""
    from bench_catalog import Env  # S3 as the catalog benchmark's: moto in its own process
    from shardcat.storage import open_source, resolve

    env = Env("s3", "sqlite")
    try:
        opts = env.storage_options or {}
        url = f"{env.root}/bench.tar"
        fs, p = resolve(url, opts)
        upload(fs, path, p)
        size = os.path.getsize(path)

        def plain() -> int:
            total = 0
            with fs.open(p, "rb", block_size=CHUNK, cache_type="none") as f:
                while chunk := f.read(CHUNK):
                    total += len(chunk)
            return total

        def scan(readahead: int | None, map_file: bool):  # an S3 stream is never mapped
            # scan_tar_url's stream (one GET per 8 MiB block), with the read-ahead chosen here.
            source = open_source(url, opts)
            stream = source.open_stream()
            try:
                return scan_tar(stream, url, size=source.size(), readahead=readahead)
            finally:
                stream.close()

        out = scan_ratios(
            plain,
            scan,
            walkers(args.walker, args.readahead),
            args.s3_repeat,
            size,
            prefix="s3_",
        )
        if not args.s3_lookups:
            return out
        lookups = bench_lookups(tmp, path, info, args.s3_lookups, s3=(env.root, opts))
        out.update({f"s3_{k}": v for k, v in lookups.items()})
        return out
    finally:
        env.close()


def cpu_budget(path: str, repeat: int) -> dict[str, float]:
    """CPU seconds (median of ``repeat``) of a local scan's stages, each run on its own.

    ``walk``: read + headers + CRC32C + the members (``TarWalker``, as
    ``scan_tar`` runs it: C blocks with the compiled walker, lists with the
    reference); ``walk_group``: and the grouping into sample rows; ``scan``:
    and the summary (``scan_tar``). Differences are the stages' costs.
    Default walker and read-ahead.
    """
    from shardcat.format.tar.scan import _CompiledGrouper, _grouper
    from shardcat.format.tar.walk import TarWalker

    def walk() -> None:
        with open(path, "rb", buffering=0) as f:
            blocks = isinstance(_grouper(path), _CompiledGrouper)
            for _ in TarWalker(f, path, blocks=blocks):
                pass

    def walk_group() -> None:
        with open(path, "rb", buffering=0) as f:
            grouper = _grouper(path)
            blocks = isinstance(grouper, _CompiledGrouper)
            for batch in TarWalker(f, path, blocks=blocks):
                grouper.feed(batch)
            grouper.finish()

    stages = {"plain": lambda: plain_read(path), "walk": walk, "walk_group": walk_group}
    stages["scan"] = lambda: scan_tar(path)
    times: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(repeat):
        for name, fn in stages.items():
            times[name].append(timed_cpu(fn)[1])
    return {f"budget_{k}_cpu_s": round(statistics.median(v), 4) for k, v in times.items()}


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def timed_cpu(fn, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of one call."""
    c, t = time.process_time(), time.perf_counter()
    fn(*args)
    return time.perf_counter() - t, time.process_time() - c


def parse_size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}
    low = text.strip().lower()
    for unit, factor in units.items():
        if low.endswith(unit):
            return int(float(low[: -len(unit)]) * factor)
    return int(low)


def walkers(choice: str, readaheads: list[int] | None = None, mmap_too: bool = False) -> list[str]:
    """Scan variants: a walker name (the library's read-ahead: by backend), or ``_raN`` for each given.

    ``mmap_too``: also ``<walker>_mmap``, a local file walked in a guarded mapping
    (``map_file=True``; the library reads a local file by default), with the
    next window mapped on a second thread where it can, and
    ``<walker>_mmap_ra0``, the same walk kept to one thread (``readahead=0``),
    beside the read walk: the other variants pass ``map_file=False``.
    """
    from shardcat.format.tar import tarwalker

    names = ["compiled", "python"] if choice == "both" else [choice]
    out = []
    for name in names:
        if name not in tarwalker.available():
            continue
        for ra in readaheads or [None]:
            out.append(name if ra is None else f"{name}_ra{ra}")
        if mmap_too:
            out.append(f"{name}_mmap")
            out.append(f"{name}_mmap_ra0")
    return out


def variant(name: str) -> tuple[str, int | None, bool]:
    """``(walker, readahead, map_file)`` of a variant name from :func:`walkers` (``None``: the default)."""
    if name.endswith("_mmap"):
        return name.removesuffix("_mmap"), None, True
    if name.endswith("_mmap_ra0"):
        return name.removesuffix("_mmap_ra0"), 0, True
    walker, _, ra = name.partition("_ra")
    return walker, int(ra) if ra else None, False


def scan_ratios(plain, scan, names: list[str], repeat: int, size: int, prefix: str = ""):
    """Interleaved plain reads and scans under each variant: medians and ratios.

    ``scan(readahead, map_file)`` scans once; the walker is set here.
    """
    from shardcat.format.tar import tarwalker

    times: dict[str, list[tuple[float, float]]] = {n: [] for n in ["plain", *names]}
    for _ in range(repeat):
        times["plain"].append(timed_cpu(plain))
        for name in names:
            walker, readahead, map_file = variant(name)
            previous = tarwalker.use(walker)
            try:
                times[name].append(timed_cpu(scan, readahead, map_file))
            finally:
                tarwalker.use(previous)
    wall = {n: statistics.median(t[0] for t in v) for n, v in times.items()}
    cpu = {n: statistics.median(t[1] for t in v) for n, v in times.items()}
    out: dict[str, float] = {f"{prefix}plain_mb_s": round(size / wall["plain"] / 1e6)}
    out[f"{prefix}plain_cpu_s"] = round(cpu["plain"], 4)
    for name in names:
        out[f"{prefix}scan_{name}_mb_s"] = round(size / wall[name] / 1e6)
        out[f"{prefix}scan_{name}_cpu_s"] = round(cpu[name], 4)
        out[f"{prefix}ratio_{name}"] = round(wall["plain"] / wall[name], 3)
        out[f"{prefix}cpu_ratio_{name}"] = round(cpu["plain"] / cpu[name], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="× 256 MiB of samples")
    parser.add_argument("--size", default=None, help="the tar file's size instead (e.g. 1GiB)")
    parser.add_argument("--walker", choices=["both", "compiled", "python"], default="both")
    parser.add_argument(
        "--readahead",
        type=lambda text: [int(x) for x in text.split(",")],
        default=None,
        help="chunks read ahead by the walk's reader thread, e.g. 0,2 (default: the library's)",
    )
    parser.add_argument(
        "--mmap-too",
        action="store_true",
        help="locally, also walk the file in a read-only mapping (map_file=True) beside the read",
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writer", choices=["wds", "gnu"], default=None)
    parser.add_argument("--lookups", type=int, default=2000, help="point lookups (0: none)")
    parser.add_argument(
        "--s3",
        action="store_true",
        help="also on S3 (moto on loopback, serving ranges by seek + read): scan and lookups",
    )
    parser.add_argument("--s3-lookups", type=int, default=300)
    parser.add_argument("--s3-repeat", type=int, default=3)
    parser.add_argument(
        "--budget",
        action="store_true",
        help="also the CPU of the local scan's stages: walk, + grouping, + summary",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    writer = args.writer
    if writer is None:
        try:
            import webdataset  # noqa: F401

            writer = "wds"
        except ImportError:
            writer = "gnu"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.tar")
        if args.size:
            samples, members = write_tar(path, parse_size(args.size), writer, file_bytes=True)
        else:
            samples, members = write_tar(path, int(args.scale * (256 << 20)), writer)
        size = os.path.getsize(path)
        plain_read(path)  # into the page cache
        info = scan_tar(path)
        assert info.record_count == samples, (info.record_count, samples)
        names = walkers(args.walker, args.readahead, args.mmap_too)
        local = scan_ratios(
            lambda: plain_read(path),
            lambda ra, map_file: scan_tar(path, readahead=ra, map_file=map_file),
            names,
            args.repeat,
            size,
        )
        budget = cpu_budget(path, args.repeat) if args.budget else {}
        lookups = bench_lookups(tmp, path, info, args.lookups) if args.lookups else {}
        s3 = bench_s3(tmp, path, info, args) if args.s3 else {}
    result = {
        "writer": writer,
        "file_mib": round(size / 2**20, 1),
        "samples": samples,
        "members": members,
        "repeat": args.repeat,
        **local,
        **budget,
        **lookups,
        **s3,
    }
    if args.json:
        json.dump(result, sys.stdout)
        print()
    else:
        print(
            f"{result['file_mib']} MiB tar ({writer}), {samples:,} samples, {members:,} members; "
            f"median of {args.repeat}:"
        )
        print(
            f"  plain 8 MiB reads : {result['plain_mb_s']:>6} MB/s, {result['plain_cpu_s']} s CPU"
        )
        for name in names:
            us = result[f"scan_{name}_cpu_s"] / members * 1e6
            print(
                f"  scan_tar, {name:<8}: {result[f'scan_{name}_mb_s']:>6} MB/s, "
                f"{result[f'scan_{name}_cpu_s']} s CPU ({us:.2f} µs CPU per member); "
                f"ratio {result[f'ratio_{name}']} wall, {result[f'cpu_ratio_{name}']} CPU "
                "(target 0.8)"
            )
        if budget:
            print(
                "  CPU by stage (s): "
                + ", ".join(f"{k[7:-6]} {v}" for k, v in budget.items())
                + " (walk: read + headers + CRC + member lists; walk_group: + grouping; "
                "scan: + summary)"
            )
        if lookups:
            print(f"point lookups, p50 of {lookups['lookups']:,} keys (local disk, SQLite):")
            for name in ("tar", "native"):
                print(
                    f"  {name:<6}: {lookups[f'{name}_p50_ms']:.4f} ms, floor "
                    f"{lookups[f'{name}_floor_p50_ms']:.4f} ms, ratio {lookups[f'{name}_ratio']}"
                )
            print(
                f"  tar / native: {lookups['tar_vs_native']} (target: the same ratio to the floor)"
            )
        if s3:
            print(
                f"S3 (moto in its own process, ranges served by seek + read): plain stream {s3['s3_plain_mb_s']} MB/s"
            )
            for name in names:
                print(
                    f"  scan_tar_url, {name:<8}: {s3[f's3_scan_{name}_mb_s']} MB/s, "
                    f"ratio {s3[f's3_ratio_{name}']} wall (target 0.8)"
                )
            for name in ("tar", "native") if "s3_tar_p50_ms" in s3 else ():
                print(
                    f"  {name:<6}: {s3[f's3_{name}_p50_ms']:.3f} ms, floor "
                    f"{s3[f's3_{name}_floor_p50_ms']:.3f} ms, ratio {s3[f's3_{name}_ratio']}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
