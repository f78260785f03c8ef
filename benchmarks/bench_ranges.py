"""Range merging: shardcat's ``_ranges.coalesce`` vs ``fsspec.utils.merge_offset_ranges``.

A batch lookup merges the byte ranges of one shard into fewer reads and then
cuts each record back out of the merged blob. fsspec's function does the
first half only: it returns merged ranges, not which inputs each one
serves, so a caller must find every input's merged range again (here: one
``bisect`` per input, the cheapest way). Both sides are timed doing the whole
job on the same random ranges (a batch of random keys: unsorted, some
overlapping), with the same gap and span limits.

    .venv/bin/python benchmarks/bench_ranges.py [--ranges 10000] [--files 8] [--repeat 7] [--json]
"""

from __future__ import annotations

import argparse
import bisect
import json
import random
import statistics
import sys
import time
from collections import defaultdict

from fsspec.utils import merge_offset_ranges

from shardcat._ranges import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, coalesce
from shardcat._types import ByteRange


def make_requests(n: int, files: int, seed: int = 0) -> list[tuple[str, ByteRange]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        start = rng.randrange(0, 256 << 20)
        out.append(
            (
                f"s3://bucket/shard-{rng.randrange(files):06d}.shard",
                ByteRange(start, start + rng.randrange(2048, 8192)),
            )
        )
    return out


def with_shardcat(requests: list[tuple[str, ByteRange]]) -> list[tuple[str, int, int]]:
    """Per file: merged reads; every input's (merged read, offset inside it)."""
    by_url: dict[str, list[int]] = defaultdict(list)
    for i, (url, _) in enumerate(requests):
        by_url[url].append(i)
    where: list[tuple[str, int, int]] = [("", 0, 0)] * len(requests)
    for url, idxs in by_url.items():
        ranges = [requests[i][1] for i in idxs]
        for c in coalesce(ranges, DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN):
            for m in c.members:
                where[idxs[m]] = (url, c.range.start, ranges[m].start - c.range.start)
    return where


def with_fsspec(requests: list[tuple[str, ByteRange]]) -> list[tuple[str, int, int]]:
    """fsspec merges; each input then finds its merged read by bisection."""
    paths = [u for u, _ in requests]
    starts = [r.start for _, r in requests]
    ends: list[int | None] = [r.end for _, r in requests]
    mpaths, mstarts, mends = merge_offset_ranges(
        paths, starts, ends, max_gap=DEFAULT_MAX_GAP, max_block=DEFAULT_MAX_SPAN
    )
    per_path: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for p, s, e in zip(mpaths, mstarts, mends):
        per_path[p][0].append(s)
        per_path[p][1].append(int(e or 0))
    where: list[tuple[str, int, int]] = []
    for url, r in requests:
        ss, es = per_path[url]
        k = bisect.bisect_right(ss, r.start) - 1
        # Merged reads may overlap (fsspec keeps a range whole past max_block): step back
        # to one that covers the input.
        while es[k] < r.end:
            k -= 1
        where.append((url, ss[k], r.start - ss[k]))
    return where


def timed(fns, requests, repeat: int) -> list[float]:
    """Median seconds of each function, runs alternating (a busy machine slows both alike)."""
    runs: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn(requests)
            runs[i].append(time.perf_counter() - t)
    return [statistics.median(r) for r in runs]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranges", type=int, default=10_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    requests = make_requests(args.ranges, args.files)
    ours, theirs = with_shardcat(requests), with_fsspec(requests)
    # Both must locate every input's bytes (maybe in different merged reads).
    assert all(a[0] == b[0] and a[1] + a[2] == b[1] + b[2] for a, b in zip(ours, theirs))
    ours_s, theirs_s = timed([with_shardcat, with_fsspec], requests, args.repeat)
    result = {
        "ranges": args.ranges,
        "files": args.files,
        "shardcat_ms": ours_s * 1e3,
        "fsspec_ms": theirs_s * 1e3,
        "shardcat_reads": len({(u, s) for u, s, _ in ours}),
        "fsspec_reads": len({(u, s) for u, s, _ in theirs}),
    }
    result["fsspec_over_shardcat"] = result["fsspec_ms"] / result["shardcat_ms"]
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    print(
        f"{args.ranges:,} ranges over {args.files} files, median of {args.repeat}:\n"
        f"  shardcat coalesce:             {result['shardcat_ms']:8.2f} ms "
        f"({result['shardcat_reads']:,} merged reads)\n"
        f"  fsspec merge_offset_ranges+map: {result['fsspec_ms']:7.2f} ms "
        f"({result['fsspec_reads']:,} merged reads)\n"
        f"  fsspec / shardcat = {result['fsspec_over_shardcat']:.2f}"
    )


if __name__ == "__main__":
    main()
