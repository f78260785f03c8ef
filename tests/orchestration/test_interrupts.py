"""Ctrl-C during a job: a JobInterrupted that says what became of the job; local workers never see it."""

from __future__ import annotations

import signal
from typing import Any

import dask.bag as db
import pytest

import shardcat
from shardcat.errors import JobInterrupted, ShardcatError
from shardcat.orchestration import DaskCluster, client_for
from shardcat.orchestration.interrupts import interrupts_to_this_thread
from shardcat.reading import Catalog


def _interrupt(event: Any) -> None:
    if event.done_partitions >= 2:
        raise KeyboardInterrupt  # Ctrl-C in the client, mid-job


def _bag() -> db.Bag:
    return db.from_sequence(
        [{"__key__": f"k/{i:04d}", "json": {"i": i}} for i in range(200)], npartitions=8
    )


def test_an_interrupted_write_says_whether_it_stays_open_or_was_aborted(
    tmp_path, sqlite_url, client
):
    options: dict[str, Any] = {"catalog": sqlite_url, "client": client, "progress": _interrupt}
    with pytest.raises(JobInterrupted) as named:
        shardcat.write(_bag(), str(tmp_path / "a"), dataset="a", job_name="nightly", **options)
    e = named.value
    assert isinstance(e, KeyboardInterrupt) and not isinstance(e, Exception)
    assert not isinstance(e, ShardcatError)  # `except Exception` never swallows a Ctrl-C
    assert str(e) == (
        "interrupted: write job 1 of dataset 'a' stays open; "
        "rerun the write with job_name='nightly' to finish it"
    )
    assert e.render("cli").endswith("rerun the command with --job-name nightly to finish it")

    with pytest.raises(JobInterrupted) as anonymous:
        shardcat.write(_bag(), str(tmp_path / "b"), dataset="b", **options)
    assert str(anonymous.value).startswith(
        "interrupted: write job 2 of dataset 'b' was aborted, nothing of it is visible; run it "
        "again (name a write with job_name= to make it resumable)"
    )
    assert "`shardcat gc b` removes what it wrote" in anonymous.value.render("cli")
    with Catalog(sqlite_url) as cat:
        assert [j.state for j in cat.jobs("a")] == ["open"]
        assert [j.state for j in cat.jobs("b")] == ["aborted"]


def _start_interrupted(steps: list[str]) -> None:
    with interrupts_to_this_thread():
        signal.raise_signal(signal.SIGINT)
        steps.append("started")  # not interrupted here, in the middle of starting


def test_a_ctrl_c_while_the_cluster_starts_comes_after_it():
    steps: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        _start_interrupted(steps)
    assert steps == ["started"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_the_worker_processes_of_a_local_cluster_block_sigint():
    def blocked() -> bool:
        import signal

        return signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])

    with client_for(DaskCluster(workers=1)) as client:
        assert list(client.run(blocked).values()) == [True]
        assert not blocked()  # the client's own thread takes Ctrl-C
