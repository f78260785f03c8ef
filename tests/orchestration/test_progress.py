"""shardcat.write reports progress to a callback; the library draws nothing unless asked."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
import textwrap

import dask
import dask.bag as db
import pytest
from rich.console import Console

import shardcat
from shardcat.errors import ProgressCallbackError
from shardcat.orchestration import WriteProgress, WriteProgressBar
from shardcat.orchestration.progress import ProgressReporter
from shardcat.orchestration.tasks import PartitionResult
from shardcat.reading import Catalog

from .samples import make_samples


def assert_monotonic(events: list[WriteProgress]) -> None:
    """Counts only grow, one partition at a time, and a known total never changes."""
    for before, after in itertools.pairwise(events):
        assert after.done_partitions - before.done_partitions in (0, 1), (before, after)
        assert after.records >= before.records and after.bytes >= before.bytes
        assert after.seconds >= before.seconds
        if before.total_partitions is not None:
            assert after.total_partitions == before.total_partitions


def result(partition: int, records: int, size: int) -> PartitionResult:
    return PartitionResult(partition, (f"p{partition}.shard",), records, size, size // 2, 0.1)


# --- the reporter alone -------------------------------------------------------


def test_reporter_sums_partitions_and_learns_an_iterables_total_at_its_end():
    events: list[WriteProgress] = []
    reporter = ProgressReporter(events.append, dataset="d", job_id=7)
    reporter.start(None)
    reporter.partition_done(result(0, 10, 1000))
    reporter.total_known(2)
    reporter.partition_done(result(1, 5, 500))
    assert [(e.done_partitions, e.total_partitions, e.records, e.bytes) for e in events] == [
        (0, None, 0, 0),
        (1, None, 10, 1000),
        (1, 2, 10, 1000),
        (2, 2, 15, 1500),
    ]
    assert [e.finished for e in events] == [False, False, False, True]
    assert_monotonic(events)
    assert events[-1].mb_per_s == pytest.approx(1500 / 1e6 / events[-1].seconds)


def test_reporter_without_a_callback_sends_nothing():
    reporter = ProgressReporter(None, dataset="d", job_id=1)
    reporter.start(3)
    reporter.partition_done(result(0, 1, 1))  # nothing to call, nothing raised


def test_a_callback_that_raises_becomes_a_progress_callback_error():
    def broken(event: WriteProgress) -> None:
        raise ZeroDivisionError("division by zero")

    reporter = ProgressReporter(broken, dataset="train", job_id=3)
    with pytest.raises(ProgressCallbackError) as err:
        reporter.start(4)
    message = str(err.value)
    assert "broken raised ZeroDivisionError: division by zero" in message
    assert "job 3 of dataset 'train' is aborted" in message and "progress=False" in message
    assert isinstance(err.value.__cause__, ZeroDivisionError)


# --- through shardcat.write ---------------------------------------------------


def test_a_bag_write_sends_one_event_per_partition_with_the_right_totals(
    client, tmp_path, sqlite_url
):
    events: list[WriteProgress] = []
    bag = db.from_delayed([dask.delayed(make_samples)(p, 60) for p in range(4)])
    summary = shardcat.write(
        bag,
        str(tmp_path / "ds"),
        catalog=sqlite_url,
        dataset="progress",
        shard_size="40KB",
        client=client,
        progress=events.append,
    )
    assert [e.done_partitions for e in events] == [0, 1, 2, 3, 4]
    assert {e.total_partitions for e in events} == {4}  # known from the start
    assert (events[0].records, events[0].bytes) == (0, 0)
    assert_monotonic(events)
    last = events[-1]
    assert last.finished and not any(e.finished for e in events[:-1])
    assert (last.records, last.bytes) == (summary.records, summary.bytes) == (240, summary.bytes)


def test_an_iterable_write_learns_its_total_when_the_iterable_runs_out(tmp_path):
    events: list[WriteProgress] = []
    samples = (s for p in range(3) for s in make_samples(p, 70, "it"))
    summary = shardcat.write(
        samples,
        "memory://shardcat-tests/progress-iterable",
        catalog=f"sqlite:///{tmp_path / 'cat.db'}",
        dataset="it",
        batch_size=50,
        progress=events.append,
    )
    assert summary.partitions == 5  # 210 samples in batches of 50
    assert events[0] == WriteProgress(0, None, 0, 0, events[0].seconds)
    assert events[-1].total_partitions == 5 and events[-1].finished
    # Finished is said once, whichever comes last: the last partition, or the total
    # (the iterable found empty after every task has already finished).
    assert [e.finished for e in events].count(True) == 1
    assert_monotonic(events)
    assert (events[-1].records, events[-1].bytes) == (210, summary.bytes)


def test_a_callback_that_raises_fails_the_write_and_nothing_becomes_visible(
    client, tmp_path, sqlite_url
):
    seen: list[WriteProgress] = []

    def cancel_after_two(event: WriteProgress) -> None:
        seen.append(event)
        if event.done_partitions == 2:
            raise RuntimeError("enough")

    bag = db.from_delayed([dask.delayed(make_samples)(p, 40) for p in range(5)])
    with pytest.raises(ProgressCallbackError, match=r"raised RuntimeError: enough") as err:
        shardcat.write(
            bag,
            str(tmp_path / "ds"),
            catalog=sqlite_url,
            dataset="cancelled",
            client=client,
            progress=cancel_after_two,
        )
    assert isinstance(err.value.__cause__, RuntimeError)
    assert seen[-1].done_partitions == 2
    cat = Catalog(sqlite_url)
    # A cancelled first job takes the dataset it created with it, and the shards it wrote.
    assert cat.datasets() == []
    assert list((tmp_path / "ds").glob("*.shard")) == []


def test_a_progress_value_that_is_neither_a_flag_nor_callable_is_refused_up_front(
    tmp_path, sqlite_url
):
    with pytest.raises(TypeError, match="progress must be True, False or a callable"):
        shardcat.write(
            [{"__key__": "a", "txt": "x"}],
            str(tmp_path / "ds"),
            catalog=sqlite_url,
            dataset="typo",
            progress="yes",  # type: ignore[arg-type]
        )
    assert Catalog(sqlite_url).datasets() == []  # nothing was created


def test_no_rich_is_imported_when_no_progress_is_drawn(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        import shardcat
        for progress in (False, [].append):
            shardcat.write(
                ({{"__key__": f"k/{{i}}", "txt": "x"}} for i in range(30)),
                "memory://shardcat-tests/no-rich",
                catalog="sqlite:///{tmp_path / "cat.db"}",
                dataset=f"d{{id(progress)}}",
                batch_size=10,
                progress=progress,
            )
        print(sorted(m for m in sys.modules if m == "rich" or m.startswith("rich.")))
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


# --- the ready-made bar ---------------------------------------------------------


def test_the_progress_bar_draws_partitions_records_and_stops_with_the_last_partition():
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=False, color_system=None)
    with WriteProgressBar(console) as bar:
        bar(WriteProgress(0, 2, 0, 0, 0.0))
        bar(WriteProgress(1, 2, 100, 2_000_000, 1.0))
        bar(WriteProgress(2, 2, 200, 4_000_000, 2.0))
        assert bar._stopped  # the last partition stops it, before the commit
        bar(WriteProgress(2, 2, 200, 4_000_000, 3.0))  # late events are ignored
    text = buffer.getvalue()
    assert "writing" in text and "2/2 partitions" in text
    assert "200 records, 3.8 MiB, 2 MB/s" in text


def test_the_progress_bar_stops_when_the_write_fails():
    buffer = io.StringIO()
    console = Console(file=buffer, width=120, force_terminal=False, color_system=None)
    bar = WriteProgressBar(console)

    def failing_write() -> None:
        with bar:
            bar(WriteProgress(0, None, 0, 0, 0.0))
            raise RuntimeError("the job failed")

    with pytest.raises(RuntimeError):
        failing_write()
    assert bar._stopped and bar._progress is not None
    assert not bar._progress.live.is_started
