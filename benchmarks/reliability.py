"""The long bad-input run of the reliability suite, and the table in docs/RELIABILITY.md.

Usage::

    .venv/bin/python benchmarks/reliability.py [--shard 6000] [--tar 2000] [--taridx 2000]
                                               [--seed N] [--update-docs] [--kills N]
    .venv/bin/python benchmarks/reliability.py --histories N [--ops 40] [--processes 3]
                                               [--backends sqlite-local,...] [--plant NAME]
                                               [--seed N] [--update-docs]

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

``--histories N`` runs N concurrent histories (``shardcat.testing.history``:
``--processes`` processes of ``--ops`` random operations each, on one
dataset) on each backend (SQLite or PostgreSQL, local files or S3 on a moto
server), seeds ``--seed``, ``--seed`` + 1, ..., all on one Dask LocalCluster
of 2 worker processes; prints the checker's table and every anomaly (each
history with one is dumped as JSON under ``--dump``, for
``python -m shardcat.testing.history check FILE``) and, with
``--update-docs``, writes the table into docs/RELIABILITY.md between its
``histories`` markers. Exit status 1 if any history had an anomaly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardcat import __version__
from shardcat.testing.badinput import FAILURES, SEED, RunReport, run_bad_input
from shardcat.testing.mutations import KINDS

DOC = Path(__file__).resolve().parents[1] / "docs" / "RELIABILITY.md"
BEGIN, END = "<!-- bad-input:begin -->", "<!-- bad-input:end -->"
HISTORY_MARKERS = ("<!-- histories:begin -->", "<!-- histories:end -->")
BACKENDS = ("sqlite-local", "sqlite-s3", "postgresql-local", "postgresql-s3")
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
    parser.add_argument("--histories", type=int, default=0, help="concurrent histories per backend")
    parser.add_argument("--ops", type=int, default=40, help="operations per process of a history")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--plant", default=None, help="planted bugs / forced schedules (bugs.py)")
    parser.add_argument("--dump", default="history-dumps", help="folder for failed histories")
    args = parser.parse_args()
    if args.kills:
        return kill_clients(args.kills)
    if args.histories:
        seed = args.seed if args.seed != SEED else 1
        backends = args.backends.split(",")
        text, failed = run_histories(
            args.histories, backends, seed, args.ops, args.processes, args.plant, Path(args.dump)
        )
        print(text)
        if args.update_docs:
            _replace_between(HISTORY_MARKERS, text)
        return 1 if failed else 0
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
        _replace_between((BEGIN, END), text)
    return 1 if any(r.failures for r in reports.values()) else 0


def _replace_between(markers: tuple[str, str], text: str) -> None:
    """Write ``text`` into docs/RELIABILITY.md between the two markers."""
    begin, end = markers
    doc = DOC.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not pattern.search(doc):
        raise SystemExit(f"{DOC} has no {begin} ... {end} markers")
    DOC.write_text(pattern.sub(lambda _: f"{begin}\n{text}{end}", doc), encoding="utf-8")


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


# --- concurrent histories ------------------------------------------------------------


def run_histories(
    n: int,
    backends: list[str],
    first_seed: int,
    ops: int,
    processes: int,
    plant: str | None,
    dump: Path,
) -> tuple[str, bool]:
    """``n`` histories per backend on one LocalCluster; the Markdown table, and whether any failed."""
    import tempfile

    from distributed import LocalCluster

    from shardcat.testing.history import HistoryConfig, run_history

    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise SystemExit(f"unknown backends {unknown}; known: {', '.join(BACKENDS)}")
    t0 = time.perf_counter()
    rows = []
    failed = False
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        _places() as place,
    ):
        for backend in backends:
            row = Counter()
            bad_seeds = []
            for seed in range(first_seed, first_seed + n):
                with (
                    tempfile.TemporaryDirectory() as tmp,
                    place(backend, Path(tmp)) as (url, base, opts),
                ):
                    config = HistoryConfig(
                        url,
                        base,
                        seed,
                        storage_options=opts,
                        scheduler=cluster.scheduler_address,
                        processes=processes,
                        ops_per_process=ops,
                        plant=plant,
                    )
                    result = run_history(config, Path(tmp) / "work", dump)
                report = result.report
                print(f"{backend} {result}", flush=True)
                for a in report.anomalies[:20]:
                    print(f"  {a}", flush=True)
                if result.dump:
                    print(f"  dumped: {result.dump}", flush=True)
                row.update(
                    histories=1,
                    operations=report.operations,
                    reads=report.reads,
                    pairs=report.pairs,
                    explained=sum(report.tolerated.values()),
                    anomalies=len(report.anomalies),
                    killed=result.killed,
                )
                if report.anomalies:
                    bad_seeds.append(seed)
            failed = failed or bool(bad_seeds)
            rows.append((backend, row, bad_seeds))
    seconds = time.perf_counter() - t0
    lines = [
        f"Seeds {first_seed}-{first_seed + n - 1}; {processes} processes x {ops} operations"
        + (f"; planted: {plant}" if plant else "")
        + f"; shardcat {__version__}; Python {platform.python_version()}; {seconds:.0f} s.",
        "",
        "| backend | histories | operations | reads checked | (version, key) pairs checked "
        "| typed errors explained by a racing gc/move | anomalies | seeds with anomalies |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for backend, row, bad in rows:
        lines.append(
            f"| {backend} | {row['histories']} | {row['operations']:,} | {row['reads']:,} | "
            f"{row['pairs']:,} | {row['explained']} | {row['anomalies']} | "
            f"{', '.join(map(str, bad)) or 'none'} |"
        )
    return "\n".join(lines) + "\n", failed


@contextlib.contextmanager
def _places() -> Iterator[Any]:
    """``place(backend, tmp)``: a context giving (catalog URL, data URL, storage options).

    SQLite is a file under ``tmp``; PostgreSQL a schema of its own on
    ``$SHARDCAT_TEST_POSTGRES_URL`` (dropped afterwards); S3 a folder of its
    own in the bucket of one moto server (``benchmarks/moto_server.py``, stock
    moto) for the whole run.
    """
    import uuid

    server: list[Any] = []

    def s3() -> tuple[str, dict[str, Any]]:
        if not server:
            if not __package__:  # run as a script: make the benchmarks package importable
                sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from benchmarks.moto_server import MotoServer

            server.append(MotoServer(ranges=False, bucket="histories"))
        return f"s3://histories/{uuid.uuid4().hex[:12]}", server[0].storage_options()

    @contextlib.contextmanager
    def place(backend: str, tmp: Path) -> Iterator[tuple[str, str, dict[str, Any]]]:
        database, storage = backend.split("-")
        base, options = s3() if storage == "s3" else (str(tmp / "data"), {})
        if database == "sqlite":
            yield f"sqlite:///{tmp / 'catalog.db'}", base, options
            return
        import sqlalchemy as sa

        server_url = os.environ.get(
            "SHARDCAT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        )
        schema = f"h_{uuid.uuid4().hex[:16]}"
        admin = sa.create_engine(server_url)
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        sep = "&" if "?" in server_url else "?"
        try:
            yield f"{server_url}{sep}options=-csearch_path%3D{schema}", base, options
        finally:
            with admin.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
            admin.dispose()

    try:
        yield place
    finally:
        if server:
            server[0].stop()


if __name__ == "__main__":
    sys.exit(main())
