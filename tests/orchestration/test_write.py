"""shardcat.write / shardcat.read on a real Dask LocalCluster with worker processes."""

from __future__ import annotations

import threading
import time

import dask
import dask.bag as db
import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa

import shardcat
from shardcat.errors import (
    BucketNotFoundError,
    DatasetExistsError,
    DatasetNotFoundError,
    DatasetRootError,
    DuplicateKeyError,
    InvalidKeyError,
    KeyNotFoundError,
)
from shardcat.orchestration.write import WriteSummary
from shardcat.reading import Catalog

from .samples import (
    AlwaysFail,
    FailLate,
    FailOnce,
    NoKeyLogged,
    make_samples,
    partition_with,
    trickling,
)


def assert_holds(record, sample) -> None:
    """The record read back is exactly the sample that was written: key, bytes and values."""
    assert record.key == sample["__key__"]
    assert set(record.entries) == {"bin", "json", "npy"}
    assert record["bin"].data == sample["bin"]
    assert record["json"].decode() == sample["json"]
    np.testing.assert_array_equal(record["npy"].decode(), sample["npy"])


def sample_bag(partitions: int, per_partition: int, prefix: str = "s") -> db.Bag:
    return db.from_delayed(
        [dask.delayed(make_samples)(p, per_partition, prefix) for p in range(partitions)]
    )


def test_bag_writes_numbered_shards_and_every_record_is_found(client, tmp_path, sqlite_url):
    summary = shardcat.write(
        sample_bag(4, 300),
        str(tmp_path / "ds"),
        catalog=sqlite_url,
        dataset="train",
        shard_size="150KB",
        client=client,
        progress=False,
    )
    assert summary.records == 1200
    assert summary.partitions == 4
    assert len(summary.shards) > 4  # size-based rollover inside partitions
    names = sorted(p.name for p in (tmp_path / "ds").glob("*.shard"))
    assert names[0] == f"train-j{summary.job_id}-000000-000.shard"  # dataset, job, partition, index
    assert [u.rsplit("/", 1)[1] for u in summary.shards] == names
    expanded = [
        u for pattern in summary.shard_patterns for u in shardcat.storage.expand_braces(pattern)
    ]
    assert expanded == summary.shards

    cat = Catalog(sqlite_url)
    rec = cat.get("train", "s/002/00123")
    assert rec["json"].decode() == {"partition": 2, "i": 123}
    np.testing.assert_array_equal(rec["npy"].decode(), np.full(3, 123, dtype=np.int32))
    batch = cat.get_many("train", [f"s/{p:03d}/{i:05d}" for p in range(4) for i in range(300)])
    assert batch.ok

    bag = shardcat.read(cat, "train")
    assert bag.npartitions == len(summary.shards)
    keys = bag.pluck("__key__").compute()
    assert len(keys) == len(set(keys)) == 1200
    only_json = shardcat.read(cat, "train", entries=["json"]).take(1)[0]
    assert set(only_json) == {"__key__", "json"}


def test_dask_dataframe_rows_become_samples(client, tmp_path, sqlite_url):
    import dask.dataframe as dd

    frame = pd.DataFrame(
        {
            "id": [f"row/{i:04d}" for i in range(200)],
            "caption": [f"caption {i}" for i in range(200)],
            "label": list(range(200)),
            "jpg": [bytes([i % 256]) * 50 for i in range(200)],
        }
    )
    # Binary columns must stay Python objects: dask would turn them into Arrow strings.
    with dask.config.set({"dataframe.convert-string": False}):
        ddf = dd.from_pandas(frame, npartitions=3)
    summary = shardcat.write(
        ddf,
        str(tmp_path / "df"),
        catalog=sqlite_url,
        dataset="frame",
        key_column="id",
        client=client,
        progress=False,
    )
    assert (summary.records, summary.partitions) == (200, 3)  # one task per partition
    rec = Catalog(sqlite_url).get("frame", "row/0042")
    # The scalar columns share one JSON entry; bytes stay an entry of their own.
    assert set(rec) == {"json", "jpg"}
    assert rec["json"].decode() == {"caption": "caption 42", "label": 42}
    assert rec["jpg"].content_type == "image/jpeg"
    assert rec["jpg"].data == bytes([42]) * 50


