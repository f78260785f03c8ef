"""Shard write, decode and streaming-read speed, as ratios to plain fsspec IO of the same bytes.

Writes a shard of ~64 MiB of 2-8 KiB records with ShardWriter, and the same
payloads with plain ``fs.open(..., "wb").write`` one record at a time; then
streams the shard back with ShardReader (every CRC checked) and reads the
plain file in 8 MiB chunks. Runs alternate and the median of each is
reported, all in the same process, so the ratios are comparable across
machines. Targets (issue 2): write ≥ 0.8, streaming read ≥ 0.9.

    .venv/bin/python benchmarks/bench_format.py [--mib 64] [--repeat 5] [--record-kib 2-8]
                                                [--codec both|compiled|python]
                                                [--url-root DIR|memory://bench] [--json]

The shard's streaming read verifies every CRC and builds one Record per
sample, so it is also compared with a plain reader that does one read per
sample (the least any reader that hands out samples must do).

Each shardcat measure runs once per record codec (``--codec both``, the
default: the compiled one and the pure-Python reference, switched with
``shardcat.format.recordcodec.use``), in the same process and the same
rounds, so the compiled/python speed-up is a ratio of the same run too.
``decode`` times the codec alone: every record of the shard, already in
memory, through ``decode_indexed`` (what a lookup or ``ShardReader.read`` runs).
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
from shardcat.format import recordcodec


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


def decode_all(data: bytes, rows: list[tuple[int, int, bytes]], alignment: int) -> int:
    """The codec alone: every record, already in memory, decoded and checked as a lookup does."""
    view = memoryview(data)
    decode = recordcodec.decode_indexed
    texts: dict = {}
    n = 0
    for i, (offset, length, key) in enumerate(rows):
        rec = decode(
            view[offset : offset + length],
            key=key,
            length=length,
            path="bench",
            offset=offset,
            alignment=alignment,
            index=i,
            text_cache=texts,
        )
        n += len(rec["bin"])
    return n


def index_rows(url: str) -> tuple[bytes, list[tuple[int, int, bytes]], int]:
    with fsspec.open(url, "rb") as f:
        data = f.read()
    with shardcat.ShardReader(data) as r:
        f = r.footer
        rows = [
            (int(f.records[i]["offset"]), int(f.records[i]["length"]), f.key_bytes(i))
            for i in range(len(f.records))
        ]
        return data, rows, r.header.alignment


CLOCK = time.perf_counter


def timed(fn, *args) -> float:
    t0 = CLOCK()
    fn(*args)
    return CLOCK() - t0


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
    ap.add_argument(
        "--codec",
        default="both",
        choices=["both", "compiled", "python"],
        help="record codec(s) to measure (default: both, in the same rounds)",
    )
    ap.add_argument(
        "--clock",
        default="wall",
        choices=["wall", "cpu"],
        help="wall time, or this process's CPU time (user + system: steadier on a shared machine)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    root = args.url_root or tempfile.mkdtemp(prefix="shardcat-bench-")
    lo, hi = (int(x) * 1024 for x in args.record_kib.split("-"))
    payloads = make_payloads(args.mib << 20, lo, hi)
    sizes = [len(p) for p in payloads]
    data_bytes = sum(len(p) for p in payloads)
    plain_url, shard_url = f"{root}/plain.bin", f"{root}/bench-000000.shard"

    codecs = recordcodec.available() if args.codec == "both" else [args.codec]
    w_plain, r_plain, r_samples = [], [], []
    w_shard: dict[str, list[float]] = {c: [] for c in codecs}
    r_shard: dict[str, list[float]] = {c: [] for c in codecs}
    decode: dict[str, list[float]] = {c: [] for c in codecs}
    previous = recordcodec.active()
    for _ in range(args.repeat):
        w_plain.append(timed(plain_write, plain_url, payloads))
        r_plain.append(timed(plain_read, plain_url))
        r_samples.append(timed(plain_read_samples, plain_url, sizes))
        for codec in codecs:
            recordcodec.use(codec)
            w_shard[codec].append(timed(shard_write, shard_url, payloads, args.compression))
            r_shard[codec].append(timed(shard_read, shard_url))
            data, rows, alignment = index_rows(shard_url)
            decode[codec].append(timed(decode_all, data, rows, alignment))
    recordcodec.use(previous)

    med = statistics.median
    shard_size = shardcat.ShardReader(shard_url).size
    result: dict = {
        "records": len(payloads),
        "record_kib": args.record_kib,
        "payload_mib": data_bytes / 2**20,
        "shard_mib": shard_size / 2**20,
        "overhead_pct": 100 * (shard_size - data_bytes) / data_bytes,
        "write_plain_mb_s": data_bytes / med(w_plain) / 1e6,
        "read_plain_mb_s": data_bytes / med(r_plain) / 1e6,
        "read_samples_mb_s": data_bytes / med(r_samples) / 1e6,
        "target_write_ratio": 0.8,
        "target_read_ratio": 0.9,
        "codecs": {},
        "root": root if "://" in root else "local temp dir",
        "clock": args.clock,
    }
    for codec in codecs:
        result["codecs"][codec] = {
            "write_mb_s": data_bytes / med(w_shard[codec]) / 1e6,
            "write_ratio": med(w_plain) / med(w_shard[codec]),
            "decode_records_s": len(payloads) / med(decode[codec]),
            "read_mb_s": data_bytes / med(r_shard[codec]) / 1e6,
            "read_ratio": med(r_plain) / med(r_shard[codec]),
            "read_vs_samples_ratio": med(r_samples) / med(r_shard[codec]),
        }
    if len(codecs) == 2:
        c, p = result["codecs"]["compiled"], result["codecs"]["python"]
        result["compiled_vs_python"] = {
            "write": c["write_mb_s"] / p["write_mb_s"],
            "decode": c["decode_records_s"] / p["decode_records_s"],
            "read": c["read_mb_s"] / p["read_mb_s"],
        }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(
            f"{result['records']:,} records of {args.record_kib} KiB, {result['payload_mib']:.1f} MiB payload, "
            f"shard {result['shard_mib']:.1f} MiB ({result['overhead_pct']:.1f}% format overhead), "
            f"median of {args.repeat} runs, {result['root']}, {args.clock} clock"
        )
        print(
            f"plain fsspec: write {result['write_plain_mb_s']:.0f} MB/s, sequential read "
            f"{result['read_plain_mb_s']:.0f} MB/s (8 MiB chunks), "
            f"{result['read_samples_mb_s']:.0f} MB/s (one read per sample)"
        )
        print(
            f"{'codec':10}{'write MB/s':>12}{'vs plain':>10}{'decode rec/s':>14}"
            f"{'stream MB/s':>13}{'vs raw':>8}{'vs 1/sample':>13}"
        )
        for codec, r in result["codecs"].items():
            print(
                f"{codec:10}{r['write_mb_s']:12.0f}{r['write_ratio']:10.2f}{r['decode_records_s']:14,.0f}"
                f"{r['read_mb_s']:13.0f}{r['read_ratio']:8.2f}{r['read_vs_samples_ratio']:13.2f}"
            )
        print(f"{'target':10}{'':12}{'>= 0.8':>10}{'':14}{'':13}{'>= 0.9':>8}")
        if "compiled_vs_python" in result:
            x = result["compiled_vs_python"]
            print(
                f"compiled / python: write {x['write']:.2f}x, decode {x['decode']:.2f}x, "
                f"stream read {x['read']:.2f}x"
            )
    if not args.url_root:
        for name in os.listdir(root):
            os.unlink(os.path.join(root, name))
        os.rmdir(root)


if __name__ == "__main__":
    main()
