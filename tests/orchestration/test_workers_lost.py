"""Every worker of a hand-started cluster killed (-9) mid-write: the job stops, typed, and resumes.

A real ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1, as
a user starts them. Without workers, distributed waits for a lost task
forever; the job waits ``dask_no_workers_timeout`` seconds and then raises
WorkersLostError, which says how to resume. The job stays open: with a worker
started again, rerunning the write with its name commits every record once.
"""

from __future__ import annotations

import pytest

import shardcat
import shardcat.config
from _handcluster import folder_of_samples, hand_cluster
from shardcat.errors import ShardcatError, WorkersLostError
from shardcat.orchestration import DaskCluster, WriteProgress
from shardcat.orchestration.watch import JobRef, Waiter
from shardcat.reading import Catalog

pytestmark = pytest.mark.slow

SAMPLES = 400
SHARD_SIZE = "100KB"  # about 80 partitions of 5 samples: seconds of work for two workers


def test_all_workers_killed_mid_write_is_a_typed_error_and_the_named_job_resumes(
    tmp_path, catalog_url
):
    src = tmp_path / "src"
    keys = folder_of_samples(src, SAMPLES)
    url = str(tmp_path / "ds")
    events: list[WriteProgress] = []

    with hand_cluster(tmp_path / "cluster") as cluster:

        def kill_after_the_first_partition(progress: WriteProgress) -> None:
            events.append(progress)
            if progress.done_partitions == 1:
                cluster.kill_workers()

        def write(progress=None):
            return shardcat.write(
                shardcat.from_files(str(src)),
                url,
                catalog=catalog_url,
                dataset="lost",
                shard_size=SHARD_SIZE,
                client=DaskCluster(scheduler=cluster.address),
                progress=progress,
                job_name="nightly",
            )

        with (
            shardcat.config.set(dask_no_workers_timeout=2),
            pytest.raises(WorkersLostError) as raised,
        ):
            write(kill_after_the_first_partition)
        e = raised.value
        assert isinstance(e, ShardcatError) and isinstance(e, TimeoutError)
        assert events[-1].done_partitions < events[-1].total_partitions  # stopped mid-job
        assert (e.dataset, e.job_name) == ("lost", "nightly") and e.seconds > 2
        text = str(e)
        assert text.startswith(f"the Dask cluster at {cluster.address} has had no workers for ")
        assert f"write job {e.job_id} of dataset 'lost' stopped: it stays open" in text
        assert "rerun the write with job_name='nightly' to resume it" in text
        assert "--job-name nightly" in e.render("cli")
        with Catalog(catalog_url) as cat:
            assert cat.job(e.job_id).state == "open"
            assert cat.count("lost") == 0  # nothing of the job is visible

        cluster.start_workers(1)
        summary = write()
    assert summary.job_id == e.job_id
    assert summary.resumed_partitions >= 1  # what finished before the kill is kept
    assert summary.records == SAMPLES
    with Catalog(catalog_url) as cat:
        found = list(cat.keys("lost"))
        assert len(found) == len(set(found)) == SAMPLES  # every record exactly once
        assert set(found) == keys
        assert cat.verify("lost").ok


def test_any_job_wait_ends_once_no_workers_are_left_and_0_waits_for_a_new_one(tmp_path):
    """The watch is the job's, not the write's: any wait (here :func:`gather`'s) ends the same way."""
    from distributed import Client

    from shardcat.orchestration.watch import gather

    with (
        hand_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address) as client,
    ):
        future = client.submit(sum, [1, 2], pure=False)
        assert gather(client, [future], JobRef("compact", "d", 7)) == [3]
        cluster.kill_workers()
        stuck = client.submit(sum, [3, 4], pure=False)
        with (
            shardcat.config.set(dask_no_workers_timeout=1),
            pytest.raises(WorkersLostError) as raised,
        ):
            gather(client, [stuck], JobRef("compact", "d", 7))
        assert "compact job 7 of dataset 'd' stopped: it was aborted" in str(raised.value)
        assert "`shardcat gc d`" in raised.value.render("cli")
        # 0 waits for workers as long as it takes: a worker started later finishes the task.
        with shardcat.config.set(dask_no_workers_timeout=0):
            waiter = Waiter(client, JobRef("compact", "d", 7), [stuck])
            cluster.start_workers(1)
            assert [waiter.result(f) for f in waiter] == [7]


def test_a_bad_timeout_setting_names_its_variable():
    from shardcat.orchestration.watch import no_workers_timeout

    with (
        shardcat.config.set(dask_no_workers_timeout="soon"),
        pytest.raises(ValueError, match=r"\$SHARDCAT_DASK_NO_WORKERS_TIMEOUT='soon'"),
    ):
        no_workers_timeout()
    with shardcat.config.set(dask_no_workers_timeout="2.5"):
        assert no_workers_timeout() == 2.5