def test_plain_iterable_on_memory_backend_with_an_in_process_cluster(tmp_path):
    catalog = f"sqlite:///{tmp_path / 'cat.db'}"
    samples = (s for p in range(3) for s in make_samples(p, 150, "it"))
    summary = shardcat.write(
        samples,
        "memory://shardcat-tests/iterable",
        catalog=catalog,
        dataset="it",
        batch_size=100,
        progress=False,
    )
    assert summary.records == 450
    assert summary.partitions == 5  # 450 samples in batches of 100
    cat = Catalog(catalog)
    assert cat.get("it", "it/001/00007")["json"].decode() == {"partition": 1, "i": 7}
    assert all(s.url.startswith("memory://") for s in cat.shards("it"))


def test_s3_credentials_reach_workers_but_never_the_catalog(client, s3, sqlite_url):
    url = f"{s3['url']}/datasets/train"
    summary = shardcat.write(
        sample_bag(2, 100, "s3"),
        url,
        catalog=sqlite_url,
        dataset="s3train",
        storage_options=s3["storage_options"],
        client=client,
        progress=False,
    )
    assert summary.records == 200
    cat = Catalog(sqlite_url, storage_options=s3["storage_options"])
    assert cat.get("s3train", "s3/001/00050")["json"].decode() == {"partition": 1, "i": 50}
    assert (
        shardcat.read(cat, "s3train", storage_options=s3["storage_options"]).count().compute()
        == 200
    )
    # Nothing secret anywhere in the catalog.
    engine = sa.create_engine(sqlite_url)
    with engine.connect() as conn:
        for table in ("datasets", "jobs", "shards"):
            for row in conn.execute(sa.text(f"SELECT * FROM {table}")):
                text = " ".join(str(v) for v in row)
                assert "testing" not in text
                assert s3["endpoint"] not in text
    engine.dispose()


def test_a_failing_partition_leaves_nothing_visible(client, tmp_path, sqlite_url):
    marker = str(tmp_path / "never")
    shardcat.write(
        sample_bag(1, 10, "first"),
        str(tmp_path / "ds"),
        catalog=sqlite_url,
        dataset="fail",
        client=client,
        progress=False,
    )
    parts = [dask.delayed(make_samples)(p, 100) for p in range(3)]
    parts.append(dask.delayed(partition_with)(3, 100, AlwaysFail, 50, marker))
    with pytest.raises(RuntimeError, match="never succeeds"):
        shardcat.write(
            db.from_delayed(parts),
            str(tmp_path / "ds"),
            catalog=sqlite_url,
            dataset="fail",
            mode="append",
            client=client,
            retries=1,
            progress=False,
        )
    cat = Catalog(sqlite_url)
    with pytest.raises(KeyNotFoundError):
        cat.get("fail", "s/000/00001")  # its partition succeeded and was staged, never committed
    assert cat.count("fail") == 10  # the dataset existed before: it stays, as it was
    assert all(s.state == "deleted" for s in cat.shards("fail", state=None) if "-j1-" not in s.url)


def test_a_samples_own_error_is_raised_once_never_retried(client, tmp_path, sqlite_url):
    log = str(tmp_path / "attempts")
    bad = [*make_samples(1, 20), NoKeyLogged(log), *make_samples(2, 20)]
    parts = [dask.delayed(make_samples)(0, 50), dask.delayed(lambda: bad)()]
    cat = Catalog(sqlite_url)
    # Through a bag, then a plain iterable (tasks submitted as the samples come).
    for data, dataset in (
        (db.from_delayed(parts), "nokey"),
        ([{"__key__": "a", "txt": "x"}, {"txt": "no key"}], "nokey2"),
    ):
        with pytest.raises(InvalidKeyError, match="sample has no '__key__'"):
            shardcat.write(
                data,
                str(tmp_path / dataset),
                catalog=sqlite_url,
                dataset=dataset,
                client=client,
                retries=2,
                progress=False,
            )
        assert dataset not in [d.name for d in cat.datasets()]  # went with its failed first job
        # A task still running when the job failed (the good partition) publishes its shard,
        # is refused by the catalog and removes it itself: wait for that, bounded.
        for _ in range(300):
            if not list((tmp_path / dataset).glob("*.shard")):
                break
            time.sleep(0.1)
        assert list((tmp_path / dataset).glob("*.shard")) == []
    # The sample is read in the task that writes its shard: one attempt, not three.
    with open(log) as f:
        assert len(f.read().split()) == 1


