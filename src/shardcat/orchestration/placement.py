"""Keep a job's tasks off workers whose every thread runs a task that no client wants any more.

A Dask task cannot be interrupted. When the client that submitted it dies
(killed, or its connection lost), the scheduler forgets the task, but the
worker's thread goes on running it (the worker calls it ``cancelled``) until
it returns: for ever, if it is blocked (issue 35: a task that had opened a
FIFO). The scheduler counts that thread as free again, so it keeps handing
the worker new tasks, which wait behind the abandoned one: a later job whose
tasks land there waits for ever, silently, while other jobs' tasks that
happen to land elsewhere run.

So every job on a cluster it did not start (:func:`~.cluster.client_for`)
first asks each worker (``client.run``, which the worker's event loop
answers even while its threads are busy) which of its threads run such
abandoned tasks (:func:`held_workers`), and while any worker is wholly held
submits its tasks restricted to the others (:func:`avoid_held_workers`).
The restriction is strict: with ``allow_other_workers`` the scheduler's
work stealing moves tasks from a busy allowed worker to the held one, which
looks idle to it. Tasks that wait on a held worker all the same (it became
held while the job ran, or no other worker was there) or for allowed
workers that left (:func:`stranded`) are found by the job's
:class:`~.watch.Waiter`, which stops the job with
:class:`~shardcat.errors.WorkersHeldError` instead of waiting for ever.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["HeldWorker", "avoid_held_workers", "held_workers", "stranded"]

_ASK_TIMEOUT = 2.0
"""Seconds the workers' answers are waited for; a cluster that takes longer counts as none held
(every worker answers in milliseconds unless a task keeps its event loop from running)."""

_WAITING = frozenset({"ready", "constrained", "waiting", "fetch", "flight"})
"""A worker's states of a task that it holds but has not started."""


@dataclass(frozen=True, slots=True)
class HeldWorker:
    """A worker whose every thread runs a task that no client wants (``cancelled`` there)."""

    address: str
    abandoned: tuple[tuple[str, float], ...]
    """``(task key, seconds it has run)`` of each abandoned task, longest-running first."""
    waiting: frozenset[str]
    """Keys of the tasks asked about that wait on this worker behind them."""

    def describe(self) -> str:
        key, seconds = self.abandoned[0]
        more = f" (and {len(self.abandoned) - 1} more)" if len(self.abandoned) > 1 else ""
        return f"worker {self.address} has run task {key!r}{more} for {seconds:.0f} s"


def _on_worker(
    keys: Collection[str], dask_worker: Any = None
) -> tuple[int, list[tuple[str, float]], list[str]]:
    """Run on a worker (``client.run`` passes it as ``dask_worker``): its threads, its abandoned
    running tasks, and which of ``keys`` wait there."""
    state = dask_worker.state
    now = time.time()
    abandoned = sorted(
        (
            (str(ts.key), now - (ts.start_time or now))
            for ts in list(state.executing)
            if ts.state == "cancelled"
        ),
        key=lambda kv: -kv[1],
    )
    waiting = []
    for key in keys:
        ts = state.tasks.get(key)
        if ts is not None and ts.state in _WAITING:
            waiting.append(key)
    return int(state.nthreads), abandoned, waiting


def held_workers(client: Client, keys: Collection[str] = ()) -> list[HeldWorker]:
    """The workers of ``client``'s cluster whose every thread runs an abandoned task.

    ``keys``: task keys to look for on them (:attr:`HeldWorker.waiting`).
    A cluster that cannot be asked (a worker leaving), or not within
    :data:`_ASK_TIMEOUT` (a worker whose event loop a GIL-bound task holds),
    counts as none held.
    """
    answers = _ask_workers(client, list(keys))
    if answers is None:
        return []
    held = []
    for address, answer in sorted(answers.items()):
        if isinstance(answer, BaseException):
            continue
        threads, abandoned, waiting = answer
        if abandoned and len(abandoned) >= threads:
            held.append(HeldWorker(address, tuple(abandoned), frozenset(waiting)))
    return held


def _ask_workers(client: Client, keys: list[str]) -> dict[str, Any] | None:
    """Every worker's :func:`_on_worker` answer, or None if they are not all in within
    :data:`_ASK_TIMEOUT` seconds (or the scheduler cannot be asked).

    A worker answers from its event loop, which a task holding the GIL (a C call that does not
    release it) stops until it returns: the question is left to finish on its own thread.
    """
    answers: list[dict[str, Any]] = []

    def ask() -> None:
        # The scheduler gone or busy: no answer (the waits' own checks say so).
        with contextlib.suppress(Exception):
            answers.append(client.run(_on_worker, keys, on_error="return"))

    asking = threading.Thread(target=ask, name="shardcat-held-workers", daemon=True)
    asking.start()
    asking.join(_ASK_TIMEOUT)
    return answers[0] if answers else None


@contextlib.contextmanager
def avoid_held_workers(client: Client) -> Iterator[list[HeldWorker]]:
    """Within this block, tasks this thread submits go to the workers that are not held.

    Yields the held workers (empty: no restriction). Should every other
    worker leave, the tasks wait for them (:func:`stranded`), and the job's
    wait says what holds the rest.
    """
    from dask.base import annotate

    held = held_workers(client)
    if not held:
        yield held
        return
    taken = {h.address for h in held}
    free = sorted(a for a in client.nthreads() if a not in taken)
    if not free:  # nowhere else to go: the job's wait names the held workers
        yield held
        return
    with annotate(workers=free, allow_other_workers=False):
        yield held


def _no_worker(keys: Collection[str], dask_scheduler: Any = None) -> list[str]:
    """Run on the scheduler: which of ``keys`` wait for a worker they may run on."""
    tasks = dask_scheduler.tasks
    return [k for k in keys if (ts := tasks.get(k)) is not None and ts.state == "no-worker"]


def stranded(client: Client, keys: Collection[str]) -> list[str]:
    """Which of ``keys`` the scheduler holds for workers they may run on, none being there."""
    try:
        return list(client.run_on_scheduler(_no_worker, list(keys)))
    except Exception:  # the scheduler is gone or busy: the waits' own checks say so
        return []
