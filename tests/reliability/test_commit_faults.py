"""PostgreSQL connections killed mid-commit, in a loop: every job lands whole or not at all.

A killer thread terminates every server connection of this test's catalog
(found by its ``application_name``) every few milliseconds while jobs are
begun, staged and committed one after another. Each job either commits
(all its records visible) or fails with a typed shardcat error; a failed
job leaves no record visible, or — when the connection died after the
server committed but before the client heard it — all of them, never a
part. Once the killer stops, every failed job is rerun as a user would (``gc``
aborts what was left open and removes its files; the shards are written
again and committed by a new job) and the final counts are exact: nothing
lost, nothing twice.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import shardcat
from shardcat.errors import ShardcatError
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog

JOBS = 30
PER_SHARD = 200
KILL_EVERY = (0.005, 0.25)  # seconds between two sweeps of the killer, drawn at random
DEADLINE = 240.0  # seconds for the whole loop


def _with_app_name(url: str, name: str) -> str:
    u = sa.make_url(url)
    return u.update_query_dict({"application_name": name}).render_as_string(hide_password=False)


class _Killer(threading.Thread):
    def __init__(self, admin_url: str, app: str) -> None:
        super().__init__(daemon=True)
        self.engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
        self.app, self.stop, self.kills = app, threading.Event(), 0

    def run(self) -> None:
        sql = sa.text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = :app AND pid <> pg_backend_pid()"
        )
        rng = random.Random(4)  # sweeps at random moments: some commits land, some are cut
        with self.engine.connect() as conn:
            while not self.stop.is_set():
                self.kills += int(conn.execute(sql, {"app": self.app}).scalar() or 0)
                time.sleep(rng.uniform(*KILL_EVERY))
        self.engine.dispose()


def _shard(root: Path, j: int, n: int) -> Any:
    with shardcat.ShardWriter(str(root / f"job{j:03d}-{n}.shard")) as w:
        for i in range(PER_SHARD):
            w.write({"__key__": f"j{j:03d}/{n}/{i:04d}", "txt": f"{j} {n} {i}"})
    return w.close()


def _run_job(cat: Catalog, dataset: str, infos: list[Any]) -> None:
    job = cat.begin_job(dataset)
    try:
        for info in infos:
            cat.register_shard(dataset, info, job=job)
        cat.commit_job(job)
    except BaseException:
        # The connection may die again, or the commit may have landed: then it is gc's business.
        with contextlib.suppress(ShardcatError):
            cat.abort_job(job)
        raise


@pytest.mark.slow
def test_jobs_land_whole_or_not_at_all_while_connections_are_killed(
    postgres_url: str, tmp_path: Path
) -> None:
    app = f"shardcat-kill-{uuid.uuid4().hex[:8]}"
    url = _with_app_name(postgres_url, app)
    with Catalog(url) as setup:
        for j in range(JOBS):
            setup.create_dataset(f"j{j:03d}", str(tmp_path))
    infos = {j: [_shard(tmp_path, j, n) for n in range(2)] for j in range(JOBS)}
    outcomes: dict[int, str] = {}
    errors: dict[int, str] = {}
    cat = Catalog(url)  # opened (schema checked) before the killing starts
    killer = _Killer(postgres_url, app)
    killer.start()
    deadline = time.monotonic() + DEADLINE
    try:
        for j in range(JOBS):
            if time.monotonic() > deadline:
                break
            try:
                _run_job(cat, f"j{j:03d}", infos[j])
                outcomes[j] = "committed"
            except ShardcatError as e:
                outcomes[j], errors[j] = "failed", f"{type(e).__name__}: {e}"
            except Exception as e:  # an untyped error is a defect: report it below
                outcomes[j], errors[j] = "untyped", f"{type(e).__name__}: {e}"
    finally:
        killer.stop.set()
        killer.join(30)
        cat.close()
    print(f"outcomes: {sorted(outcomes.values())}, connections killed: {killer.kills}")
    assert len(outcomes) == JOBS, "the loop hit its deadline"
    assert killer.kills > 0, "no connection was ever killed: the test tests nothing"
    untyped = {j: errors[j] for j, o in outcomes.items() if o == "untyped"}
    assert untyped == {}, untyped
    assert "failed" in outcomes.values(), "no commit was ever interrupted: kill more often"
    assert "committed" in outcomes.values(), "no commit ever landed: kill less often"

    with Catalog(postgres_url) as cat:
        for j, outcome in outcomes.items():
            n = cat.count(f"j{j:03d}")
            if outcome == "committed":
                assert n == 2 * PER_SHARD, f"job {j} committed but shows {n} records"
            else:
                assert n in (0, 2 * PER_SHARD), f"job {j} failed half-visible: {n} ({errors[j]})"
                if n == 0:
                    # The rerun, as a user would: gc aborts the job left open (its abort
                    # may have died too) and removes its files; the job is written again.
                    gc(cat, f"j{j:03d}", grace=dt.timedelta(0), stale_after=dt.timedelta(0))
                    _run_job(cat, f"j{j:03d}", [_shard(tmp_path, j, n) for n in range(2)])
            assert cat.count(f"j{j:03d}") == 2 * PER_SHARD
            keys = list(cat.keys(f"j{j:03d}"))
            assert len(set(keys)) == len(keys) == 2 * PER_SHARD
            assert cat.get(f"j{j:03d}", f"j{j:03d}/1/0199").decode()["txt"] == f"{j} 1 199"
            assert cat.verify(f"j{j:03d}", workers=1).ok