def test_a_retried_task_rewrites_its_shards_and_records_stay_unique(client, tmp_path, sqlite_url):
    marker = str(tmp_path / "failed-once")
    parts = [dask.delayed(make_samples)(p, 200) for p in range(2)]
    # Fails after its first shards were written and staged, then succeeds on retry.
    parts.append(dask.delayed(partition_with)(2, 200, FailOnce, 150, marker))
    summary = shardcat.write(
        db.from_delayed(parts),
        str(tmp_path / "ds"),
        catalog=sqlite_url,
        dataset="retry",
        shard_size="60KB",
        client=client,
        retries=2,
        progress=False,
    )
    assert summary.records == 600
    cat = Catalog(sqlite_url)
    keys = shardcat.read(cat, "retry").pluck("__key__").compute()
    assert len(keys) == len(set(keys)) == 600
    assert sum(s.record_count for s in cat.shards("retry")) == 600


def test_duplicate_keys_within_a_job_are_reported_and_nothing_commits(client, tmp_path, sqlite_url):
    parts = [dask.delayed(make_samples)(0, 50), dask.delayed(make_samples)(0, 50)]
    with pytest.raises(DuplicateKeyError) as err:
        shardcat.write(
            db.from_delayed(parts),
            str(tmp_path / "ds"),
            catalog=sqlite_url,
            dataset="dups",
            client=client,
            progress=False,
        )
    assert "s/000/00000" in err.value.keys
    assert Catalog(sqlite_url).datasets() == []  # nothing committed; the dataset went too
    assert list((tmp_path / "ds").glob("*.shard")) == []


def test_modes_create_and_append(client, tmp_path, sqlite_url):
    root = str(tmp_path / "ds")
    shardcat.write(
        sample_bag(1, 50, "a"), root, catalog=sqlite_url, dataset="m", client=client, progress=False
    )
    with pytest.raises(DatasetExistsError):
        shardcat.write(
            sample_bag(1, 50, "b"),
            root,
            catalog=sqlite_url,
            dataset="m",
            client=client,
            progress=False,
        )
    second = shardcat.write(
        sample_bag(2, 50, "b"),
        root,
        catalog=sqlite_url,
        dataset="m",
        mode="append",
        client=client,
        progress=False,
    )
    # The appended job numbers its partitions after the first job's; its names hold its id.
    assert second.shards[0].endswith(f"m-j{second.job_id}-000001-000.shard")
    cat = Catalog(sqlite_url)
    assert sum(s.record_count for s in cat.shards("m")) == 150
    assert_holds(cat.get("m", "a/000/00001"), make_samples(0, 50, "a")[1])
    assert_holds(cat.get("m", "b/001/00049"), make_samples(1, 50, "b")[49])
    with pytest.raises(DuplicateKeyError):
        shardcat.write(
            sample_bag(1, 5, "a"),
            root,
            catalog=sqlite_url,
            dataset="m",
            mode="append",
            client=client,
            progress=False,
        )
    assert sum(s.record_count for s in cat.shards("m")) == 150


def test_append_needs_the_dataset_and_its_own_folder(client, tmp_path, catalog_url):
    """A misspelt name or another folder is refused before anything is written."""
    root = str(tmp_path / "ds")

    def append(dataset: str, url: str) -> WriteSummary:
        return shardcat.write(
            sample_bag(1, 5, "x"),
            url,
            catalog=catalog_url,
            dataset=dataset,
            mode="append",
            client=client,
            progress=False,
        )

    with pytest.raises(DatasetNotFoundError, match=r"cannot append: no dataset named 'm'"):
        append("m", root)  # the catalog is empty: an append never starts a dataset
    shardcat.write(
        sample_bag(1, 5, "a"), root, catalog=catalog_url, dataset="m", client=client, progress=False
    )
    with pytest.raises(DatasetNotFoundError, match=r"cannot append: no dataset named 'mm'") as e:
        append("mm", root)
    assert "known datasets: 'm'" in str(e.value) and "mode='create'" in str(e.value)
    assert "--mode create" in e.value.render("cli")
    with pytest.raises(DatasetRootError, match="one dataset lives in one folder") as e:
        append("m", str(tmp_path / "elsewhere"))
    assert root in str(e.value) and f"shardcat copy m {tmp_path / 'elsewhere'} --move" in (
        e.value.render("cli")
    )
    assert not (tmp_path / "elsewhere").exists()
    with Catalog(catalog_url) as cat:
        assert [d.name for d in cat.datasets()] == ["m"]
        assert [j.state for j in cat.jobs("m")] == ["committed"]  # no job was begun
    assert append("m", root + "/").records == 5  # the same folder, however it is written


