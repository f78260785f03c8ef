"""S3 transports side by side: s3fs (aiobotocore + aiohttp) vs obstore (Rust ``object_store``).

The question behind it (issue 10): shardcat's remote reads and writes go
through s3fs, whose per-request work and body copies hold the GIL; Lance's
Rust client holds none. Would obstore, Python bindings to the same Rust
crate Lance uses, be a faster transport for the same requests? Each pass
sends the same requests to the same moto server (``benchmarks/moto_server.py``:
ranged GETs by seek + read, in its own process unless ``--moto in-process``),
the transports alternating:

- ``point``: one small ranged GET (2-8 KiB) at a time: s3fs ``cat_file``
  vs obstore ``get_range``; p50 latency and CPU per GET.
- ``batch``: the merged ranges of a batch of random keys (2-8 KiB records,
  merged across ``--gap``, as ``SourceCache.read_sorted``): s3fs one
  ``cat_ranges`` call for all files vs obstore ``get_ranges`` per file
  (sync, one file after another) and ``get_ranges_async`` for all files
  gathered on one event loop. obstore's ``get_ranges`` merges ranges again
  itself (gaps under 1 MiB): the requests the server saw are counted.
- ``stream``: a file in 8 MiB ranged GETs, as ``format/prefetch.py``'s
  read-ahead asks for them: one at a time (``cat_file`` vs ``get_range``),
  and all in flight (``cat_ranges`` vs ``get_ranges_async``).
- ``write``: one object of ``--object-mib`` MiB in 8 MiB parts, 4 in
  flight: shardcat's ``MultipartUpload`` (through s3fs) vs obstore ``put``.

CPU is this process's (``time.process_time``): the client's alone with the
server in its own process (the default); with ``--moto in-process`` the
server's threads are included, which serve the same requests for both
transports, so the difference is still the client's. GETs and bytes sent are
counted by the server. Medians of ``--repeat`` alternations.

    .venv/bin/python -m benchmarks.bench_s3_client [--files 3] [--file-mib 64] [--repeat 5]
        [--only point,batch,stream,write] [--moto process|in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.moto_server import MODES
from benchmarks.peers.s3 import MotoS3


def _obstore(server: MotoS3) -> Any:
    from obstore.store import S3Store

    return S3Store(
        "bench",
        endpoint=server.endpoint,
        access_key_id="testing",
        secret_access_key="testing",
        region="us-east-1",
        client_options={"allow_http": True},
    )


class Runs:
    """Wall, CPU, server GETs and bytes of each pass, alternated ``repeat`` times."""

    def __init__(self, server: MotoS3) -> None:
        self.server = server
        self.rows: dict[str, list[tuple[float, float, int, int]]] = {}

    def time(self, name: str, fn: Callable[[], Any]) -> None:
        g0, b0 = self.server.gets(), self.server.bytes_sent()
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        self.rows.setdefault(name, []).append(
            (wall, cpu, self.server.gets() - g0, self.server.bytes_sent() - b0)
        )

    def report(self, title: str, unit: str, amount: float, base: str) -> None:
        print(f"\n{title}")
        base_rows = self.rows[base]
        for name, rows in self.rows.items():
            wall = statistics.median(r[0] for r in rows)
            cpu = statistics.median(r[1] for r in rows)
            gets = statistics.median(r[2] for r in rows)
            sent = statistics.median(r[3] for r in rows)
            speed = statistics.median(b[0] / r[0] for b, r in zip(base_rows, rows))
            cpu_ratio = statistics.median(r[1] / b[1] for b, r in zip(base_rows, rows))
            print(
                f"  {name:34} {amount / wall:9.1f} {unit}  {speed:5.2f} x  cpu {cpu * 1e3:8.1f} ms"
                f" ({cpu_ratio:4.2f} x)  {gets:6.0f} GETs  {sent / 1e6:7.1f} MB sent"
            )
        print(f"  (x: median per-alternation ratio to {base}; cpu: this process's)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=6)
    p.add_argument("--file-mib", type=int, default=64)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--points", type=int, default=200, help="point GETs per pass")
    p.add_argument("--batch", type=int, default=1000, help="keys per batch")
    p.add_argument("--gap", type=int, default=1 << 20, help="merge gap of a batch's ranges")
    p.add_argument("--object-mib", type=int, default=64)
    p.add_argument("--only", default="point,batch,stream,write")
    p.add_argument("--moto", choices=MODES, default="process", help="the moto server's process")
    args = p.parse_args()
    only = set(args.only.split(","))

    import fsspec
    import obstore

    from shardcat._ranges import coalesce
    from shardcat._types import ByteRange
    from shardcat.storage.multipart import MultipartUpload

    logging.disable(logging.WARNING)
    server = MotoS3(args.moto)
    opts = server.store().storage_options
    fs = fsspec.filesystem("s3", **opts)
    store = _obstore(server)
    size = args.file_mib << 20
    paths = [f"client/{i}.bin" for i in range(args.files)]
    blob = os.urandom(size)
    for path in paths:
        fs.pipe_file(f"bench/{path}", blob)
    rng = random.Random(0)
    print(
        f"{args.files} files of {args.file_mib} MiB, moto on 127.0.0.1 ({args.moto}), {args.repeat} alternations,"
        f" load {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"obstore {obstore.__version__}, s3fs {fs.__class__.__module__.split('.')[0]}")

    # Correctness first: the same bytes through both.
    a, b = rng.randrange(size - 9000), 0
    b = a + 5000
    assert bytes(fs.cat_file(f"bench/{paths[0]}", start=a, end=b)) == blob[a:b]
    assert bytes(obstore.get_range(store, paths[0], start=a, end=b)) == blob[a:b]

    if "point" in only:
        runs = Runs(server)
        points = []
        for _ in range(args.points):
            n = rng.randint(2048, 8192)
            o = rng.randrange(size - n)
            points.append((rng.choice(paths), o, o + n))
        lat: dict[str, list[float]] = {"s3fs cat_file": [], "obstore get_range": []}

        def s3fs_point() -> None:
            for path, s, e in points:
                t = time.perf_counter()
                fs.cat_file(f"bench/{path}", start=s, end=e)
                lat["s3fs cat_file"].append(time.perf_counter() - t)

        def obs_point() -> None:
            for path, s, e in points:
                t = time.perf_counter()
                bytes(obstore.get_range(store, path, start=s, end=e))
                lat["obstore get_range"].append(time.perf_counter() - t)

        for _ in range(args.repeat):
            runs.time("s3fs cat_file", s3fs_point)
            runs.time("obstore get_range", obs_point)
        runs.report(
            "point: one 2-8 KiB ranged GET at a time", "GETs/s", args.points, "s3fs cat_file"
        )
        for name, xs in lat.items():
            print(f"  {name:34} p50 {statistics.median(xs) * 1e3:6.2f} ms")

    if "batch" in only:
        runs = Runs(server)
        keys = []
        for _ in range(args.batch):
            n = rng.randint(2048, 8192)
            o = rng.randrange(size - n)
            keys.append((rng.randrange(args.files), o, o + n))
        merged: dict[int, list[ByteRange]] = {}
        for f in range(args.files):
            mine = [ByteRange(s, e) for g, s, e in sorted(keys) if g == f]
            merged[f] = [m.range for m in coalesce(mine, args.gap, 16 << 20)]
        flat = [(f, r) for f, rs in merged.items() for r in rs]
        print(f"\nbatch: {args.batch} keys -> {len(flat)} merged ranges (gap {args.gap >> 10} KiB)")

        def s3fs_batch() -> None:
            out = fs.cat_ranges(
                [f"bench/{paths[f]}" for f, _ in flat],
                [r.start for _, r in flat],
                [r.end for _, r in flat],
                on_error="raise",
            )
            assert bytes(out[0]) == blob[flat[0][1].start : flat[0][1].end]

        def obs_sync() -> None:
            for f, rs in merged.items():
                out = obstore.get_ranges(
                    store,
                    paths[f],
                    starts=[r.start for r in rs],
                    ends=[r.end for r in rs],
                    coalesce=0,  # merged already, as shardcat merges them
                )
                assert bytes(out[0]) == blob[rs[0].start : rs[0].end]

        async def gathered() -> None:
            outs = await asyncio.gather(
                *(
                    obstore.get_ranges_async(
                        store,
                        paths[f],
                        starts=[r.start for r in rs],
                        ends=[r.end for r in rs],
                        coalesce=0,
                    )
                    for f, rs in merged.items()
                )
            )
            # Bytes expose the buffer protocol: views, no copy (s3fs hands over bytes).
            views = [memoryview(x) for out in outs for x in out]
            assert bytes(views[0]) == blob[flat[0][1].start : flat[0][1].end]

        loop = asyncio.new_event_loop()
        for _ in range(args.repeat):
            runs.time("s3fs cat_ranges", s3fs_batch)
            runs.time("obstore get_ranges (sync, per file)", obs_sync)
            runs.time(
                "obstore get_ranges_async (gather)", lambda: loop.run_until_complete(gathered())
            )
        runs.report("batch: a batch's merged ranges", "keys/s", args.batch, "s3fs cat_ranges")

    if "stream" in only:
        runs = Runs(server)
        chunk = 8 << 20
        starts = list(range(0, size, chunk))
        ends = [min(s + chunk, size) for s in starts]

        def s3fs_seq() -> None:
            for path in paths:
                for s, e in zip(starts, ends):
                    fs.cat_file(f"bench/{path}", start=s, end=e)

        def obs_seq() -> None:
            for path in paths:
                for s, e in zip(starts, ends):
                    bytes(obstore.get_range(store, path, start=s, end=e))

        def obs_seq_view() -> None:
            # No copy into bytes: obstore's Bytes exposes the buffer protocol.
            for path in paths:
                for s, e in zip(starts, ends):
                    memoryview(obstore.get_range(store, path, start=s, end=e))

        def s3fs_all() -> None:
            for path in paths:
                fs.cat_ranges([f"bench/{path}"] * len(starts), starts, ends)

        async def obs_all_async() -> None:
            for path in paths:
                await asyncio.gather(
                    *(
                        obstore.get_range_async(store, path, start=s, end=e)
                        for s, e in zip(starts, ends)
                    )
                )

        loop = asyncio.new_event_loop()
        for _ in range(args.repeat):
            runs.time("s3fs cat_file, 1 in flight", s3fs_seq)
            runs.time("obstore get_range, 1 in flight", obs_seq)
            runs.time("obstore get_range, no bytes copy", obs_seq_view)
            runs.time("s3fs cat_ranges, all in flight", s3fs_all)
            runs.time(
                "obstore get_range_async, all", lambda: loop.run_until_complete(obs_all_async())
            )
        runs.report(
            "stream: 8 MiB ranged GETs",
            "MB/s",
            args.files * size / 1e6,
            "s3fs cat_file, 1 in flight",
        )

    if "write" in only:
        runs = Runs(server)
        obj = os.urandom(args.object_mib << 20)
        part = 8 << 20

        def s3fs_put() -> None:
            up = MultipartUpload(fs, "bench/client/up-s3fs.bin")
            for i in range(0, len(obj), part):
                up.write(obj[i : i + part])
            up.close()

        def obs_put() -> None:
            obstore.put(
                store,
                "client/up-obs.bin",
                obj,
                chunk_size=part,
                max_concurrency=4,
                use_multipart=True,
            )

        for _ in range(args.repeat):
            runs.time("shardcat MultipartUpload (s3fs)", s3fs_put)
            runs.time("obstore put (multipart)", obs_put)
        assert fs.size("bench/client/up-obs.bin") == len(obj)
        runs.report(
            f"write: one {args.object_mib} MiB object, 8 MiB parts, 4 in flight",
            "MB/s",
            len(obj) / 1e6,
            "shardcat MultipartUpload (s3fs)",
        )
    print(f"\nload after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    server.stop()


if __name__ == "__main__":
    main()
