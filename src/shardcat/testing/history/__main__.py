"""Check a dumped history again, or run one: ``python -m shardcat.testing.history --help``.

``check FILE``: the checker on a history dumped by a failed run (no catalog
needed); prints its summary and every anomaly, exit status 1 if any.
``run``: one history on a SQLite file and a local folder (or the catalog
and storage given), with its own LocalCluster; the same seed plans the same
operations (the interleaving is the machine's).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .checker import summarize
from .ops import HistoryConfig
from .runner import check_dump, run_history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m shardcat.testing.history")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check a dumped history again")
    check.add_argument("file", type=Path)
    run = sub.add_parser("run", help="run and check one history")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--processes", type=int, default=3)
    run.add_argument("--ops", type=int, default=40, help="operations per process")
    run.add_argument("--catalog", help="catalog URL (default: a SQLite file in a temporary folder)")
    run.add_argument("--base", help="data folder URL (default: a temporary folder)")
    run.add_argument("--plant", help="planted bugs / forced schedules (comma-separated)")
    run.add_argument("--dump", type=Path, default=Path("."), help="folder for a failed history")
    args = parser.parse_args(argv)
    if args.command == "check":
        report = check_dump(args.file)
        print(summarize(report))
        for a in report.anomalies:
            print(f"  {a}")
        return 0 if report.ok else 1
    from distributed import LocalCluster

    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
    ):
        config = HistoryConfig(
            catalog_url=args.catalog or f"sqlite:///{tmp}/catalog.db",
            base=args.base or f"{tmp}/data",
            seed=args.seed,
            scheduler=cluster.scheduler_address,
            processes=args.processes,
            ops_per_process=args.ops,
            plant=args.plant,
        )
        result = run_history(config, Path(tmp) / "work", args.dump)
    print(result)
    for a in result.report.anomalies:
        print(f"  {a}")
    if result.dump:
        print(f"dumped: {result.dump}")
    return 0 if result.report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