def test_a_failed_first_write_leaves_no_dataset_behind(client, tmp_path, catalog_url):
    """A source failing mid-job: the dataset it created goes, with the shards it wrote."""
    root = tmp_path / "ds"
    parts = [dask.delayed(make_samples)(p, 100) for p in range(3)]
    # Fails once the other partitions have staged their shards.
    parts.append(dask.delayed(partition_with)(3, 100, FailLate, 50, "2"))
    with pytest.raises(RuntimeError, match="never succeeds"):
        shardcat.write(
            db.from_delayed(parts),
            str(root),
            catalog=catalog_url,
            dataset="first",
            client=client,
            retries=0,
            progress=False,
        )
    with Catalog(catalog_url) as cat:
        assert cat.datasets() == []
        assert list(root.glob("*.shard")) == []
        # The rerun, into another folder, starts the dataset there.
        summary = shardcat.write(
            sample_bag(1, 5), str(tmp_path / "right"), catalog=cat, dataset="first",
            client=client, progress=False,
        )  # fmt: skip
        assert cat.info("first").root_url == str(tmp_path / "right")
        assert cat.count("first") == 5 and summary.job_id == cat.jobs("first")[0].id


def test_a_failed_write_returns_once_its_running_tasks_have_stopped(client, tmp_path, sqlite_url):
    """A task a worker was running when the job failed cannot be interrupted; the write waits
    until it stops at its next shard, so the clean-up sees the last file it published."""
    log = tmp_path / "trickle.log"
    parts = [
        dask.delayed(trickling)(0, 100, 0.25, str(log)),  # 25 s alone, a shard every few samples
        dask.delayed(partition_with)(1, 20, FailLate, 10, "1.0"),
    ]
    with pytest.raises(RuntimeError, match="never succeeds"):
        shardcat.write(
            db.from_delayed(parts), str(tmp_path / "ds"), catalog=sqlite_url, dataset="late",
            client=client, retries=0, progress=False, shard_size="4KB",
        )  # fmt: skip
    written = log.read_text().count("\n")
    assert 0 < written < 100  # it was running, and stopped early
    time.sleep(1.5)
    assert log.read_text().count("\n") == written  # nothing of the job runs on
    assert list((tmp_path / "ds").glob("*.shard")) == []
    assert Catalog(sqlite_url).datasets() == []


def test_the_wait_for_a_failed_jobs_tasks_is_a_number_of_seconds():
    from shardcat.orchestration.watch import failed_task_wait

    assert failed_task_wait() == 30.0
    with shardcat.config.set(dask_failed_task_wait="2.5"):
        assert failed_task_wait() == 2.5
    for bad, why in (("soon", "is not a number of seconds"), ("-1", "is negative")):
        with (
            shardcat.config.set(dask_failed_task_wait=bad),
            pytest.raises(ValueError, match=f"SHARDCAT_DASK_FAILED_TASK_WAIT='{bad}' {why}"),
        ):
            failed_task_wait()


def test_a_first_write_into_a_missing_bucket_leaves_no_dataset(client, catalog_url, s3):
    """The dataset is not pinned to ``s3://no-such-bucket/x`` once a later job succeeds."""
    opts = s3["storage_options"]
    with pytest.raises(BucketNotFoundError):
        shardcat.write(
            sample_bag(2, 5), "s3://no-such-bucket-shardcat/x", catalog=catalog_url,
            dataset="m", storage_options=opts, client=client, progress=False,
        )  # fmt: skip
    with Catalog(catalog_url) as cat:
        assert cat.datasets() == []
    good = f"{s3['url']}/x"
    shardcat.write(
        sample_bag(2, 5), good, catalog=catalog_url, dataset="m", storage_options=opts,
        client=client, progress=False,
    )  # fmt: skip
    with Catalog(catalog_url) as cat:
        assert [(d.name, d.root_url) for d in cat.datasets()] == [("m", good)]


def test_a_dataset_without_shards_takes_the_next_jobs_folder(client, tmp_path, catalog_url):
    """A dataset created by hand (or left by an interrupted first job) is not pinned to its folder."""
    with Catalog(catalog_url) as cat:
        cat.create_dataset("m", str(tmp_path / "wrong"))
    summary = shardcat.write(
        sample_bag(1, 5, "a"),
        str(tmp_path / "right"),
        catalog=catalog_url,
        dataset="m",
        mode="append",
        client=client,
        progress=False,
    )
    with Catalog(catalog_url) as cat:
        assert cat.info("m").root_url == str(tmp_path / "right")
        assert all(u.startswith(str(tmp_path / "right")) for u in summary.shards)
        # A failure now keeps it: it existed before the job.
        with pytest.raises(RuntimeError, match="never succeeds"):
            shardcat.write(
                db.from_delayed([dask.delayed(partition_with)(0, 5, AlwaysFail, 1, "x")]),
                str(tmp_path / "right"), catalog=cat, dataset="m", mode="append",
                client=client, retries=0, progress=False,
            )  # fmt: skip
        assert cat.count("m") == 5


