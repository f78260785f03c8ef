"""The write, retry and gc protocol under a hostile production day.

Concurrent appends and overwrites into one dataset, a failed job rerun while
its tasks still run, retries that write fewer shards, datasets whose names
look alike, gc after re-registration: every committed record stays readable
and byte-exact, and nothing live is ever deleted or replaced. Each test runs
on SQLite and PostgreSQL; the concurrency tests also on S3 (moto).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import dask
import dask.bag as db
import pytest

import shardcat
from shardcat.errors import CommitConflictError, DatasetExistsError
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog
from shardcat.storage import resolve

from .samples import (
    failing_tagged,
    shrinking_partition,
    slow_tagged,
    tagged_payload,
    tagged_samples,
)

NOW = __import__("datetime").timedelta(0)


def tagged_bag(tag: str, partitions: int, per_partition: int, prefix: str = "k") -> db.Bag:
    return db.from_delayed(
        [dask.delayed(tagged_samples)(tag, p, per_partition, prefix) for p in range(partitions)]
    )


def expected_keys(partitions: int, per_partition: int, prefix: str = "k") -> list[str]:
    return [f"{prefix}/{p:03d}/{i:05d}" for p in range(partitions) for i in range(per_partition)]


def assert_bytes_of(cat: Catalog, dataset: str, tag: str, keys: list[str]) -> None:
    """Every key is found and holds exactly ``tag``'s payload."""
    batch = cat.get_many(dataset, keys)
    assert batch.missing == []
    wrong = []
    for key, rec in zip(keys, batch.records):
        prefix, partition, i = key.split("/")
        if rec["bin"].data != tagged_payload(tag, prefix, int(partition), int(i)):
            wrong.append(key)
    assert wrong == [], f"{len(wrong)} of {len(keys)} records hold another job's bytes"
    for key in keys[:: max(1, len(keys) // 20)]:  # the point-lookup path too
        prefix, partition, i = key.split("/")
        assert cat.get(dataset, key)["bin"].data == tagged_payload(
            tag, prefix, int(partition), int(i)
        )


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Any) -> dict[str, Any]:
    if request.param == "local":
        return {"root": str(tmp_path / "ds"), "storage_options": None}
    s3 = request.getfixturevalue("s3")
    return {"root": f"{s3['url']}/ds", "storage_options": s3["storage_options"]}


def run_concurrently(jobs: list[Any], timeout: float = 240) -> list[Any]:
    """Start every job at the same moment; results (or exceptions) in order."""
    barrier = threading.Barrier(len(jobs))
    out: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            out[i] = jobs[i]()
        except BaseException as e:
            out[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(timeout=max(0.1, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a job hung"
    return out


# --- 1. concurrent and sequential appends --------------------------------------


def test_concurrent_appends_keep_every_committed_record(client, catalog_url, where):
    root, opts = where["root"], where["storage_options"]
    common = dict(catalog=catalog_url, client=client, storage_options=opts, progress=False)
    shardcat.write(tagged_bag("base", 4, 25, "base"), root, dataset="ds", **common)

    def append(j: int) -> Any:
        return shardcat.write(
            tagged_bag(f"job{j}", 4, 25, f"j{j}"), root, dataset="ds", mode="append", **common
        )

    results = run_concurrently([lambda j=j: append(j) for j in range(8)])
    assert [r for r in results if isinstance(r, BaseException)] == []
    cat = Catalog(catalog_url, storage_options=opts)
    assert_bytes_of(cat, "ds", "base", expected_keys(4, 25, "base"))
    for j in range(8):
        assert_bytes_of(cat, "ds", f"job{j}", expected_keys(4, 25, f"j{j}"))
    assert sum(s.record_count for s in cat.shards("ds")) == 900
    report = cat.verify("ds")
    assert report.ok, str(report)
    # Nine jobs, nine distinct sets of files: no shard object serves two jobs.
    urls = [s.url for s in cat.shards("ds")]
    assert len(set(urls)) == len(urls)
    assert gc(cat, "ds", grace=NOW, storage_options=opts).removed == 0
    assert cat.verify("ds").ok


def test_sequential_appends_keep_every_committed_record(client, catalog_url, tmp_path):
    root = str(tmp_path / "ds")
    common = dict(catalog=catalog_url, client=client, progress=False)
    for j in range(4):
        shardcat.write(
            tagged_bag(f"job{j}", 2, 20, f"j{j}"),
            root,
            dataset="ds",
            mode="create" if j == 0 else "append",
            **common,
        )
    cat = Catalog(catalog_url)
    for j in range(4):
        assert_bytes_of(cat, "ds", f"job{j}", expected_keys(2, 20, f"j{j}"))
    assert cat.verify("ds").ok


# --- 2. concurrent overwrites -----------------------------------------------------


def test_concurrent_overwrites_one_wins_and_every_lookup_returns_its_bytes(
    client, catalog_url, where
):
    root, opts = where["root"], where["storage_options"]
    common = dict(catalog=catalog_url, client=client, storage_options=opts, progress=False)
    shardcat.write(tagged_bag("old", 4, 25), root, dataset="ds", **common)

    def overwrite(tag: str) -> Any:
        return shardcat.write(
            tagged_bag(tag, 4, 25), root, dataset="ds", mode="overwrite", **common
        )

    results = run_concurrently([lambda: overwrite("A"), lambda: overwrite("B")])
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1, results  # exactly one wins ...
    assert len(lost) == 1 and isinstance(lost[0], CommitConflictError), (
        lost
    )  # ... the other is told
    assert "overwrite" in str(lost[0]) or "changed" in str(lost[0])
    cat = Catalog(catalog_url, storage_options=opts)
    tag = "B" if isinstance(results[0], BaseException) else "A"
    assert_bytes_of(cat, "ds", tag, expected_keys(4, 25))
    assert sum(s.record_count for s in cat.shards("ds")) == 100
    assert cat.verify("ds").ok
    # gc removes the replaced and the losing job's files, and nothing live.
    report = gc(cat, "ds", grace=NOW, storage_options=opts)
    assert report.removed > 0
    assert_bytes_of(cat, "ds", tag, expected_keys(4, 25))
    assert cat.verify("ds").ok


# --- 3. a failed job's tasks keep running while it is rerun ----------------------


def test_a_failed_jobs_late_tasks_never_touch_the_rerun(catalog_url, where, tmp_path):
    from distributed import Client, LocalCluster

    root, opts = where["root"], where["storage_options"]
    # Threads enough for the old job's slow tasks and the rerun's to run side by side.
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=4, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        common = dict(catalog=catalog_url, client=client, storage_options=opts, progress=False)
        # Partition 0 fails at once; the others are still writing when the job aborts.
        parts = [dask.delayed(failing_tagged)("old", 0, 50)]
        parts += [dask.delayed(slow_tagged)("old", p, 50, 6.0) for p in range(1, 4)]
        # No wait for them (as after a wait that ran out, or a killed client): they run on.
        with (
            shardcat.config.set(dask_failed_task_wait=0),
            pytest.raises(RuntimeError, match="never succeeds"),
        ):
            shardcat.write(db.from_delayed(parts), root, dataset="ds", retries=0, **common)
        # The user reruns at once, while the old job's tasks are still running.
        summary = shardcat.write(tagged_bag("new", 4, 50), root, dataset="ds", **common)
        cat = Catalog(catalog_url, storage_options=opts)
        # The failed first job took its dataset with it: the rerun's job is the only one.
        assert [j.id for j in cat.jobs("ds")] == [summary.job_id]
        # The late tasks finish their shard, the catalog refuses it, and they remove it.
        fs, path = resolve(root, opts)
        deadline = time.monotonic() + 60
        # Every file but the rerun's shards and its version's manifest (_versions/).
        while [
            p for p in fs.find(path) if f"-j{summary.job_id}-" not in p and "/_versions/" not in p
        ]:
            assert time.monotonic() < deadline, "a late task left its files behind"
            time.sleep(0.2)
            fs.invalidate_cache()
        _wait_until_idle(client)
    assert summary.records == 200
    assert_bytes_of(cat, "ds", "new", expected_keys(4, 50))
    assert cat.verify("ds").ok
    # What the late tasks wrote is theirs alone, and gc can remove it without harm.
    gc(cat, "ds", grace=NOW)
    assert_bytes_of(cat, "ds", "new", expected_keys(4, 50))
    assert cat.verify("ds").ok


def _wait_until_idle(client: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(client.processing().values()):
            return
        time.sleep(0.2)
    raise AssertionError("the cluster is still busy")


# --- 7. a killed worker whose retry writes fewer shards --------------------------


@pytest.mark.parametrize(
    ("retry", "backend"), [("fewer", "local"), ("repacked", "local"), ("fewer", "s3")]
)
def test_a_killed_attempts_extra_shards_are_never_committed(
    catalog_url, tmp_path, retry, backend, request
):
    from distributed import Client, LocalCluster

    if backend == "s3":
        s3 = request.getfixturevalue("s3")
        root, opts = f"{s3['url']}/ds", s3["storage_options"]
    else:
        root, opts = str(tmp_path / "ds"), None
    marker = str(tmp_path / "killed")
    parts = [dask.delayed(tagged_samples)("t", p, 300) for p in range(2)]
    parts.append(dask.delayed(shrinking_partition)(2, marker, retry))
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        summary = shardcat.write(
            db.from_delayed(parts),
            root,
            catalog=catalog_url,
            dataset="ds",
            shard_size="60KB",  # the killed attempt stages several shards first
            storage_options=opts,
            client=client,
            progress=False,
        )
    assert (tmp_path / "killed").exists()  # the kill really happened
    kept = 60 if retry == "fewer" else 300
    assert summary.records == 600 + kept
    cat = Catalog(catalog_url, storage_options=opts)
    assert sum(s.record_count for s in cat.shards("ds")) == 600 + kept
    keys = expected_keys(2, 300) + [f"k/002/{i:05d}" for i in range(kept)]
    assert_bytes_of(cat, "ds", "t", keys)
    if retry == "fewer":
        gone = [f"k/002/{i:05d}" for i in range(60, 300)]
        assert cat.get_many("ds", gone).missing == gone
    assert cat.verify("ds").ok


# --- 5. dataset names that look alike -------------------------------------------


def test_datasets_whose_names_look_alike_share_a_folder_safely(client, catalog_url, tmp_path):
    root = str(tmp_path / "shared")
    names = ["a/b", "a_b", "a b", "A/B", "../a_b"]
    for n, name in enumerate(names):
        shardcat.write(
            tagged_bag(f"ds{n}", 2, 30),
            root,
            catalog=catalog_url,
            dataset=name,
            client=client,
            progress=False,
        )
    cat = Catalog(catalog_url)
    for n, name in enumerate(names):
        assert_bytes_of(cat, name, f"ds{n}", expected_keys(2, 30))
        assert cat.verify(name).ok
        for shard in cat.shards(name):  # every file stays inside the folder
            assert shard.url.startswith(root + "/")
            assert "/" not in shard.url[len(root) + 1 :]
    urls = [s.url for name in names for s in cat.shards(name)]
    assert len(set(urls)) == len(urls)


# --- 4. gc never deletes what a committed row names ------------------------------


def test_gc_after_remove_and_reregister_keeps_the_live_file(catalog_url, tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    cat = Catalog(catalog_url)
    cat.create_dataset("ds", str(root))
    url = str(root / "s-000000.shard")
    with shardcat.ShardWriter(url) as w:
        for i in range(100):
            w.add(f"k{i:04d}", {"txt": f"value {i}"})
    info = w.close()
    cat.register_shard("ds", info)
    # What the DuplicateKeyError message advises: remove, then register again.
    cat.remove_shard("ds", url)
    cat.register_shard("ds", info)
    report = gc(cat, "ds", grace=NOW)
    assert (root / "s-000000.shard").exists()
    assert url not in report.deleted_shards
    assert cat.get("ds", "k0042")["txt"].decode() == "value 42"
    assert cat.get_many("ds", [f"k{i:04d}" for i in range(100)]).ok
    assert cat.verify("ds").ok
    assert cat.shards("ds", state="deleted") == []  # the tombstone is gone, the file is not


def test_gc_never_deletes_a_file_outside_the_dataset_root(catalog_url, tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    outside = tmp_path / "precious.shard"
    cat = Catalog(catalog_url)
    cat.create_dataset("ds", str(root))
    with shardcat.ShardWriter(str(outside)) as w:
        w.add("k", {"txt": "precious"})
    cat.register_shard("ds", w.close())
    cat.remove_shard("ds", str(outside))
    cat.expire("ds", keep_last=1)  # a deleted row naming a file outside the root
    report = gc(cat, "ds", grace=NOW)
    assert outside.exists()
    assert str(outside) not in report.deleted_shards
    assert any(str(outside) in line for line in report.kept)


def test_gc_spares_a_file_that_another_datasets_committed_row_names(catalog_url, tmp_path):
    root = tmp_path / "shared"
    root.mkdir()
    cat = Catalog(catalog_url)
    cat.create_dataset("one", str(root))
    cat.create_dataset("two", str(root))
    url = str(root / "s.shard")
    with shardcat.ShardWriter(url) as w:
        w.add("k", {"txt": "shared"})
    info = w.close()
    cat.register_shard("one", info)
    cat.register_shard("two", info)
    cat.remove_shard("one", url)
    gc(cat, "one", grace=NOW)
    assert (root / "s.shard").exists()
    assert cat.get("two", "k")["txt"].decode() == "shared"


# --- concurrent first-time create --------------------------------------------------


def test_concurrent_first_create_one_wins_the_other_gets_dataset_exists(catalog_url, tmp_path):
    def create() -> Any:
        with Catalog(catalog_url) as cat:
            return cat.create_dataset("fresh", str(tmp_path / "fresh"))

    for _ in range(3):  # the race is narrow: try it a few times
        with Catalog(catalog_url) as cat:
            cat.delete_dataset("fresh", missing_ok=True)
        results = run_concurrently([create, create, create, create])
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 3, results
        assert all(isinstance(e, DatasetExistsError) for e in errors), [repr(e) for e in errors]


def test_concurrent_create_mode_writes_one_creates_the_other_is_refused(
    client, catalog_url, tmp_path
):
    root = str(tmp_path / "ds")

    def create(tag: str) -> Any:
        return shardcat.write(
            tagged_bag(tag, 2, 20),
            root,
            catalog=catalog_url,
            dataset="ds",
            client=client,
            progress=False,
        )

    results = run_concurrently([lambda: create("A"), lambda: create("B")])
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], DatasetExistsError), lost
    tag = "B" if isinstance(results[0], BaseException) else "A"
    cat = Catalog(catalog_url)
    assert_bytes_of(cat, "ds", tag, expected_keys(2, 20))
    assert sum(s.record_count for s in cat.shards("ds")) == 40


def test_shard_names_hold_the_job_and_are_never_published_twice(client, sqlite_url, tmp_path):
    root = tmp_path / "ds"
    first = shardcat.write(
        tagged_bag("a", 2, 10),
        str(root),
        catalog=sqlite_url,
        dataset="ds",
        client=client,
        progress=False,
    )
    second = shardcat.write(
        tagged_bag("b", 2, 10, "b"),
        str(root),
        catalog=sqlite_url,
        dataset="ds",
        mode="append",
        client=client,
        progress=False,
    )
    assert all(f"-j{first.job_id}-" in u for u in first.shards)
    assert all(f"-j{second.job_id}-" in u for u in second.shards)
    fs, _ = resolve(str(root))
    shards = [p for p in fs.ls(str(root)) if not p.endswith("/_versions")]
    assert len(shards) == len(first.shards) + len(second.shards)


# --- 6. a replaced shard is never streamed as if it were registered ---------------


def test_read_refuses_a_shard_replaced_since_it_was_registered(client, sqlite_url, tmp_path):
    from shardcat.errors import ChecksumError

    root = str(tmp_path / "ds")
    summary = shardcat.write(
        tagged_bag("a", 2, 20),
        root,
        catalog=sqlite_url,
        dataset="ds",
        client=client,
        progress=False,
    )
    cat = Catalog(sqlite_url)
    assert shardcat.read(cat, "ds").count().compute() == 40
    victim = summary.shards[0]
    with shardcat.ShardWriter(victim) as w:  # a valid shard, same keys, other bytes
        for s in tagged_samples("b", 0, 20):
            w.write(s)
    with pytest.raises(ChecksumError, match="not the one registered"):
        shardcat.read(cat, "ds").compute()


# --- delete spares what is not the dataset's alone ----------------------------------


def test_delete_dataset_spares_files_other_datasets_name_and_files_outside_its_root(
    catalog_url, tmp_path
):
    from shardcat.orchestration.gc import delete_dataset

    root = tmp_path / "ds"
    root.mkdir()
    cat = Catalog(catalog_url)
    cat.create_dataset("doomed", str(root))
    cat.create_dataset("kept", str(root))
    urls = {}
    for name in ("own", "shared"):
        with shardcat.ShardWriter(str(root / f"{name}.shard")) as w:
            w.add(name, {"txt": name})
        urls[name] = w.close()
    with shardcat.ShardWriter(str(tmp_path / "outside.shard")) as w:
        w.add("outside", {"txt": "outside"})
    outside = w.close()
    for info in (urls["own"], urls["shared"], outside):
        cat.register_shard("doomed", info)
    cat.register_shard("kept", urls["shared"])
    report = delete_dataset(cat, "doomed")
    assert report.removed == [str(root / "own.shard")]
    assert sorted(line.split(": ", 1)[0] for line in report.kept) == sorted(
        [str(root / "shared.shard"), str(tmp_path / "outside.shard")]
    )
    assert not (root / "own.shard").exists()
    assert (root / "shared.shard").exists() and (tmp_path / "outside.shard").exists()
    assert [d.name for d in cat.datasets()] == ["kept"]
    assert cat.get("kept", "shared")["txt"].decode() == "shared"


def test_two_catalogs_job_1_on_one_cluster_each_get_their_own_tasks(client, tmp_path):
    """Job ids are per catalog: both catalogs' first jobs run at once on one cluster.

    With task keys made of the job id alone, the second job's tasks were the
    first's (the scheduler deduplicates by key) and it committed the other
    catalog's shards or failed.
    """
    from .samples import Slow, tagged_samples

    results: dict[str, Any] = {}

    def run(tag: str, samples: list[Any]) -> None:
        try:
            results[tag] = shardcat.write(
                iter(samples),  # an iterable: the client submits the tasks with their keys
                str(tmp_path / tag),
                catalog=f"sqlite:///{tmp_path / tag}.db",
                dataset="same-name",
                client=client,
                progress=False,
                batch_size=100,
            )
        except BaseException as e:
            results[tag] = e

    slow: list[Any] = tagged_samples("a", 0, 300, prefix="a")
    slow[0] = Slow(slow[0], "3.0")
    first = threading.Thread(target=run, args=("a", slow))
    first.start()
    time.sleep(1.0)  # the first job's slow task is running
    run("b", tagged_samples("b", 0, 200, prefix="b"))
    first.join(120)
    for tag, n in (("a", 300), ("b", 200)):
        assert not isinstance(results[tag], BaseException), results[tag]
        assert results[tag].job_id == 1 and results[tag].records == n
        cat = Catalog(f"sqlite:///{tmp_path / tag}.db")
        keys = list(cat.keys("same-name"))
        assert len(keys) == n and all(k.startswith(f"{tag}/") for k in keys), keys[:3]
        assert all(s.url.startswith(str(tmp_path / tag)) for s in cat.shards("same-name"))
        cat.close()
