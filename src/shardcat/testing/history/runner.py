"""Run one concurrent history: set up the dataset, spawn the processes, observe, check, dump.

A failed check writes the whole history (configuration and seed, every
operation, the final observation and the anomalies) to a JSON file; the
checker runs again on it alone (``python -m shardcat.testing.history check
FILE``), and the same seed plans the same operations again (``run``).
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .checker import CheckReport, check_history, summarize
from .model import Anomaly
from .observe import observe
from .ops import HistoryConfig, Op
from .worker import BARRIER_TIMEOUT, _execute, read_log, release_catalogs, run_process, warm_up

__all__ = ["HistoryResult", "check_dump", "load_dump", "run_history"]

JOIN_GRACE = 180.0
"""Seconds a process may run past the history's cap (its last operation) before it is killed."""


@dataclass
class HistoryResult:
    config: HistoryConfig
    ops: list[Op]
    observation: dict[str, Any]
    report: CheckReport
    seconds: float
    dump: Path | None = None
    killed: int = 0
    """Processes that had to be killed (their last operation's outcome is unknown)."""

    def __str__(self) -> str:
        return f"seed {self.config.seed}: {summarize(self.report)} in {self.seconds:.1f} s"


def run_history(
    config: HistoryConfig, workdir: Path, dump_dir: Path | None = None
) -> HistoryResult:
    """Run and check one history; ``workdir`` receives the processes' logs.

    A history with anomalies is dumped to ``dump_dir`` (default ``workdir``).
    """
    from distributed import Client

    from ...reading import Catalog

    t0 = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    with Catalog(config.catalog_url, storage_options=config.storage_options) as cat:
        client = None
        if config.scheduler is not None:
            client = Client(config.scheduler, timeout=60, set_as_default=False)
        try:
            if client is not None:
                client.run(warm_up)
            setup = _setup(cat, client, config)
            killed, exits = _run_processes(config, workdir)
            ops = [setup]
            ops += [op for p in range(config.processes) for op in read_log(_log(workdir, p))]
            made = max(
                (
                    int(op.result.get("version") or 0)
                    for op in ops
                    if op.ok and isinstance(op.result, dict)
                ),
                default=0,
            )
            observation = observe(cat, config, ops, made)
        finally:
            if client is not None:
                client.run(release_catalogs, cat.handle().url)
                client.close()
    report = check_history(ops, observation, config.keys)
    for p, code in enumerate(exits):
        if code != 0:  # the harness's trouble, not the catalog's: shown all the same
            report.anomalies.append(
                Anomaly(
                    "process-died", f"process {p} exited with code {code} (its stderr says why)"
                )
            )
    result = HistoryResult(config, ops, observation, report, time.monotonic() - t0, killed=killed)
    if not report.ok:
        result.dump = dump(result, dump_dir or workdir)
    return result


def _setup(cat: Any, client: Any, config: HistoryConfig) -> Op:
    """Operation 0: the dataset's first version, half the keys (chosen by the seed).

    An append adds to a dataset that exists: the dataset is created first.
    """
    keys = sorted(random.Random(config.seed).sample(config.keys, len(config.keys) // 2))
    cat.create_dataset(config.dataset, config.root)
    op = Op(0, -1, "append", {"keys": keys, "root": config.root}, t0=time.monotonic())
    op.result = _execute(cat, client, config, op)
    op.ok, op.t1 = True, time.monotonic()
    return op


def _log(workdir: Path, process: int) -> Path:
    return workdir / f"p{process}.jsonl"


def _run_processes(config: HistoryConfig, workdir: Path) -> tuple[int, list[int | None]]:
    """Spawn the processes, release them together, wait for them (bounded).

    Returns how many had to be killed, and every process's exit code.
    """
    ctx = _context()
    go = ctx.Barrier(config.processes + 1)
    procs = [
        ctx.Process(
            target=run_process, args=(config, p, str(_log(workdir, p)), go), name=f"history-p{p}"
        )
        for p in range(config.processes)
    ]
    for p in procs:
        p.start()
    # A process that died before the start breaks the barrier; its empty log tells the check.
    with contextlib.suppress(Exception):
        go.wait(BARRIER_TIMEOUT)
    deadline = time.monotonic() + config.seconds + JOIN_GRACE
    killed = 0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            killed += 1
            p.kill()
            p.join(30)
    return killed, [p.exitcode for p in procs]


def _context() -> Any:
    """Fresh processes that share nothing with this one: forked from a clean server process.

    The server imports the heavy modules once (seconds on a loaded machine), so
    each history's processes start in a fraction of a second instead of
    importing them again; nothing of the parent (connections, threads) is
    inherited, as with ``spawn``.
    """
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["shardcat.testing.history.preload"])
    return ctx


def dump(result: HistoryResult, folder: Path) -> Path:
    """Write the history as JSON; returns the file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"history-seed{result.config.seed}-{int(time.time())}.json"
    data = {
        "config": result.config.public(),
        "replay": [
            f"python -m shardcat.testing.history check {path}",
            f"python -m shardcat.testing.history run --seed {result.config.seed} "
            f"--processes {result.config.processes} --ops {result.config.ops_per_process}",
        ],
        "summary": summarize(result.report),
        "anomalies": [a.to_json() for a in result.report.anomalies],
        "ops": [op.to_json() for op in sorted(result.ops, key=lambda o: o.t0)],
        "observation": result.observation,
    }
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def load_dump(path: Path) -> tuple[dict[str, Any], list[Op], dict[str, Any]]:
    """A dumped history: its configuration, operations and observation."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["config"], [Op.from_json(o) for o in data["ops"]], data["observation"]


def check_dump(path: Path) -> CheckReport:
    """Run the checker again on a dumped history (no catalog needed)."""
    config, ops, observation = load_dump(path)
    keys = HistoryConfig(catalog_url="", base="", seed=0, universe=config["universe"]).keys
    return check_history(ops, observation, keys)
