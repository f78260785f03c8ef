"""The write path: writer CPU per record, and S3 uploads against s3fs's own file object.

Two measures, each in one process (issue 10):

``cpu``
    ``RollingShardWriter`` writing the peers' samples (2-8 KiB payload and a
    small JSON label each, ``benchmarks.peers.data``) to local files: CPU
    seconds (``time.process_time``, best of ``--repeat``), load-independent,
    so the same command on two commits compares their code paths; and the
    writing thread's own CPU (``time.thread_time``): local 4 MiB blocks are
    written by a background thread, which a second core runs meanwhile.
``s3``
    The same samples as 64 MiB shards to a moto S3 server, once through
    ``ShardWriter(url)`` (shardcat's concurrent multipart upload) and once
    through ``ShardWriter(fs.open(path, "wb"))`` (s3fs's file, one part at a
    time, what shardcat used before); rounds alternate, best wall time of each.

    .venv/bin/python -m benchmarks.bench_write [--samples 50000] [--repeat 3] [--s3-samples 20000]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from typing import Any

from benchmarks.peers.data import Dataset, Sample

import shardcat

SHARD_BYTES = 64 << 20


def write_cpu(samples: list[Sample], repeat: int) -> tuple[float, float]:
    """Best CPU seconds of the process (all threads) and of the writing thread alone.

    The writing thread's time is what an idle second core cannot take over:
    local files get their 4 MiB blocks written by a background thread.
    """
    best, best_main = float("inf"), float("inf")
    for _ in range(repeat):
        root = tempfile.mkdtemp(prefix="bench-write-")
        try:
            t, m = time.process_time(), time.thread_time()
            with shardcat.RollingShardWriter(root, max_bytes=SHARD_BYTES) as w:
                for s in samples:
                    w.add(s.key, {"bin": s.payload, "json": s.label})
            best = min(best, time.process_time() - t)
            best_main = min(best_main, time.thread_time() - m)
        finally:
            shutil.rmtree(root)
    return best, best_main


def write_s3(samples: list[Sample], url: str, opts: dict[str, Any], via_s3fs_file: bool) -> float:
    import fsspec

    fs, _ = fsspec.core.url_to_fs(url, **opts)
    t = time.perf_counter()
    n, i = 0, 0
    while i < len(samples):
        path = f"{url}/train-{n:06d}.shard"
        if via_s3fs_file:
            f = fs.open(path, "wb")
            w = shardcat.ShardWriter(f, close_file=True)
        else:
            w = shardcat.ShardWriter(path, storage_options=opts)
        with w:
            while i < len(samples) and w.bytes_written < SHARD_BYTES:
                s = samples[i]
                w.add(s.key, {"bin": s.payload, "json": s.label})
                i += 1
        n += 1
    return time.perf_counter() - t


def s3_rounds(samples: list[Sample], repeat: int) -> tuple[float, float]:
    """Best wall seconds of (shardcat's upload, s3fs's file), rounds alternating."""
    from benchmarks.peers.s3 import MotoS3

    # The peers harness's S3: moto in its own process on a free port, bucket "bench".
    moto = MotoS3()
    try:
        store = moto.store()
        best = {False: float("inf"), True: float("inf")}
        for _ in range(repeat):
            for via_file in (True, False):
                url = store.root(uuid.uuid4().hex[:8])
                best[via_file] = min(
                    best[via_file], write_s3(samples, url, store.storage_options, via_file)
                )
        return best[False], best[True]
    finally:
        moto.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=50_000)
    ap.add_argument("--s3-samples", type=int, default=20_000, help="0 skips the S3 measure")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    samples = list(Dataset(args.samples))
    cpu, main_cpu = write_cpu(samples, args.repeat)
    print(
        f"local write, {args.samples:,} samples: {cpu:.3f} s CPU "
        f"= {cpu / args.samples * 1e6:.1f} us/record, of which the writing thread "
        f"{main_cpu:.3f} s = {main_cpu / args.samples * 1e6:.1f} us/record (best of {args.repeat})"
    )
    if args.s3_samples:
        part = samples[: args.s3_samples]
        mb = sum(len(s.payload) + len(s.label) for s in part) / 1e6
        ours, theirs = s3_rounds(part, args.repeat)
        print(
            f"S3 (moto) write, {len(part):,} samples, {mb:.0f} MB: concurrent multipart "
            f"{mb / ours:.1f} MB/s, s3fs file {mb / theirs:.1f} MB/s, ratio {theirs / ours:.2f} "
            f"(best of {args.repeat}, alternating)"
        )


if __name__ == "__main__":
    main()
