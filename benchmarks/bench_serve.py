"""``shardcat serve`` under load: N concurrent clients on loopback, vs the same bytes as files.

Two servers, each one uvicorn process on 127.0.0.1 (the same framework, Starlette, and
the same server settings), serve the same entry bytes:

* **shardcat**: ``shardcat serve`` on a SQLite catalog, GET
  ``/api/v1/datasets/bench/samples/{key}/entries/jpg`` with a bearer token: the token
  check (cached), the rate limit (off: ``SHARDCAT_SERVE_RATE_LIMIT=0``), one catalog
  lookup and one ranged read of the shard, the CRC32C of the bytes for the ETag;
* **files**: a Starlette route reading ``files/{i}.jpg`` (the same bytes, one file per
  sample) in the thread pool and answering them with the same content type.

A client process (asyncio + httpx, ``--clients`` requests in flight, one connection each)
asks for random samples for ``--seconds`` after a warm-up, first of one server, then of
the other, alternating ``--rounds`` times. Reported: requests/s, MB/s, p50 and p99 of the
latency per sample, and shardcat's throughput as a ratio of the files' (goal >= 0.8).
The client shares the machine with the server: on a 2-core VM both are CPU-bound, so the
ratio, measured in the same run, is the figure to read.

Usage::

    .venv/bin/python benchmarks/bench_serve.py [--samples 2000] [--kib 8] [--clients 8]
        [--seconds 10] [--rounds 2] [--sample-json]

``--sample-json`` also measures the sample's JSON document (``/samples/{key}``), which
has no file equivalent (reported alone).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]


def files_app(folder: str):  # the baseline server (run in its own process)
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import Response
    from starlette.routing import Route

    def read(name: str) -> bytes:
        with open(os.path.join(folder, name), "rb") as f:
            return f.read()

    async def serve_file(request):
        name = request.path_params["name"]
        if "/" in name or name.startswith("."):
            return Response(status_code=404)
        try:
            data = await run_in_threadpool(read, name)
        except FileNotFoundError:
            return Response(status_code=404)
        return Response(data, media_type="image/jpeg")

    return Starlette(routes=[Route("/files/{name}", serve_file)])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prepare(work: Path, samples: int, kib: int) -> tuple[str, list[str]]:
    import shardcat
    from shardcat.serve.tokens import create_token

    rng = random.Random(0)
    keys = [f"cam{i % 7}/{i:08d}" for i in range(samples)]
    (work / "files").mkdir()
    url = f"sqlite:///{work / 'catalog.db'}"
    with shardcat.Catalog(url) as cat:
        cat.create_dataset("bench", str(work / "shards"))
        per_shard = 1000
        for s in range(0, samples, per_shard):
            with shardcat.ShardWriter(
                str(work / "shards" / f"bench-{s // per_shard:06d}.shard")
            ) as w:
                for i in range(s, min(s + per_shard, samples)):
                    data = rng.randbytes(kib * 1024)
                    w.add(keys[i], {"jpg": data, "json": {"i": i}})
                    (work / "files" / f"{i}.jpg").write_bytes(data)
            cat.register_shard("bench", w.close())
        token = create_token(cat, name="bench").token
    return token, keys


def _start(cmd: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    import httpx

    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except httpx.TransportError:
            if proc.poll() is not None:
                raise RuntimeError(
                    proc.stderr.read().decode() if proc.stderr else "exited"
                ) from None
            time.sleep(0.1)
    raise RuntimeError("server did not start")


async def _load(
    base: str, paths: list[str], headers: dict[str, str], clients: int, seconds: float
) -> tuple[list[float], int]:
    import httpx

    latencies: list[float] = []
    nbytes = 0
    stop = time.perf_counter() + seconds

    async def client(seed: int) -> None:
        nonlocal nbytes
        rng = random.Random(seed)
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as c:
            while time.perf_counter() < stop:
                path = rng.choice(paths)
                t0 = time.perf_counter()
                r = await c.get(path)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != 200:
                    raise RuntimeError(f"{path}: HTTP {r.status_code} {r.text[:200]}")
                nbytes += len(r.content)

    await asyncio.gather(*(client(i) for i in range(clients)))
    return latencies, nbytes


def _run(name, base, paths, headers, args):
    asyncio.run(_load(base, paths, headers, args.clients, 1.0))  # warm-up
    lat, nbytes = asyncio.run(_load(base, paths, headers, args.clients, args.seconds))
    lat.sort()
    return {
        "name": name,
        "rps": len(lat) / args.seconds,
        "mbps": nbytes / args.seconds / 1e6,
        "p50": statistics.median(lat) * 1000,
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000,
        "n": len(lat),
    }


def _row(m: dict) -> str:
    return (f"{m['name']:<22} {m['rps']:>9,.0f} req/s {m['mbps']:>8.1f} MB/s "
            f"p50 {m['p50']:>6.2f} ms  p99 {m['p99']:>6.2f} ms  ({m['n']:,} requests)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--kib", type=int, default=8)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--sample-json", action="store_true")
    p.add_argument("--files-server", nargs=2, metavar=("FOLDER", "PORT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.files_server:
        import uvicorn

        folder, port = args.files_server
        uvicorn.run(files_app(folder), host="127.0.0.1", port=int(port), log_level="warning")
        return
    print(
        f"load average {os.getloadavg()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        token, keys = _prepare(work, args.samples, args.kib)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAT_")}
        env.update(PYTHONPATH=str(ROOT / "src"), SHARDCAT_SERVE_RATE_LIMIT="0")
        ours_port, files_port = _free_port(), _free_port()
        ours = _start(
            [sys.executable, "-m", "shardcat", "serve", "-c", f"sqlite:///{work / 'catalog.db'}",
             "--port", str(ours_port), "--log-level", "warning"], env, ours_port,
        )  # fmt: skip
        files = _start(
            [sys.executable, __file__, "--files-server", str(work / "files"), str(files_port)],
            env, files_port,
        )  # fmt: skip
        try:
            auth = {"Authorization": f"Bearer {token}"}
            entry_paths = [
                f"/api/v1/datasets/bench/samples/{quote(k, safe='')}/entries/jpg" for k in keys
            ]
            file_paths = [f"/files/{i}.jpg" for i in range(len(keys))]
            results: dict[str, list[dict]] = {"shardcat": [], "files": []}
            for _ in range(args.rounds):
                results["shardcat"].append(
                    _run("shardcat entry", f"http://127.0.0.1:{ours_port}", entry_paths, auth, args)
                )
                results["files"].append(
                    _run(
                        "files (Starlette)", f"http://127.0.0.1:{files_port}", file_paths, {}, args
                    )
                )
            print(f"{args.samples} samples of {args.kib} KiB, {args.clients} clients, "
                  f"{args.seconds:g} s x {args.rounds} rounds (alternating)")  # fmt: skip
            for name in ("shardcat", "files"):
                for m in results[name]:
                    print(_row(m))
            ratios = [o["rps"] / f["rps"] for o, f in zip(results["shardcat"], results["files"])]
            print(f"throughput ratio shardcat/files per round: {', '.join(f'{r:.2f}' for r in ratios)}"
                  f" (median {statistics.median(ratios):.2f}; goal >= 0.8)")  # fmt: skip
            if args.sample_json:
                json_paths = [f"/api/v1/datasets/bench/samples/{quote(k, safe='')}" for k in keys]
                print(
                    _row(
                        _run(
                            "shardcat sample JSON",
                            f"http://127.0.0.1:{ours_port}",
                            json_paths,
                            auth,
                            args,
                        )
                    )
                )
        finally:
            for proc in (ours, files):
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(30)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
