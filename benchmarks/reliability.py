"""The long bad-input run of the reliability suite, and the table in docs/RELIABILITY.md.

Usage::

    .venv/bin/python benchmarks/reliability.py [--shard 6000] [--tar 2000] [--taridx 2000]
                                               [--seed N] [--update-docs] [--kills N]

Runs damaged shards, tars and TARIDX files (``shardcat.testing.badinput``:
each case in a worker capped at 2 GiB of address space, 5 s per case)
through every read path, prints a Markdown table of outcomes per subject
and mutation kind, and with ``--update-docs`` writes it into
docs/RELIABILITY.md between its ``bad-input`` markers. Exit status 1 if any
case failed (wrong data, an untyped error, a hang or a crash).

``--kills N`` then runs the killed-client suite
(``tests/reliability/test_killed_clients.py``: a client SIGKILLed at N
moments spread over its commit, on SQLite and on PostgreSQL, then checked,
gc'd and rerun; CI runs 6) and prints its tallies. PostgreSQL comes from
``$SHARDCAT_TEST_POSTGRES_URL`` as in the tests.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from shardcat import __version__
from shardcat.testing.badinput import FAILURES, SEED, RunReport, run_bad_input
from shardcat.testing.mutations import KINDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- bad-input:begin -->", "<!-- bad-input:end -->"
OUTCOMES = ("refused", "mixed", "intact", "accepted", *FAILURES)


def table(reports: dict[str, RunReport], seed: int, seconds: float) -> str:
    lines = [
        f"Seed {seed}; shardcat {__version__}; Python {platform.python_version()} on "
        f"{platform.machine()} ({platform.system()}); {seconds:.0f} s.",
        "",
        "| file | damage | cases | " + " | ".join(OUTCOMES) + " | lost |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in OUTCOMES) + " | --- |",
    ]
    for subject, report in reports.items():
        by_kind: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
        for r in report.results:
            by_kind[r.kind][r.outcome] += 1
        for kind in KINDS:
            c = by_kind[kind]
            n = sum(c.values())
            failed = sum(c[f] for f in FAILURES)
            lost = "nothing" if failed == 0 else f"**{failed} failed**"
            cells = " | ".join(str(c[o]) for o in OUTCOMES)
            lines.append(f"| {subject} | {kind} | {n} | {cells} | {lost} |")
        total = Counter(r.outcome for r in report.results)
        cells = " | ".join(f"**{total[o]}**" for o in OUTCOMES)
        lines.append(f"| **{subject}** | all | **{len(report.results)}** | {cells} | |")
        lines.append(f"| | slowest case | {report.slowest:.2f} s |" + " |" * (len(OUTCOMES) + 1))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shard", type=int, default=6000)
    parser.add_argument("--tar", type=int, default=2000)
    parser.add_argument("--taridx", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--update-docs", action="store_true")
    parser.add_argument("--kills", type=int, default=0, help="killed-client moments per database")
    args = parser.parse_args()
    if args.kills:
        return kill_clients(args.kills)
    t0 = time.perf_counter()
    reports = {}
    for subject in ("shard", "tar", "taridx"):
        count = getattr(args, subject)
        reports[subject] = run_bad_input(subject, count, seed=args.seed)
        for r in reports[subject].failures:
            print(f"FAILED {subject} case {r.case} {r.kind} ({r.detail}): {r.outcome}: {r.message}")
    text = table(reports, args.seed, time.perf_counter() - t0)
    print(text)
    if args.update_docs:
        doc = DOC.read_text(encoding="utf-8")
        pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
        DOC.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}{END}", doc), encoding="utf-8")
    return 1 if any(r.failures for r in reports.values()) else 0


def kill_clients(kills: int) -> int:
    """The killed-client suite with ``kills`` moments per database; its tallies printed."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", "-n", "0",
         "-o", "timeout=0", "tests/reliability/test_killed_clients.py", "-k", "plain_client_killed_during"],
        cwd=root,
        env={**os.environ, "SHARDCAT_RELIABILITY_KILLS": str(kills)},
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    for line in done.stdout.splitlines():
        if "KILLED-IN-COMMIT" in line or " passed" in line or " failed" in line:
            print(line.lstrip("."))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
