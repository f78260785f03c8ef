"""The object store goes away mid-job and comes back (during the job, or after it): nothing lost.

S3 is a moto server behind a TCP proxy (``OutageProxy``): going *down* drops
every open connection and resets new ones, as a crashed or partitioned
server would, while moto keeps its objects, as a real store does across an
outage. A Dask job (two worker processes) writing a dataset is running when
the store goes down, for 3 seconds or until the job has ended. The job
either rides it out (s3fs, botocore and Dask retry) and commits every record
once, or fails with a typed storage error and shows nothing; when the store
stays away it must fail. Lookups of a dataset committed before the
outage fail typed while it lasts and are served exactly once it is over.
A failed job is rerun: every record once, ``verify`` clean, ``gc`` removes
what the failed attempt uploaded.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from typing import Any

import pytest

import shardcat
from _servers import OutageProxy
from shardcat.errors import ShardcatError, StorageError
from shardcat.orchestration.gc import gc
from shardcat.reading import Catalog
from shardcat.storage import resolve

N = 1200


def _samples(tag: str, n: int = N) -> list[dict[str, Any]]:
    return [{"__key__": f"{tag}/{i:05d}", "txt": f"{tag} {i} " * 40} for i in range(n)]


def _slow_partition(tag: str, part: int, per: int, pause: float) -> list[dict[str, Any]]:
    time.sleep(pause)  # keeps the job running while the store goes down
    return _samples(tag)[part * per : (part + 1) * per]


def _write(
    client: Any,
    tag: str,
    root: str,
    url: str,
    options: dict[str, Any],
    pause: float,
    retries: int = 1,
) -> Any:
    import dask
    import dask.bag as db

    per = N // 6
    parts = [dask.delayed(_slow_partition)(tag, p, per, pause * (p % 3)) for p in range(6)]
    return shardcat.write(
        db.from_delayed(parts),
        f"{root}/{tag}",
        catalog=url,
        dataset=tag,
        shard_size="64KB",
        storage_options=options,
        client=client,
        progress=False,
        retries=retries,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("retries", "outage", "must_fail"),
    [(1, 3.0, False), (0, None, True)],
    ids=["back-in-3s", "back-after-the-job"],
)
def test_the_store_going_away_mid_job_loses_nothing(
    s3: dict[str, Any], sqlite_url: str, retries: int, outage: float | None, must_fail: bool
) -> None:
    from distributed import Client, LocalCluster

    port = int(s3["endpoint"].rsplit(":", 1)[1])
    proxy = OutageProxy(port)
    options = {
        **s3["storage_options"],
        "client_kwargs": {"endpoint_url": proxy.endpoint, "region_name": "us-east-1"},
        "config_kwargs": {"retries": {"max_attempts": 2}, "connect_timeout": 2, "read_timeout": 5},
    }
    root = f"{s3['url']}/data"
    try:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            _write(client, "before", root, sqlite_url, options, pause=0)
            outcome: dict[str, Any] = {}

            def job() -> None:
                try:
                    outcome["summary"] = _write(
                        client, "during", root, sqlite_url, options, pause=1.5
                    )
                except BaseException as e:
                    outcome["error"] = e

            runner = threading.Thread(target=job)
            runner.start()
            time.sleep(2.0)  # the first partitions are written and staged
            proxy.down()
            with (
                Catalog(sqlite_url, storage_options=options) as cat,
                pytest.raises(StorageError),  # typed, while the store is away
            ):
                cat.get("before", "before/00007")
            if outage is not None:  # back while the job runs
                time.sleep(outage)
                proxy.up()
            runner.join(300)
            proxy.up()  # or only once the job has ended
            assert not must_fail or "error" in outcome, "the job never met the outage"
            assert not runner.is_alive(), "the job never ended"
            assert proxy.refused > 0, "the outage never met a request: the test tests nothing"

            with Catalog(sqlite_url, storage_options=options) as cat:
                # The dataset committed before the outage is served exactly again.
                assert cat.get("before", "before/00007").decode()["txt"] == "before 7 " * 40
                assert (
                    len(cat.get_many("before", [f"before/{i:05d}" for i in range(N)]).found()) == N
                )
                if "error" in outcome:
                    error = outcome["error"]
                    assert isinstance(error, ShardcatError), repr(error)
                    # Gone with its failed first job, or kept (empty) if the store was
                    # still away to remove the job's shards: then gc does it.
                    kept = "during" in [d.name for d in cat.datasets()]
                    assert not kept or cat.count("during") == 0, "a failed job left records"
                else:
                    assert outcome["summary"].records == N
            if "error" in outcome:
                if kept:
                    gc(
                        sqlite_url,
                        "during",
                        grace=dt.timedelta(0),
                        stale_after=dt.timedelta(0),
                        storage_options=options,
                    )
                _write(client, "during", root, sqlite_url, options, pause=0)
        with Catalog(sqlite_url, storage_options=options) as cat:
            for tag in ("before", "during"):
                keys = list(cat.keys(tag))
                assert len(keys) == len(set(keys)) == N
                assert cat.verify(tag).ok
            gc(
                cat,
                "during",
                grace=dt.timedelta(0),
                stale_after=dt.timedelta(0),
                storage_options=options,
            )
            live = {s.url.rsplit("/", 1)[1] for s in cat.shards("during")}
        fs, path = resolve(f"{root}/during", options)
        stored = {p.rsplit("/", 1)[1] for p in fs.ls(path, detail=False)} - {"_versions"}
        assert stored == live, f"objects left behind: {sorted(stored - live)}"
    finally:
        proxy.close()
