"""Concurrent commits on PostgreSQL, from separate processes released together at their commit.

Disjoint appends all land (the optimistic commit retries the losers); two
jobs replacing one key: one lands, the other gets KeyConflictError naming it.
And on SQLite: processes opening one new catalog file at once all open it.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from typing import Any

import pytest

from shardcat.errors import CommitConflictError
from shardcat.reading import Catalog

from .helpers import write_shard

_TIMEOUT = 60.0


def _writer(
    url: str,
    root: str,
    name: str,
    keys: list[str],
    on_duplicate: str,
    staged: Any,
    go: Any,
    results: Any,
) -> None:
    """Stage one shard, wait until every writer has staged, then commit; report the outcome."""
    try:
        with Catalog(url) as cat:
            job = cat.begin_job("train")
            info = write_shard(f"{root}/{name}.shard", keys, make=lambda k: {"txt": f"{k}@{name}"})
            cat.register_shard("train", info, job=job)
            staged.wait(_TIMEOUT)
            go.wait(_TIMEOUT)
            try:
                version = cat.commit_job(job, on_duplicate=on_duplicate).version  # type: ignore[arg-type]
                results.put((name, "ok", version, []))
            except Exception as e:
                cat.abort_job(job)
                results.put((name, type(e).__name__, None, list(getattr(e, "keys", []))))
    except Exception as e:  # reported, so the test fails with the reason
        results.put((name, f"setup {type(e).__name__}: {e}", None, []))


def _run(url: str, root: str, jobs: dict[str, tuple[list[str], str]]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    staged = ctx.Barrier(len(jobs) + 1)
    go = ctx.Barrier(len(jobs))
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_writer, args=(url, root, n, k, d, staged, go, results))
        for n, (k, d) in jobs.items()
    ]
    for p in procs:
        p.start()
    staged.wait(_TIMEOUT)  # every job began at the same base version
    out = {}
    for _ in procs:
        name, outcome, version, keys = results.get(timeout=_TIMEOUT)
        out[name] = (outcome, version, keys)
    for p in procs:
        p.join(_TIMEOUT)
        assert p.exitcode == 0
    return out


@pytest.fixture
def pg_train(postgres_url: str, local_root: str) -> tuple[str, str]:
    with Catalog(postgres_url) as cat:
        cat.create_dataset("train", local_root)
        info = write_shard(f"{local_root}/base.shard", ["a", "b"], make=lambda k: {"txt": f"{k}@0"})
        cat.register_shard("train", info)
    return postgres_url, local_root


def test_disjoint_appends_from_processes_all_land(pg_train):
    url, root = pg_train
    jobs = {f"w{i}": ([f"k{i}-{j}" for j in range(20)], "error") for i in range(3)}
    out = _run(url, root, jobs)
    assert {o for o, _, _ in out.values()} == {"ok"}, out
    assert sorted(v for _, v, _ in out.values()) == [2, 3, 4]
    with Catalog(url) as cat:
        wanted = ["a", "b"] + [k for keys, _ in jobs.values() for k in keys]
        assert cat.get_many("train", wanted).ok
        assert [v.number for v in cat.log("train")] == [4, 3, 2, 1]
        assert cat.log("train")[0].total_records == len(wanted)


def test_two_processes_replacing_one_key_one_lands_the_other_is_told(pg_train):
    url, root = pg_train
    out = _run(url, root, {"x": (["a", "x1"], "replace"), "y": (["a", "y1"], "replace")})
    outcomes = sorted(o for o, _, _ in out.values())
    assert outcomes == ["KeyConflictError", "ok"], out
    winner = next(n for n, (o, _, _) in out.items() if o == "ok")
    loser = next(n for n, (o, _, _) in out.items() if o != "ok")
    assert out[loser][2] == ["a"]
    with Catalog(url) as cat:
        assert cat.get("train", "a")["txt"].decode() == f"a@{winner}"
        assert cat.get("train", "a", version=1)["txt"].decode() == "a@0"
        assert cat.get_many("train", [f"{loser}1"]).missing == [f"{loser}1"]


def test_a_commit_queues_behind_another_commit_and_lands_after_it(pg_train):
    """Another commit holds the dataset row (moving it to 2): ours waits for its lock, lands as 3."""
    import threading
    import time

    import sqlalchemy as sa

    url, root = pg_train
    with Catalog(url) as cat:
        job = cat.begin_job("train")
        cat.register_shard("train", write_shard(f"{root}/late.shard", ["late"]), job=job)
        engine = sa.create_engine(url)
        other = engine.connect()
        tx = other.begin()
        # Another commit, holding the dataset row's lock until it commits.
        other.execute(sa.text("UPDATE datasets SET version = version + 1 WHERE name = 'train'"))
        other.execute(
            sa.text(
                "INSERT INTO dataset_versions (dataset_id, number, operation) "
                "SELECT id, version, 'write' FROM datasets WHERE name = 'train'"
            )
        )
        outcome: list[object] = []
        thread = threading.Thread(target=lambda: outcome.append(cat.commit_job(job).version))
        thread.start()
        try:
            with engine.connect() as watch:
                waiting = 0
                for _ in range(600):  # until our commit's version bump waits for the row lock
                    waiting = watch.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a "
                            "ON a.pid = l.pid WHERE NOT l.granted "
                            "AND a.query LIKE '%UPDATE datasets SET version%'"
                        )
                    ).scalar_one()
                    # pg_stat_activity is a snapshot per transaction: end it, or every poll
                    # sees the query the commit ran at the first one (flaky under load).
                    watch.rollback()
                    if waiting:
                        break
                    time.sleep(0.05)
        finally:  # a failed wait must not leave the thread blocked on the lock forever
            tx.commit()
            other.close()
        assert waiting, "the commit never waited for the other one's lock"
        thread.join(_TIMEOUT)
        engine.dispose()
        assert outcome == [3]
        assert [v.number for v in cat.log("train")] == [3, 2, 1]
        assert cat.get("train", "late").key == "late"


def test_shards_a_late_attempt_stages_during_the_commit_are_never_committed(
    catalog_url, local_root
):
    """Dask reruns a task whose result died with its worker while the client commits.

    The rerun stages shards of the same keys under the open job, racing the
    commit's statements. The commit must publish exactly its manifest: the
    late shards are retired (staged before the commit) or refused (after).
    Before the job row was locked, PostgreSQL committed a late shard beside
    the manifest's (its keys twice) or failed with DuplicateKeyError.
    """
    rounds, late_shards, n = 8, 6, 150
    with Catalog(catalog_url) as cat:
        cat.create_dataset("race", local_root)
        for r in range(rounds):
            keys = [f"r{r}/{i:04d}" for i in range(n)]
            good = write_shard(f"{local_root}/race-{r}.shard", keys)
            late = [
                write_shard(f"{local_root}/race-{r}-late{j}.shard", keys)
                for j in range(late_shards)
            ]
            job = cat.begin_job("race")
            cat.register_shard("race", good, job=job)
            refused: list[int] = []

            def stage_late(
                job_id: int = job.id, late: list = late, refused: list = refused
            ) -> None:
                with Catalog(catalog_url) as other:
                    for info in late:
                        try:
                            other.register_shard("race", info, job=job_id)
                        except CommitConflictError:
                            refused.append(1)

            worker = threading.Thread(target=stage_late)
            worker.start()
            time.sleep(0.002 * r)  # the commit lands at a different point of the late stream
            cat.commit_job(job, shards=[good.path])
            worker.join(timeout=60)
            assert not worker.is_alive()
            committed = cat.shards("race")
            assert [s.url for s in committed if s.job_id == job.id] == [good.path]
            assert cat.count("race") == n * (r + 1)
            staged = cat.shards("race", state="staged")
            assert staged == [], "a shard staged under a committed job"
        assert cat.verify("race").ok


def _open_new(url: str, go: Any, results: Any) -> None:
    try:
        go.wait(_TIMEOUT)
        with Catalog(url) as cat:
            try:
                cat.create_dataset("train", "/data/train")
            except Exception as e:
                if type(e).__name__ != "DatasetExistsError":
                    raise
        results.put("ok")
    except Exception as e:
        results.put(f"{type(e).__name__}: {e}")


def test_processes_opening_one_new_sqlite_catalog_at_once_all_open_it(tmp_path):
    # A Dask job's workers may all open a catalog file no one has opened yet. Their switches
    # to WAL race; SQLite refuses one of two such switches at once (no busy handler, since
    # waiting could deadlock): it is tried again, never a CatalogLockedError. Bounded: 12
    # new files, 8 processes each (before the fix, about one file in 40 failed).
    ctx = mp.get_context("fork")
    failures: list[str] = []
    for i in range(12):
        url = f"sqlite:///{tmp_path / f'catalog-{i}.db'}"
        go, results = ctx.Barrier(8), ctx.Queue()
        procs = [ctx.Process(target=_open_new, args=(url, go, results)) for _ in range(8)]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=_TIMEOUT) for _ in procs]
        for p in procs:
            p.join(_TIMEOUT)
        failures += [o for o in outcomes if o != "ok"]
        with Catalog(url) as cat:
            assert [d.name for d in cat.datasets()] == ["train"]
    assert failures == []
