"""Concurrent histories: 3 processes mix every mutating operation and reads on one dataset.

Each history runs random, seeded operations (write/append/replace/skip/
overwrite/create, delete_keys, compact, expire, gc, copy, move, tag, untag,
add_entries of a column group in modes append/replace with on_missing
error/skip, drop_group; get/get_many/keys/count/read at the latest, at
versions and at tags, reading each sample's base and group entries) from
3 processes released together, on SQLite and PostgreSQL, local files and
S3 (moto); Dask operations run on one LocalCluster of 2 worker processes
for the module. ``shardcat.testing.history`` logs every operation and
checks the history against a model of the committed versions (what is
checked: its docstrings, and docs/RELIABILITY.md "Concurrent histories").

Then the checker's own check: planted bugs and forced schedules
(``shardcat.testing.history.bugs``) in real histories must be reported.
``delete-in-compact`` / ``overwrite-in-compact`` force issue 30's race (a
delete or an overwrite of the keys a compaction rewrites, landing just
before its commit): since the fix it must leave 0 anomalies; with the fix
undone in-process (``compact-resurrects``) the checker must name the
compaction and the keys that came back. ``drop-group-stays`` (a drop_group
whose version leaves the group's records live) must be reported at the
drop's version. ``expire-after-compact`` (a commit and
an expiry right after each compaction's commit) made ``compact()`` raise
StopIteration before 9cee4cf.

A failed history is dumped as JSON (``$SHARDCAT_HISTORY_DUMPS``, default
the test's tmp folder): ``python -m shardcat.testing.history check FILE``
checks it again; the long run is ``benchmarks/reliability.py --histories N``.
Bounded: a fixed number of operations per process, a wall-clock cap per
history, a timeout on every wait.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shardcat.testing.history import WEIGHTS, HistoryConfig, HistoryResult, run_history
from shardcat.testing.history.ops import plan_ops

PROCESSES = 3
OPS = 30  # per process: 90 operations a history, ~3-6 s once the processes run
SECONDS = 60.0  # wall-clock cap of a history's operations
SEEDS = {"sqlite-local": 11, "sqlite-s3": 15, "postgresql-local": 13, "postgresql-s3": 14}
"""Seed 12 (sqlite-s3 until folds were planned too) plans no expire since."""


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """One LocalCluster with 2 worker processes for the module: write, compact and copy use it."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def _place(
    request: pytest.FixtureRequest, tmp_path: Path, database: str, storage: str
) -> tuple[str, str, dict[str, Any]]:
    url = (
        f"sqlite:///{tmp_path / 'catalog.db'}"
        if database == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    if storage == "s3":
        s3 = request.getfixturevalue("s3")
        return url, s3["url"], s3["storage_options"]
    return url, str(tmp_path / "data"), {}


def _run(config: HistoryConfig, tmp_path: Path) -> HistoryResult:
    dumps = Path(os.environ.get("SHARDCAT_HISTORY_DUMPS", tmp_path / "dumps"))
    result = run_history(config, tmp_path / "work", dumps)
    print(result)
    return result


def _failure(result: HistoryResult) -> str:
    shown = "\n".join(str(a) for a in result.report.anomalies[:20])
    return f"{result}\n{shown}\nthe history: {result.dump}"


@pytest.mark.slow
@pytest.mark.parametrize("storage", ["local", "s3"])
@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_a_concurrent_history_matches_the_model(
    database: str, storage: str, scheduler: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, base, options = _place(request, tmp_path, database, storage)
    seed = SEEDS[f"{database}-{storage}"]
    config = HistoryConfig(url, base, seed, options, scheduler, PROCESSES, OPS, SECONDS)
    _assert_a_full_clean_history(_run(config, tmp_path))


def _assert_a_full_clean_history(result: HistoryResult) -> None:
    """No anomaly, every planned operation ran, and every kind committed or answered."""
    assert result.report.anomalies == [], _failure(result)
    assert result.killed == 0
    ops = result.ops
    assert len(ops) == 1 + PROCESSES * OPS, "every planned operation ran (none hit the cap)"
    assert all(op.done for op in ops)
    assert result.report.reads > 20 and result.report.versions > 5
    # Operations of every kind committed or answered (not only failed).
    succeeded = {op.kind for op in ops if op.ok}
    assert {"replace", "delete", "compact", "expire", "get", "get_many"} <= succeeded


@pytest.mark.slow
def test_a_concurrent_history_on_a_partitioned_catalog(
    scheduler: str, tmp_path: Path, postgres_url: str
) -> None:
    """PostgreSQL with ``records`` hash-partitioned (``record_partitions``, docs/SCALE.md §6): no
    primary key, batches pruned per hash; the same history, the same model, no anomaly."""
    import sqlalchemy as sa

    import shardcat.config
    from shardcat.reading import Catalog

    with shardcat.config.set(record_partitions=4):
        Catalog(postgres_url).close()  # created partitioned; the history's processes open it
    seed = SEEDS["postgresql-local"]
    config = HistoryConfig(
        postgres_url, str(tmp_path / "data"), seed, {}, scheduler, PROCESSES, OPS, SECONDS
    )
    _assert_a_full_clean_history(_run(config, tmp_path))
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            # Still partitioned, and the history's rows are spread over the 4 partitions.
            assert (
                conn.execute(sa.text("SELECT count(DISTINCT tableoid) FROM records")).scalar() == 4
            )
    finally:
        engine.dispose()


def test_the_plans_cover_every_kind_of_operation() -> None:
    """The test's seeds plan every kind of operation somewhere (the mix is seeded: same plan)."""
    planned: set[str] = set()
    for seed in SEEDS.values():
        config = HistoryConfig("sqlite://", "/x", seed, ops_per_process=OPS)
        planned |= {s.kind for p in range(PROCESSES) for s in plan_ops(config, p)}
        assert plan_ops(config, 0) == plan_ops(config, 0)
    assert planned == set(WEIGHTS)


# --- the checker's own check: planted bugs and forced schedules ------------------------

# Weights that make each planted bug show: deletes and compactions, reads after them.
_DELETES = {"append": 2, "replace": 2, "delete": 5, "compact": 5, "get_many": 3, "get": 2}
_EXPIRES = {
    "append": 2,
    "replace": 3,
    "delete": 4,
    "compact": 4,
    "expire": 3,
    "gc": 3,
    "get_many": 2,
}
# Group writes and drops, reads after them.
_GROUPS = {"append": 2, "add_entries": 5, "drop_group": 2, "delete": 1, "get_many": 4, "get": 2}
# Group writes and folds, reads after them.
_FOLDS = {"append": 2, "add_entries": 5, "fold": 3, "delete": 1, "get_many": 3, "get": 2}
PLANTED = {
    # name: (weights, anomaly kinds of which at least one must be reported)
    "lost-delete": (_DELETES, {"wrong-read", "wrong-version"}),
    "stale-read": (
        {"append": 3, "replace": 3, "delete": 3, "get_many": 6, "get": 3},
        {"wrong-read"},
    ),
    "phantom-failure": (_DELETES, {"failed-op-left-version"}),
    "expire-retires-kept": (
        _EXPIRES,
        {"wrong-version", "kept-version-unreadable", "wrong-read", "read-failed"},
    ),
    # A dropped group's entries still read: at the drop's version, and after it.
    "drop-group-stays": (_GROUPS, {"wrong-read", "wrong-version"}),
    # A fold's group records still live: the reads merge the same entry twice (the same value),
    # but the log counts them (total_records) and the group's records keep the old entry after a
    # base replace drops it from the base.
    "fold-keeps-group": (_FOLDS, {"wrong-count", "wrong-read", "wrong-version"}),
}
PLANTED_SEEDS = {"drop-group-stays": 2}
"""Seeds other than 7: seed 7's plan never drops a group after adding one."""


def _planted(
    tmp_path: Path, scheduler: str, plant: str, weights: dict[str, int], seed: int = 7
) -> HistoryResult:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = HistoryConfig(
        f"sqlite:///{tmp_path / 'catalog.db'}",
        str(tmp_path / "data"),
        seed,
        scheduler=scheduler,
        processes=1,
        ops_per_process=30,
        seconds=SECONDS,
        plant=plant,
        weights=weights,
    )
    return _run(config, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("plant", sorted(PLANTED))
def test_the_checker_reports_a_planted_bug(plant: str, scheduler: str, tmp_path: Path) -> None:
    """One process: the history is a function of its seed, so the bug shows in every run.

    (With two processes whether it showed depended on the interleaving: expire-retires-kept
    went unseen in some runs even over three seeds. Seed 7 reaches each planted bug but
    those of :data:`PLANTED_SEEDS`; without the bug each of those seeds has no anomaly.)
    """
    weights, kinds = PLANTED[plant]
    result = _planted(tmp_path, scheduler, plant, weights, seed=PLANTED_SEEDS.get(plant, 7))
    assert {a.kind for a in result.report.anomalies} & kinds, f"{plant} unseen: {_failure(result)}"
    assert result.dump is not None and result.dump.exists()


@pytest.mark.slow
def test_folds_racing_group_writes_match_the_model(scheduler: str, tmp_path: Path) -> None:
    """Three processes fold the group into the base (``compact(fold_groups=True)``) while others
    add and fix its entries, replace and delete keys and compact: every fold commits exactly
    what the model says or is refused for a change the model sees inside its window, and
    add_entries of keys whose base holds the entry is refused (EntryExistsError)."""
    weights = {**_FOLDS, "replace": 3, "compact": 2, "expire": 1, "gc": 1, "read": 2}
    config = HistoryConfig(
        f"sqlite:///{tmp_path / 'catalog.db'}",
        str(tmp_path / "data"),
        21,
        scheduler=scheduler,
        processes=PROCESSES,
        ops_per_process=OPS,
        seconds=SECONDS,
        weights=weights,
    )
    result = _run(config, tmp_path)
    assert result.report.anomalies == [], _failure(result)
    folded = [op for op in result.ops if op.kind == "fold" and op.ok and op.result["folded"]]
    assert folded, "no fold folded a group: the mix never ran"


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["delete-in-compact", "overwrite-in-compact"])
def test_issue_30s_race_forced_in_every_compaction_leaves_no_anomaly(
    schedule: str, scheduler: str, tmp_path: Path
) -> None:
    """Every compaction that rewrites records is raced by a delete of those keys (or an
    overwrite) committed just before its own commit. Before the fix the deleted keys came
    back (the checker reported them at the compaction's version); now none does."""
    result = _planted(tmp_path, scheduler, schedule, _DELETES)
    injected = [op for op in result.ops if op.id % 1000 > 500]
    assert injected, "no compaction rewrote anything: the race never ran"
    assert result.report.anomalies == [], _failure(result)


@pytest.mark.slow
def test_the_checker_reports_issue_30s_bug_with_the_fix_undone(
    scheduler: str, tmp_path: Path
) -> None:
    """The same forced race with the fix undone in-process: the deleted keys come back at the
    compaction's version, and the checker names that compaction among the suspects."""
    result = _planted(tmp_path, scheduler, "compact-resurrects,delete-in-compact", _DELETES)
    back = [a for a in result.report.anomalies if a.kind in ("wrong-read", "wrong-version")]
    assert back, _failure(result)
    compactions = {op.id for op in result.ops if op.kind == "compact" and op.ok}
    assert any(
        "rewritten since by compact op" in a.detail and set(a.ops) & compactions for a in back
    )


@pytest.mark.slow
def test_a_compaction_whose_version_expires_at_once_still_reports_it(
    scheduler: str, tmp_path: Path
) -> None:
    """Right after each compaction's commit (before compact() returns) another commit and an
    expiry keeping only that one run: the compaction must still report its version. Before
    9cee4cf compact() read its version's row from the log after the commit and raised an
    untyped StopIteration, its version committed (every forced race; the checker reported
    an untyped error and a version no operation reported)."""
    result = _planted(tmp_path, scheduler, "expire-after-compact", _DELETES)
    assert any(op.id % 1000 > 500 for op in result.ops), "no compaction committed"
    assert result.report.anomalies == [], _failure(result)
