"""Instructions per streamed record (callgrind): the streaming read's cost without the machine's load.

Writes one shard of ~64 MiB of records (as ``bench_format.py`` does), then runs
a child interpreter under ``valgrind --tool=callgrind`` that streams it once,
and another that streams it three times; the difference, halved, is one
stream's user-space instructions, without imports and set-up. Divided by the
record count: the per-record budget. The kernel's copy of the file (what a raw
``read`` costs) is not counted, so this is the part the streaming code adds.

    .venv/bin/python benchmarks/stream_instructions.py [--record-kib 2-8] [--access len|view|data]

``--access``: what the loop does with each record's entry, ``len(rec["bin"])``
(as ``bench_format.py``), ``rec["bin"].view`` (the zero-copy bytes, as the peers
harness) or ``rec["bin"].data`` (a copy). Needs valgrind on the PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def stream(path: str, access: str) -> int:
    import shardcat

    n = 0
    with shardcat.ShardReader(path) as r:
        if access == "len":
            for rec in r:
                n += len(rec["bin"])
        elif access == "view":
            for rec in r:
                n += rec["bin"].view.nbytes
        else:
            for rec in r:
                n += len(rec["bin"].data)
    return n


def instructions(path: str, access: str, runs: int) -> int:
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        str(runs),
        "--access",
        access,
        "--path",
        path,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    match = re.search(r"Collected : (\d+)", out)
    if match is None:
        raise RuntimeError(f"no callgrind total in:\n{out}")
    return int(match.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--record-kib", default="2-8")
    ap.add_argument("--access", default="len", choices=["len", "view", "data"])
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        for _ in range(args.child):
            stream(args.path, args.access)
        return

    import shardcat
    from bench_format import make_payloads, shard_write

    lo, hi = (int(x) * 1024 for x in args.record_kib.split("-"))
    with tempfile.TemporaryDirectory(prefix="shardcat-instr-") as root:
        path = f"{root}/bench-000000.shard"
        shard_write(path, make_payloads(args.mib << 20, lo, hi), None)
        with shardcat.ShardReader(path) as r:
            records = r.num_records
        one, three = (instructions(path, args.access, n) for n in (1, 3))
    per_stream = (three - one) / 2
    print(
        f"{records:,} records of {args.record_kib} KiB, access {args.access!r}: "
        f"{per_stream / 1e6:.1f} M instructions per stream, "
        f"{per_stream / records:,.0f} per record"
    )


if __name__ == "__main__":
    main()