def test_four_concurrent_jobs_into_one_postgres_catalog(client, tmp_path, postgres_url):
    errors: list[BaseException] = []
    summaries = {}

    def job(n: int) -> None:
        try:
            summaries[n] = shardcat.write(
                sample_bag(3, 120, f"c{n}"),
                str(tmp_path / f"ds{n}"),
                catalog=postgres_url,
                dataset=f"concurrent-{n}",
                shard_size="100KB",
                client=client,
                progress=False,
            )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=job, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    cat = Catalog(postgres_url)
    for n in range(4):
        assert summaries[n].records == 360
        assert sum(s.record_count for s in cat.shards(f"concurrent-{n}")) == 360
        assert cat.get(f"concurrent-{n}", f"c{n}/002/00119")["json"].decode() == {
            "partition": 2,
            "i": 119,
        }


def test_overwrite_replaces_the_dataset_at_commit(client, tmp_path, sqlite_url):
    root = str(tmp_path / "ds")
    shardcat.write(
        sample_bag(2, 40, "old"),
        root,
        catalog=sqlite_url,
        dataset="o",
        client=client,
        progress=False,
    )
    summary = shardcat.write(
        sample_bag(1, 30, "new"),
        root,
        catalog=sqlite_url,
        dataset="o",
        mode="overwrite",
        client=client,
        progress=False,
    )
    cat = Catalog(sqlite_url)
    assert [s.url for s in cat.shards("o")] == summary.shards
    assert sum(s.record_count for s in cat.shards("o")) == 30
    with pytest.raises(KeyNotFoundError):
        cat.get("o", "old/000/00001")
    assert_holds(cat.get("o", "new/000/00001"), make_samples(0, 30, "new")[1])
    # The replaced shards stay readable at the first version until it expires;
    # then they are tombstones until gc removes their files.
    first = cat.log("o")[-1].number
    assert cat.get("o", "old/000/00001", version=first).key == "old/000/00001"
    assert cat.shards("o", state="deleted") == []
    cat.expire("o", keep_last=1)
    assert len(cat.shards("o", state="deleted")) == 2


def test_a_pandas_dataframe_becomes_one_json_entry_per_row_plus_binary_columns(
    client, tmp_path, sqlite_url
):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "__key__": [f"iris/{i:03d}" for i in range(150)],
            "sepal_length": rng.uniform(4, 8, 150).round(1),
            "species": ["setosa", "versicolor", "virginica"] * 50,
            "petal_width": [np.nan if i == 7 else 0.2 for i in range(150)],
            "seen": pd.Timestamp("2024-01-02") + pd.to_timedelta(range(150), unit="h"),
            "mask": [np.zeros((2, 2), np.uint8) + i for i in range(150)],
            "raw": [bytes([i]) for i in range(150)],
        }
    )
    summary = shardcat.write(
        frame,
        str(tmp_path / "iris"),
        catalog=sqlite_url,
        dataset="iris",
        client=client,
        progress=False,
    )
    assert summary.records == 150
    # One JSON entry, not one entry per column: about 200 bytes of framing per record.
    assert summary.bytes < 150 * 900, summary.bytes
    rec = Catalog(sqlite_url).get("iris", "iris/007")
    assert set(rec) == {"json", "mask", "raw"}
    assert rec["json"].decode() == {
        "sepal_length": float(frame.sepal_length[7]),
        "species": "versicolor",  # petal_width is NaN here: left out
        "seen": "2024-01-02T07:00:00",
    }
    np.testing.assert_array_equal(rec["mask"].decode(), np.full((2, 2), 7, np.uint8))
    assert rec["raw"].data == bytes([7])


def test_a_dataframe_without_its_key_column_is_refused_before_anything_is_created(
    client, tmp_path, sqlite_url
):
    import dask.dataframe as dd

    frame = pd.DataFrame({"id": ["a", "b"], "json": [1, 2]})
    common = dict(catalog=sqlite_url, dataset="f", client=client, progress=False)
    with pytest.raises(InvalidKeyError, match=r"no key column '__key__'.*key_column="):
        shardcat.write(frame, str(tmp_path / "f"), **common)
    with pytest.raises(ValueError, match=r"has a column 'json'.*json_entry="):
        shardcat.write(
            dd.from_pandas(frame, npartitions=1), str(tmp_path / "f"), key_column="id", **common
        )
    assert Catalog(sqlite_url).datasets() == []
