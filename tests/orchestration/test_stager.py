"""The write task's background staging: order, overlap, failures, and the inline fallbacks."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from shardcat import ShardReader
from shardcat.catalog import Catalog
from shardcat.errors import CatalogLockedError, CommitConflictError
from shardcat.orchestration.plan import WritePlan
from shardcat.orchestration.reach import in_memory
from shardcat.orchestration.stager import Stager
from shardcat.orchestration.tasks import write_partition

WAIT = 10  # seconds: a bound for every wait below, never reached when all is well


class Recorder:
    def __init__(self, fail: dict[int, BaseException] | None = None) -> None:
        self.staged: list[tuple[int, Any, str]] = []
        self.discarded: list[int] = []
        self.fail = fail or {}
        self.release = threading.Event()
        self.release.set()

    def stage(self, info: int, values: Any) -> None:
        assert self.release.wait(WAIT)
        if info in self.fail:
            raise self.fail[info]
        self.staged.append((info, values, threading.current_thread().name))

    def discard(self, info: int) -> None:
        self.discarded.append(info)


def test_shards_are_staged_in_order_on_one_background_thread():
    r = Recorder()
    with Stager(r.stage, r.discard) as s:
        for i in range(20):
            s.submit(i, [i])
    assert [x[:2] for x in r.staged] == [(i, [i]) for i in range(20)]
    assert {x[2] for x in r.staged} == {"shardcat-stage_0"}


def test_submit_returns_while_the_stage_runs_and_leaving_waits_for_it():
    r = Recorder()
    r.release.clear()
    with Stager(r.stage, r.discard) as s:
        s.submit(0, None)  # returns although the stage is blocked
        assert r.staged == []
        r.release.set()
    assert [x[0] for x in r.staged] == [0]


def test_inline_staging_runs_in_the_callers_thread():
    r = Recorder()
    with Stager(r.stage, r.discard, background=False) as s:
        s.submit(0, None)
        assert r.staged[0][2] == threading.current_thread().name


def test_after_a_conflict_the_next_shard_is_discarded_and_the_conflict_raised():
    r = Recorder(fail={1: CommitConflictError("job 7 is aborted")})
    s = Stager(r.stage, r.discard)

    def body() -> None:
        with s:
            s.submit(0, None)
            s.submit(1, None)
            s._pending[-1].exception(timeout=WAIT)  # the conflict has happened
            s.submit(2, None)

    with pytest.raises(CommitConflictError, match="job 7 is aborted"):
        body()
    assert [x[0] for x in r.staged] == [0]
    assert r.discarded == [2]  # published after the conflict: the task's alone
    assert not any(t.name.startswith("shardcat-stage") for t in threading.enumerate())


def test_shards_queued_behind_a_conflict_are_never_staged():
    r = Recorder(fail={1: CommitConflictError("job 7 is aborted")})
    r.release.clear()
    s = Stager(r.stage, r.discard)

    def body() -> None:
        with s:
            for i in range(4):
                s.submit(i, None)  # all queued: the first stage is blocked
            r.release.set()

    with pytest.raises(CommitConflictError):
        body()
    assert [x[0] for x in r.staged] == [0]
    assert r.discarded == [2, 3]


def test_another_failure_is_raised_at_the_end_and_discards_nothing():
    r = Recorder(fail={0: CatalogLockedError("catalog x is locked")})
    with pytest.raises(CatalogLockedError, match="locked"), Stager(r.stage, r.discard) as s:
        s.submit(0, None)
    assert r.discarded == [] and r.staged == []


def test_an_error_in_the_body_waits_for_the_stages_and_propagates():
    r = Recorder()
    r.release.clear()
    s = Stager(r.stage, r.discard)
    timer = threading.Timer(0.2, r.release.set)
    timer.start()

    def body() -> None:
        with s:
            s.submit(0, None)
            raise ValueError("the writer failed")

    with pytest.raises(ValueError, match="the writer failed"):
        body()
    timer.join()
    assert [x[0] for x in r.staged] == [0]  # finished before the error left the task


def test_no_thread_to_be_had_stages_inline(monkeypatch):
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(ThreadPoolExecutor, "submit", refuse)
    r = Recorder()
    with Stager(r.stage, r.discard) as s:
        s.submit(0, None)
        s.submit(1, None)
    assert [x[0] for x in r.staged] == [0, 1]
    assert {x[2] for x in r.staged} == {threading.current_thread().name}


def plan_for(cat: Catalog, root: str, job: int) -> WritePlan:
    return WritePlan(
        dataset="d",
        root=root,
        prefix="d",
        job_id=job,
        catalog=cat.handle(),
        shard_size=64 << 10,
        max_records=None,
        compression=None,
        metadata={},
        storage_options={},
        partition_base=0,
        fields=(),
        fields_entry="json",
    )


def test_an_in_memory_catalog_stages_inline(tmp_path):
    with Catalog("sqlite://") as memory, Catalog(f"sqlite:///{tmp_path}/c.db") as file:
        assert in_memory(memory) and not in_memory(file)


def test_a_task_stages_every_shard_before_it_returns(tmp_path, monkeypatch):
    threads: list[str] = []
    register = Catalog.register_shard

    def recorded(self: Catalog, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return register(self, *args, **kwargs)

    monkeypatch.setattr(Catalog, "register_shard", recorded)
    with Catalog(f"sqlite:///{tmp_path}/c.db") as cat:
        cat.create_dataset("d", str(tmp_path / "d"))
        job = cat.begin_job("d")
        samples = [{"__key__": f"k{i:05d}", "bin": bytes(i % 251) * 40} for i in range(3000)]
        result = write_partition(samples, plan_for(cat, str(tmp_path / "d"), job.id), 0)
        assert len(result.shards) > 5
        assert set(threads) == {"shardcat-stage_0"}  # beside the writing, not in its thread
        staged = cat.shards("d", state="staged")
        assert sorted(s.url for s in staged) == sorted(result.shards)
        assert sum(s.record_count for s in staged) == 3000
        cat.commit_job(job.id, shards=list(result.shards))
        assert cat.get("d", "k02999")["bin"].data == bytes(2999 % 251) * 40
        for url_ in result.shards:
            ShardReader(url_).verify()
