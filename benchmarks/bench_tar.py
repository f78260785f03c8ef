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
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tarfile
import tempfile
import time

import numpy as np

from shardcat.format.tar import scan_tar

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


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="× 256 MiB of samples")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writer", choices=["wds", "gnu"], default=None)
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
