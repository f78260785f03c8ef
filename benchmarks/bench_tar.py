"""Tar scanning speed, as a ratio to a plain sequential read of the same bytes.

Writes a WebDataset tar of ~256 MiB of 2-8 KiB samples (``jpg`` + ``cls``
each; with webdataset's own TarWriter when it is installed, so every member
has the pax header it writes, else with tarfile in GNU format), then
alternates: a plain read of the file in 8 MiB chunks (``readinto`` one
buffer, nothing else) and ``scan_tar`` of the same file (every header parsed
and checksum-verified, a CRC32C of every payload, samples grouped, the
summary's arrays built). The file is in the page cache for both. Target
(issue 11): scan ≥ 0.8 × the plain read.

    .venv/bin/python benchmarks/bench_tar.py [--scale 1.0] [--repeat 5] [--writer wds|gnu] [--json]

``--scale`` multiplies the 256 MiB (``--scale 0.25``: 64 MiB).

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


def write_tar(path: str, total: int, writer: str, seed: int = 0) -> tuple[int, int]:
    """A tar of samples of 2-8 KiB in all; returns (samples, members)."""
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


def bench_lookups(tmp: str, path: str, info, count: int, seed: int = 0) -> dict[str, float]:
    """p50 (ms) of tar lookups, native lookups and each one's floor, on one SQLite catalog."""
    import random

    import shardcat
    from shardcat.catalog import Catalog
    from shardcat.format.checksums import signed_key_hash
    from shardcat.storage import resolve

    db = os.path.join(tmp, "catalog.db")
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
    rng = random.Random(seed)
    keys = rng.sample(info.keys, min(count, len(info.keys)))
    hashes = {k: signed_key_hash(k.encode()) for k in keys}
    conn = sqlite3.connect(db)
    fs_cache: dict[str, tuple[object, str]] = {}

    def floor(ds_id: int, key: str) -> bytes:
        url, offset, length = conn.execute(FLOOR_POINT_SQL, (ds_id, hashes[key], key)).fetchone()
        fs, p = fs_cache.get(url) or fs_cache.setdefault(url, resolve(url))
        return bytes(fs.cat_file(p, start=offset, end=offset + length))  # type: ignore[attr-defined]

    clock = time.perf_counter_ns
    out: dict[str, float] = {}
    with Catalog(f"sqlite:///{db}") as cat:
        cat.create_dataset("tar", tmp)
        cat.register_shard("tar", info)
        cat.create_dataset("native", tmp)
        cat.register_shard("native", w.close())
        ids = {name: cat.dataset(name).id for name in ("tar", "native")}
        times: dict[str, list[float]] = {
            n: [] for n in ("tar", "native", "tar_floor", "native_floor")
        }
        for k in keys[:200]:  # connections, statements, open files, page cache
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


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="× 256 MiB of samples")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writer", choices=["wds", "gnu"], default=None)
    parser.add_argument("--lookups", type=int, default=2000, help="point lookups (0: none)")
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
        samples, members = write_tar(path, int(args.scale * (256 << 20)), writer)
        size = os.path.getsize(path)
        plain_read(path)  # into the page cache
        info = scan_tar(path)
        assert info.record_count == samples, (info.record_count, samples)
        raw_t, scan_t = [], []
        for _ in range(args.repeat):
            raw_t.append(timed(plain_read, path)[0])
            scan_t.append(timed(scan_tar, path)[0])
        lookups = bench_lookups(tmp, path, info, args.lookups) if args.lookups else {}
    raw, scan = statistics.median(raw_t), statistics.median(scan_t)
    result = {
        "writer": writer,
        "file_mib": round(size / 2**20, 1),
        "samples": samples,
        "members": members,
        "plain_read_mb_s": round(size / raw / 1e6),
        "scan_mb_s": round(size / scan / 1e6),
        "scan_members_per_s": round(members / scan),
        "scan_us_per_member": round(scan / members * 1e6, 2),
        "ratio": round(raw / scan, 3),
        "repeat": args.repeat,
        **lookups,
    }
    if args.json:
        json.dump(result, sys.stdout)
        print()
    else:
        print(
            f"{result['file_mib']} MiB tar ({writer}), {samples:,} samples, {members:,} members; "
            f"median of {args.repeat}:"
        )
        print(f"  plain 8 MiB reads : {result['plain_read_mb_s']:>6} MB/s")
        print(
            f"  scan_tar          : {result['scan_mb_s']:>6} MB/s "
            f"({result['scan_us_per_member']} µs per member)"
        )
        print(f"  ratio             : {result['ratio']} (target 0.8)")
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
