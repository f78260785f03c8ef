"""Waiting for a job's tasks is woken by the next task to finish, not by a polling tick.

``Waiter.next_batch`` waits on ``as_completed``'s condition, which
distributed notifies after queueing a finished future: the end of a job is
seen when it happens. With the tick set to ten minutes, a wait that polled
would outlast the test's timeout; one that is woken returns as the tasks end.
"""

from __future__ import annotations

import time

import pytest

from shardcat.orchestration import watch
from shardcat.orchestration.watch import JobRef, Waiter, gather


def _later(value: int, seconds: float) -> int:
    time.sleep(seconds)
    return value


@pytest.mark.timeout(120)
def test_a_wait_ends_when_a_task_finishes_not_at_the_next_tick(client, monkeypatch):
    monkeypatch.setattr(watch, "_TICK", 600.0)
    futures = [client.submit(_later, i, 0.3 * (i % 3), pure=False) for i in range(6)]
    assert gather(client, futures, JobRef("index-files", "d", 1)) == list(range(6))
    # Handed back as they finish, each once; then an empty batch says none is left.
    waiter = Waiter(client, JobRef("index-files", "d", 2))
    more = [client.submit(_later, i, 0.2, pure=False) for i in range(3)]
    for future in more:
        waiter.add(future)
    seen = []
    while batch := waiter.next_batch():
        seen.extend(waiter.result(f) for f in batch)
    assert sorted(seen) == [0, 1, 2]
    assert waiter.count() == 0
