"""Shard write and streaming-read speed, as ratios to plain fsspec IO of the same bytes.

Writes a shard of ~64 MiB of 2-8 KiB records with ShardWriter, and the same
payloads with plain ``fs.open(..., "wb").write`` one record at a time; then
streams the shard back with ShardReader (every CRC checked) and reads the
plain file in 8 MiB chunks. Runs alternate and the median of each is
reported, all in the same process, so the ratios are comparable across
machines. Targets (issue 2): write ≥ 0.8, streaming read ≥ 0.9.

    .venv/bin/python benchmarks/bench_format.py [--mib 64] [--repeat 5] [--record-kib 2-8]
                                                [--url-root DIR|memory://bench] [--json]

The shard's streaming read verifies every CRC and builds one Record per
sample, so it is also compared with a plain reader that does one read per
sample (the least any reader that hands out samples must do).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import fsspec
import numpy as np

import shardcat


def make_payloads(total: int, lo: int = 2048, hi: int = 8192, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out: list[bytes] = []
    size = 0
    blob = rng.integers(0, 256, size=16 << 20, dtype=np.uint8).tobytes()
    while size < total:
        n = int(rng.integers(lo, hi + 1))
        start = int(rng.integers(0, len(blob) - n))
        out.append(blob[start : start + n])
        size += n
    return out


def plain_write(url: str, payloads: list[bytes]) -> int:
    with fsspec.open(url, "wb") as f:
        for p in payloads:
            f.write(p)
    return sum(len(p) for p in payloads)


def shard_write(url: str, payloads: list[bytes], compression: str | None) -> int:
    with shardcat.ShardWriter(url, compression=compression) as w:
        for i, p in enumerate(payloads):
            w.add(f"sample/{i:08d}", {"bin": p})
    return w.info.size


def plain_read(url: str) -> int:
    n = 0
    with fsspec.open(url, "rb") as f:
        while chunk := f.read(8 << 20):
            n += len(chunk)
    return n


def plain_read_samples(url: str, sizes: list[int]) -> int:
    """The least a reader that hands out samples does: one read per sample."""
    n = 0
    with fsspec.open(url, "rb", block_size=8 << 20) as f:
        for size in sizes:
            n += len(f.read(size))
    return n


def shard_read(url: str) -> int:
    n = 0
    with shardcat.ShardReader(url) as r:
        for rec in r:
            n += len(rec["bin"])
    return n


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--url-root", default=None, help="folder or URL to write to (default: a temp dir)"
    )
    ap.add_argument("--compression", default=None)
    ap.add_argument(
        "--record-kib", default="2-8", help="record size range in KiB, e.g. 2-8 or 64-256"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    root = args.url_root or tempfile.mkdtemp(prefix="shardcat-bench-")
    lo, hi = (int(x) * 1024 for x in args.record_kib.split("-"))
    payloads = make_payloads(args.mib << 20, lo, hi)
    sizes = [len(p) for p in payloads]
    data_bytes = sum(len(p) for p in payloads)
    plain_url, shard_url = f"{root}/plain.bin", f"{root}/bench-000000.shard"

    w_plain, w_shard, r_plain, r_samples, r_shard = [], [], [], [], []
    for _ in range(args.repeat):
        w_plain.append(timed(plain_write, plain_url, payloads))
        w_shard.append(timed(shard_write, shard_url, payloads, args.compression))
        r_plain.append(timed(plain_read, plain_url))
        r_samples.append(timed(plain_read_samples, plain_url, sizes))
        r_shard.append(timed(shard_read, shard_url))

    med = statistics.median
    shard_size = shardcat.ShardReader(shard_url).size
    result = {
        "records": len(payloads),
        "payload_mib": data_bytes / 2**20,
        "shard_mib": shard_size / 2**20,
        "overhead_pct": 100 * (shard_size - data_bytes) / data_bytes,
        "write_plain_mb_s": data_bytes / med(w_plain) / 1e6,
        "write_shard_mb_s": data_bytes / med(w_shard) / 1e6,
        "write_ratio": med(w_plain) / med(w_shard),
        "read_plain_mb_s": data_bytes / med(r_plain) / 1e6,
        "read_shard_mb_s": data_bytes / med(r_shard) / 1e6,
        "read_ratio": med(r_plain) / med(r_shard),
        "read_samples_mb_s": data_bytes / med(r_samples) / 1e6,
        "read_vs_samples_ratio": med(r_samples) / med(r_shard),
        "target_write_ratio": 0.8,
        "target_read_ratio": 0.9,
        "root": root if "://" in root else "local temp dir",
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(
            f"{result['records']:,} records of {args.record_kib} KiB, {result['payload_mib']:.1f} MiB payload, "
            f"shard {result['shard_mib']:.1f} MiB ({result['overhead_pct']:.1f}% format overhead), "
            f"median of {args.repeat} runs, {result['root']}"
        )
        print(f"{'':18}{'plain fsspec':>14}{'shardcat':>12}{'ratio':>8}{'target':>8}")
        print(
            f"{'write MB/s':18}{result['write_plain_mb_s']:14.0f}{result['write_shard_mb_s']:12.0f}"
            f"{result['write_ratio']:8.2f}{'>= 0.8':>8}"
        )
        print(
            f"{'stream read MB/s':18}{result['read_plain_mb_s']:14.0f}{result['read_shard_mb_s']:12.0f}"
            f"{result['read_ratio']:8.2f}{'>= 0.9':>8}   (plain: 8 MiB chunks)"
        )
        print(
            f"{'':18}{result['read_samples_mb_s']:14.0f}{result['read_shard_mb_s']:12.0f}"
            f"{result['read_vs_samples_ratio']:8.2f}{'':>8}   (plain: one read per sample)"
        )
    if not args.url_root:
        for name in os.listdir(root):
            os.unlink(os.path.join(root, name))
        os.rmdir(root)


if __name__ == "__main__":
    main()
