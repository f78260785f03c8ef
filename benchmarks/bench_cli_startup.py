"""A CLI call's wall time: ``shardcat get``, ``ls`` and ``count`` on SQLite vs ``python -c pass``.

Issue 37's goal is at most 0.3 s a call, warm, on a 2-core development VM
where ``python -c pass`` takes about 0.02 s: as a ratio to that baseline,
measured in the same run, **15 ×** (``--target``). Each command runs
``--runs`` times in a fresh interpreter (``python -m shardcat``, the
checkout's), interleaved with the baseline so both see the same load, after
one unmeasured warm-up run each. The dataset is 50 one-line text files
written by ``shardcat write`` into a temporary folder's SQLite catalog, the
working folder of every call (the default ``sqlite:///shardcat.db``).

"Warm" includes Python's bytecode cache: the calls write and reuse ``.pyc``
files under the temporary folder (``PYTHONPYCACHEPREFIX``), even where the
environment sets ``PYTHONDONTWRITEBYTECODE`` (which adds ~0.1 s of compiling
to every call); ``--no-pyc-cache`` keeps the environment's setting.
``$SHARDCAT_*`` variables are dropped so that no config file or catalog of
the caller's is read.

Usage::

    .venv/bin/python benchmarks/bench_cli_startup.py [--runs 10] [--target 15] [--by wall|cpu]
        [--instructions]

Prints the median wall time and CPU time (user + system of the child, the
steadier figure on a loaded machine) of each and their ratios to the
baseline's, and exits 1 when a command's median ratio (``--by wall``, the
default, or ``cpu``) exceeds the target: a benchmark's verdict, not a test
(tests/test_imports.py guards what made the calls fast, without timing: no
SQLAlchemy, Alembic, numpy, crc32c package, fsspec, obstore or ssl on their path).
``--instructions`` adds each call's instruction count under callgrind and its
ratio to the baseline's: the figure to compare two commits on a busy machine.
The row "imports alone" is ``python -c "import typer, typer._adapters, rich.console,
donfig"``: the dependencies every command loads, shown beside the commands and not judged.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "get": ["get", "ds", "s1"],
    "ls": ["ls"],
    "count": ["count", "ds"],
}
TARGET_SECONDS = 0.3
BASELINE_SECONDS = 0.02  # `python -c pass` on the development VM the goal was set on
TARGET_RATIO = TARGET_SECONDS / BASELINE_SECONDS
FLOOR = "imports alone"
# What every `get`, `ls` and `count` imports besides shardcat's own code: the CLI's
# typer (whose parameters coerce through pydantic) and rich, the configuration's
# donfig. SQLAlchemy, numpy and the crc32c package are not loaded by these calls on a
# SQLite catalog (tests/test_imports.py). Measured, not judged: the row says how much
# of a command's time is its dependencies'.
FLOOR_IMPORTS = "import typer, typer._adapters, rich.console, donfig"


def environment(folder: Path, pyc_cache: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDCAT_")}
    if pyc_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def build(folder: Path, env: dict[str, str]) -> None:
    """50 tiny samples in dataset ``ds`` of ``folder/shardcat.db``."""
    files = folder / "files"
    files.mkdir()
    for i in range(1, 51):
        (files / f"s{i}.txt").write_text(f"hello {i}\n")
    subprocess.run(
        [sys.executable, "-m", "shardcat", "write", "files", "shards/ds", "--dataset", "ds"],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
    )


def timed(argv: list[str], folder: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system of the child) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr.decode(errors='replace')}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def instructions(argv: list[str], folder: Path, env: dict[str, str]) -> int:
    """User-space instructions of one run under callgrind (the same on a loaded machine)."""
    out = folder / "cg.out"
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
        cwd=folder,
        # Deterministic counts: one hash seed, and no OpenBLAS threads spinning in numpy.
        env={**env, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"},
        check=True,
        capture_output=True,
    )
    for line in out.read_text().splitlines():
        m = re.match(r"(?:summary|totals): (\d+)", line)
        if m:
            return int(m.group(1))
    raise RuntimeError(f"no totals in {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs of each (default 10)")
    parser.add_argument(
        "--target",
        type=float,
        default=TARGET_RATIO,
        help=f"largest median ratio to `python -c pass` (default {TARGET_RATIO:g}: "
        f"{TARGET_SECONDS} s / {BASELINE_SECONDS} s)",
    )
    parser.add_argument(
        "--by",
        choices=("wall", "cpu"),
        default="wall",
        help="which median the verdict compares (cpu: steadier on a loaded machine)",
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="also count each call's instructions once under callgrind (load-independent; "
        "needs valgrind, ~20 s a call)",
    )
    parser.add_argument(
        "--no-pyc-cache",
        action="store_true",
        help="keep the environment's bytecode settings (PYTHONDONTWRITEBYTECODE)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shardcat-cli-") as tmp:
        folder = Path(tmp)
        env = environment(folder, not args.no_pyc_cache)
        build(folder, env)
        argvs = {"python -c pass": [sys.executable, "-c", "pass"]}
        argvs |= {name: [sys.executable, "-m", "shardcat", *a] for name, a in COMMANDS.items()}
        argvs[FLOOR] = [sys.executable, "-c", FLOOR_IMPORTS]
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in argvs}
        for argv in argvs.values():  # warm-up: bytecode written, files in the page cache
            timed(argv, folder, env)
        for _ in range(args.runs):
            for name, argv in argvs.items():
                times[name].append(timed(argv, folder, env))
        counted = (
            {n: instructions(a, folder, env) for n, a in argvs.items()} if args.instructions else {}
        )
    wall = {name: statistics.median(w for w, _ in t) for name, t in times.items()}
    cpu = {name: statistics.median(c for _, c in t) for name, t in times.items()}
    base = "python -c pass"
    print(
        f"{args.runs} runs each, interleaved; medians; target ratio {args.target:g} "
        f"({args.by}); load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'command':16} {'wall s':>8} {'ratio':>6} {'cpu s':>8} {'ratio':>6}  ok")
    failed = []
    for name in argvs:
        ratios = {"wall": wall[name] / wall[base], "cpu": cpu[name] / cpu[base]}
        ok = name in (base, FLOOR) or ratios[args.by] <= args.target
        if not ok:
            failed.append(name)
        print(
            f"{name:16} {wall[name]:8.3f} {ratios['wall']:6.1f} {cpu[name]:8.3f} "
            f"{ratios['cpu']:6.1f}  {'yes' if ok else 'NO'}"
        )
    for name, n in counted.items():
        print(f"{name:16} {n / 1e6:8.0f} M instructions {n / counted[base]:6.1f} x")
    if failed:
        print(f"over the target: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
