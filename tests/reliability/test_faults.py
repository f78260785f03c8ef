"""Storage faults: the Nth read or write fails (I/O error, timeout, short read); nothing is lost.

Over ``faulty://`` (``shardcat.testing.faults``), a local filesystem whose
plan, shared by every process, makes the Nth call of a kind fail:

* lookups and verification: every result is a typed shardcat error or
  exactly the data written, and the next call, fault gone, is served (no
  poisoned cache);
* a Dask write job on worker processes: a transient fault is retried and the
  job commits every record once; a fault that lasts fails the job with a
  typed error and leaves nothing visible; rerun without the fault, the job
  commits every record once, ``verify`` is clean and ``gc`` removes what the
  failed attempt left behind.
"""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import ShardcatError
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog
from shardcat.testing.faults import FaultPlan, register

N_KEYS = 60


def _samples(n: int = N_KEYS) -> list[dict[str, Any]]:
    return [{"__key__": f"f/{i:04d}", "txt": f"value {i} " * (1 + i % 7)} for i in range(n)]


def _want(i: int) -> str:
    return f"value {i} " * (1 + i % 7)


@pytest.fixture
def plan(tmp_path: Path) -> Any:
    p = FaultPlan(tmp_path / "plan.json")
    register(p.path)
    yield p
    register(None)


@pytest.fixture
def written(tmp_path: Path, plan: FaultPlan, sqlite_url: str) -> tuple[Catalog, str]:
    """A dataset of two shards on faulty://, written and registered with no fault armed."""
    cat = Catalog(sqlite_url)
    root = f"faulty://{tmp_path}/ds"
    cat.create_dataset("faults", root)
    samples = _samples()
    for n, part in enumerate((samples[:30], samples[30:])):
        with shardcat.ShardWriter(f"{root}/ds-{n:06d}.shard") as w:
            for s in part:
                w.write(s)
        cat.register_shard("faults", w.close())
    return cat, root


def _no_retries(get):
    return lambda key, *a, **k: 0 if key == "storage_retry_deadline" else get(key, *a, **k)


@pytest.mark.parametrize("mode", ["error", "timeout", "short"])
def test_read_faults_are_typed_errors_or_exact_data(written, plan, mode, monkeypatch):
    cat, _ = written
    # One try per read: each injected fault must reach the lookup, not be retried through.
    monkeypatch.setenv("SHARDCAT_STORAGE_RETRY_DEADLINE", "0")
    monkeypatch.setattr(shardcat.config, "get", _no_retries(shardcat.config.get))
    keys = [f"f/{i:04d}" for i in range(N_KEYS)]
    outcomes: dict[str, int] = {"refused": 0, "served": 0}
    for nth in range(1, 7):
        # A fresh lookup each time: nothing cached from a good read hides the fault.
        with Catalog(cat.url) as fresh:
            plan.arm("read", nth=nth, mode=mode)
            for i in (0, 17, 31, 59):
                try:
                    got = fresh.get("faults", keys[i]).decode()["txt"]
                except ShardcatError:
                    outcomes["refused"] += 1
                    continue
                assert got == _want(i), f"{mode} fault #{nth}: key {keys[i]} served wrong data"
                outcomes["served"] += 1
            try:
                batch = fresh.get_many("faults", keys)
            except ShardcatError:
                outcomes["refused"] += 1
            else:
                got = [r.decode()["txt"] for r in batch]
                assert got == [_want(i) for i in range(N_KEYS)]
                outcomes["served"] += 1
            plan.disarm()
            # The fault is gone: everything is served, from the same catalog object.
            assert fresh.get("faults", keys[5]).decode()["txt"] == _want(5)
            assert len(fresh.get_many("faults", keys).found()) == N_KEYS
    assert outcomes["refused"] > 0, "no fault ever reached a lookup: the test tests nothing"


@pytest.mark.parametrize("mode", ["error", "short"])
def test_verify_under_read_faults_never_calls_a_shard_clean_by_mistake(written, plan, mode):
    cat, _ = written
    refused = 0
    for nth in range(1, 5):
        with Catalog(cat.url) as fresh:
            plan.arm("read", nth=nth, mode=mode)
            try:
                report = fresh.verify("faults", workers=1)
            except ShardcatError:
                refused += 1
            else:
                if plan.fired:
                    assert not report.ok, f"{mode} fault #{nth} fired and verify called it clean"
                    refused += 1
            plan.disarm()
            assert fresh.verify("faults", workers=1).ok
    assert refused > 0


@pytest.fixture(scope="module")
def dask_client() -> Any:
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _write(client: Any, root: str, url: str, dataset: str, retries: int) -> Any:
    import dask.bag as db

    return shardcat.write(
        db.from_sequence(_samples(400), npartitions=4),
        root,
        catalog=url,
        dataset=dataset,
        shard_size="8KB",
        client=client,
        progress=False,
        retries=retries,
    )


def _check_complete(cat: Catalog, dataset: str, n: int) -> None:
    keys = list(cat.keys(dataset))
    assert len(keys) == len(set(keys)) == n
    assert cat.get(dataset, "f/0123").decode()["txt"] == _want(123)
    report = cat.verify(dataset)
    assert report.ok, str(report)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "nth"), list(itertools.product(["error", "timeout"], [1, 4, 9])))
def test_a_transient_write_fault_is_retried_and_every_record_lands_once(
    tmp_path, plan, dask_client, sqlite_url, mode, nth
):
    plan_path = str(plan.path)
    dask_client.run(register, plan_path)
    plan.arm("write", nth=nth, mode=mode)
    root = f"faulty://{tmp_path}/ds"
    summary = _write(dask_client, root, sqlite_url, "transient", retries=2)
    assert plan.fired == 1, "the fault fired in a worker"
    assert summary.records == 400
    with Catalog(sqlite_url) as cat:
        _check_complete(cat, "transient", 400)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["error", "timeout"])
def test_a_lasting_write_fault_fails_the_job_visibly_and_a_rerun_completes(
    tmp_path, plan, dask_client, sqlite_url, mode
):
    dask_client.run(register, str(plan.path))
    root = f"faulty://{tmp_path}/ds"
    plan.arm("write", nth=3, mode=mode, count=10_000)
    with pytest.raises(ShardcatError) as err:
        _write(dask_client, root, sqlite_url, "lasting", retries=1)
    assert "injected" in str(err.value) or err.value.__cause__ is not None
    with Catalog(sqlite_url) as cat:
        # A failed first job takes the dataset it created with it.
        assert cat.datasets() == [], "a failed job left its dataset behind"
    plan.disarm()
    summary = _write(dask_client, root, sqlite_url, "lasting", retries=1)
    assert summary.records == 400
    with Catalog(sqlite_url) as cat:
        _check_complete(cat, "lasting", 400)
        gc(cat, "lasting", grace=dt.timedelta(0), stale_after=dt.timedelta(0))
        live = sorted(Path(s.url).name for s in cat.shards("lasting"))
        _check_complete(cat, "lasting", 400)
    files = sorted(p.name for p in (tmp_path / "ds").iterdir() if p.name != "_versions")
    assert files == live, f"gc left {sorted(set(files) - set(live))} behind"
