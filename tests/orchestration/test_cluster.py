"""client_for: the one place a Dask client is chosen (given, scheduler, N local workers, current, new)."""

from __future__ import annotations

import socket

import pytest

from shardcat.errors import SchedulerUnreachableError
from shardcat.orchestration import DaskCluster, client_for


def test_a_given_client_and_the_current_one_are_used_as_they_are_and_left_running(client):
    with client_for(client, "/data") as chosen:
        assert chosen is client
    with client_for(None, "/data") as chosen:  # the fixture's client is the current one
        assert chosen is client
    assert client.status == "running"
    assert len(client.scheduler_info()["workers"]) == 2


def test_a_scheduler_address_connects_to_that_scheduler(client):
    with client_for(DaskCluster(scheduler=client.scheduler.address), "/data") as chosen:
        assert chosen is not client
        assert chosen.scheduler.address == client.scheduler.address
    assert chosen.status == "closed" and client.status == "running"


def test_workers_start_a_local_cluster_of_that_many_processes_stopped_at_exit(client):
    with client_for(DaskCluster(workers=1), "/data") as chosen:
        assert chosen is not client  # never the current client: N workers were asked for
        workers = chosen.scheduler_info()["workers"]
        assert len(workers) == 1 and all(w["nthreads"] == 1 for w in workers.values())
        assert all(address.startswith("tcp://") for address in workers)  # a worker process
    assert chosen.status == "closed"


def test_memory_urls_run_in_this_process_never_on_the_current_client(client):
    with client_for(None, "memory://x") as chosen:
        assert chosen is not client
        info = chosen.scheduler_info()["workers"]
        assert len(info) == 1 and next(iter(info.values()))["nthreads"] == 2
        assert all(address.startswith("inproc://") for address in info)  # threads here
    assert chosen.status == "closed"


def test_a_dask_cluster_takes_a_scheduler_or_workers_not_both():
    with pytest.raises(ValueError, match="not both"):
        DaskCluster(scheduler="tcp://127.0.0.1:1", workers=2)
    with pytest.raises(ValueError, match="at least 1"):
        DaskCluster(workers=0)


def test_an_unreachable_scheduler_is_a_typed_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with (
        pytest.raises(SchedulerUnreachableError),
        client_for(DaskCluster(scheduler=f"tcp://127.0.0.1:{port}")),
    ):
        pass


_SPY = """
import sys

import distributed

import shardcat

seen = []
real = distributed.LocalCluster.__init__


def spy(self, *args, **kwargs):  # records how the real cluster was started, and starts it
    seen.append(kwargs.get("processes"))
    real(self, *args, **kwargs)


distributed.LocalCluster.__init__ = spy
if __name__ == "__main__":  # worker processes import this file again
    src, out, limit = sys.argv[1:]
    with shardcat.config.set(in_process_max_bytes=limit):
        summary = shardcat.write(
            shardcat.from_files(src),
            out,
            catalog=f"sqlite:///{out}.db",
            dataset="d",
            progress=False,
        )
    print(summary.records, seen)
"""


@pytest.mark.parametrize(("limit", "processes"), [("1MiB", False), ("0", True)])
def test_a_small_pack_with_no_client_runs_on_threads_of_this_process(tmp_path, limit, processes):
    """Worker processes cost seconds to start: files under in_process_max_bytes skip them."""
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    for i in range(20):
        (src / f"s{i:02d}.json").write_text(f'{{"i": {i}}}')
    script = tmp_path / "spy.py"
    script.write_text(_SPY)
    out = subprocess.run(
        [sys.executable, str(script), str(src), str(tmp_path / "out"), limit],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    assert out.stdout.split() == ["20", f"[{processes}]"]


def test_a_small_job_still_uses_the_current_client(client):
    with client_for(None, "/data", small=True) as chosen:
        assert chosen is client
