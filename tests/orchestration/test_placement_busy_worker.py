"""A worker whose event loop another client's task holds delays no job's start.

``held_workers`` asks every worker (``client.run``) at each job's start on a
cluster shardcat did not start, and every few seconds while a job waits. A
worker answers from its event loop, which a task holding the GIL (a C call
that does not release it: ``ctypes.PyDLL`` keeps it) stops until the call
returns: the question waited that long, and so did the job, though the
cluster's other workers were free.
"""

from __future__ import annotations

import time

import pytest

from shardcat.orchestration.placement import avoid_held_workers, held_workers

pytestmark = pytest.mark.slow

HOLD = 20


def test_a_worker_held_by_another_clients_gil_bound_task_is_not_waited_for():
    distributed = pytest.importorskip("distributed")
    # A lambda travels by value: the worker processes need not import this module.
    hold = lambda seconds: __import__("ctypes").PyDLL(None).sleep(seconds)  # noqa: E731
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as other,
        distributed.Client(cluster) as mine,
    ):
        busy = sorted(other.nthreads())[0]
        task = other.submit(hold, HOLD, workers=[busy], pure=False)
        deadline = time.monotonic() + 30
        while busy not in {w for w, keys in other.processing().items() if keys}:
            assert time.monotonic() < deadline, "the holding task never started"
            time.sleep(0.1)
        time.sleep(1)  # into the C call
        t0 = time.monotonic()
        assert held_workers(mine) == []  # a live client's task: the worker is not held
        with avoid_held_workers(mine) as held:
            assert held == []
            assert mine.submit(sum, [1, 2], pure=False).result(timeout=10) == 3
        assert time.monotonic() - t0 < HOLD / 2, "the job waited for the GIL-bound task"
        assert not task.done()
        other.cancel(task)
