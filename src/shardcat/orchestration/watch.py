"""Every wait of a shardcat job on its Dask tasks, bounded by the cluster's workers.

``distributed`` waits for a lost task as long as it takes: when every worker
is gone, a client blocked on a future hangs for good (it prints ``Couldn't
gather 1 keys, rescheduling`` and nothing more). So the jobs (write, compact,
copy, index-tar) wait only through this module: a :class:`Waiter` hands back
futures as they finish and asks the scheduler about once a second how many
workers it has; once it has had none for longer than the
``dask_no_workers_timeout`` setting, the wait ends with
:class:`~shardcat.errors.WorkersLostError`, whose message says what became
of the job and how to resume it. Tasks that wait as long behind tasks whose
client is gone, on workers with no other thread (:mod:`.placement`), end
the wait the same way (:class:`~shardcat.errors.WorkersHeldError`).
:func:`interrupted` words a Ctrl-C the same way
(:class:`~shardcat.errors.JobInterrupted`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import Hint, JobInterrupted, WorkersHeldError, WorkersLostError
from .placement import HeldWorker, held_workers, stranded

if TYPE_CHECKING:
    from distributed import Client, Future

__all__ = [
    "JobRef",
    "TaskProgressCallback",
    "Waiter",
    "failed_task_wait",
    "gather",
    "interrupted",
    "no_workers_timeout",
    "settle",
    "stop_tasks",
]

TaskProgressCallback = Callable[[int, int], None]
"""What the ``progress=`` of index_tar, import_taridx, copy_dataset and compact accepts:
called as ``progress(done, total)`` in the calling thread each time one of the job's
tasks finishes (``done`` only grows); its return value is ignored."""

_TICK = 0.05
"""Seconds a wait for the next finished future lasts at most before the workers are looked at
again (a future that finishes ends the wait at once)."""
_MAX_CHECK_INTERVAL = 1.0
"""The scheduler is asked for its workers at most this often (once per timeout/4 if shorter)."""
_MAX_RESULT_WAIT = 60.0
"""Seconds one attempt to fetch a finished task's result may take, between checks."""
_HELD_CHECK = 5.0
"""Seconds without a finished task before the workers are asked whether the job's tasks wait
behind abandoned ones (a ``client.run`` on every worker), and between two such questions."""


@dataclass(frozen=True, slots=True)
class JobRef:
    """The job a wait belongs to: what its messages name.

    Attributes
    ----------
    operation:
        ``"write"``, ``"compact"``, ``"copy"``, ``"index-tar"``, ``"export"`` or ``"verify"``.
    dataset:
        The job's dataset.
    job_id:
        The job's id (None for a copy: its job begins once every shard is copied).
    job_name:
        A write job's name, if it was given one.
    resumable:
        A write job: it stays open when its workers are lost, to be resumed.
    """

    operation: str
    dataset: str
    job_id: int | None = None
    job_name: str | None = None
    resumable: bool = False
    removes_output: bool = False
    """An export: a stopped job removes the files it published (nothing to gc)."""
    changes_nothing: bool = False
    """A verify: it writes nothing, so a stopped one only needs running again."""

    @property
    def what(self) -> str:
        job = f" job {self.job_id}" if self.job_id is not None else ""
        return f"{self.operation}{job} of dataset {self.dataset!r}"


def no_workers_timeout() -> float:
    """The ``dask_no_workers_timeout`` setting in seconds (0: wait for workers forever).

    Raises
    ------
    ValueError
        The setting is not a number of seconds (the message names its variable).
    """
    return _seconds("dask_no_workers_timeout", "0 = no limit")


def failed_task_wait() -> float:
    """The ``dask_failed_task_wait`` setting in seconds (0: no wait), checked as above."""
    return _seconds("dask_failed_task_wait", "0 = no wait")


def _seconds(key: str, zero: str) -> float:
    raw = config.get(key)
    try:
        seconds = float(str(raw).strip())
    except ValueError:
        raise ValueError(
            f"${config.env_var(key)}={raw!r} is not a number of seconds ({zero})"
        ) from None
    if seconds < 0:
        raise ValueError(f"${config.env_var(key)}={raw!r} is negative ({zero})")
    return seconds


class Waiter:
    """A job's futures, handed back as they finish; a cluster left without workers ends the wait.

    Parameters
    ----------
    client:
        The job's client (made current while its futures are tracked: the
        default client may be another one).
    job:
        What :class:`~shardcat.errors.WorkersLostError` names.
    futures:
        The futures to wait for; more may be added (:meth:`add`).
    """

    def __init__(self, client: Client, job: JobRef, futures: Iterable[Future[Any]] = ()) -> None:
        from distributed import as_completed

        self._client = client
        self._job = job
        self._timeout = no_workers_timeout()
        self._interval = max(_TICK, min(_MAX_CHECK_INTERVAL, self._timeout / 4))
        self._next_check = 0.0
        self._none_since: float | None = None
        futures = list(futures)
        self._keys = {str(f.key) for f in futures}
        self._next_held_check = time.monotonic() + _HELD_CHECK
        self._held_since: float | None = None
        with client.as_current():
            self._finished = as_completed(futures)

    def add(self, future: Future[Any]) -> None:
        """Wait for ``future`` too."""
        self._keys.add(str(future.key))
        self._finished.add(future)

    def count(self) -> int:
        """Futures not handed back yet (running or finished)."""
        return int(self._finished.count())

    def next_batch(self) -> list[Future[Any]]:
        """The futures finished since the last call, at least one; ``[]`` once none is left.

        Raises
        ------
        WorkersLostError
            The cluster has had no workers for longer than the timeout.
        """
        while True:
            batch: list[Future[Any]] = self._finished.next_batch(block=False)
            if batch:
                self._keys.difference_update(str(f.key) for f in batch)
                self._next_held_check = time.monotonic() + _HELD_CHECK
                self._held_since = None
            if batch or self._finished.is_empty():
                return batch
            self.check()
            # Woken by the next future to finish (as_completed notifies its condition after
            # queueing it; checked under the condition, so no notification is missed), not
            # polled: a job's end was noticed up to a tick late.
            finished = self._finished
            woken = getattr(finished, "thread_condition", None)
            if woken is None:  # a distributed without it: look again after a tick
                time.sleep(_TICK)
                continue
            with woken:
                if not finished.has_ready():
                    woken.wait(timeout=_TICK)

    def __iter__(self) -> Iterator[Future[Any]]:
        """Each future as it finishes (see :meth:`next_batch`)."""
        while batch := self.next_batch():
            yield from batch

    def result(self, future: Future[Any]) -> Any:
        """``future.result()``; a result lost with its worker is waited for as a task is.

        Raises
        ------
        WorkersLostError
            As :meth:`next_batch`.
        BaseException
            The task's own error.
        """
        if self._timeout <= 0:
            return future.result()
        wait = self._interval
        while True:
            try:
                return future.result(timeout=wait)
            except TimeoutError:
                if future.status == "error":
                    raise  # the task's own TimeoutError, not the wait's
                self.check()
                # A big result may take longer to fetch than the interval: allow it more each time.
                wait = min(2 * wait, _MAX_RESULT_WAIT)

    def check(self) -> None:
        """Ask the scheduler for its workers (at most once per interval); end a wait with none.

        Raises
        ------
        WorkersLostError
            No workers for longer than the timeout.
        """
        if self._timeout <= 0:
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + self._interval
        if self._client.nthreads():
            self._none_since = None
        elif self._none_since is None:
            self._none_since = now
        elif now - self._none_since > self._timeout:
            raise _lost(self._job, now - self._none_since, _address(self._client))
        if now >= self._next_held_check and self._keys:
            self._next_held_check = now + _HELD_CHECK
            self._check_held(now)

    def _check_held(self, now: float) -> None:
        """End the wait once tasks of the job have waited behind abandoned ones too long.

        They wait on a held worker, or for the other workers they were kept to, gone since.
        """
        held = held_workers(self._client, self._keys)
        if not any(h.waiting for h in held) and not (held and stranded(self._client, self._keys)):
            self._held_since = None
        elif self._held_since is None:
            self._held_since = now
        elif now - self._held_since > self._timeout:
            raise _held(self._job, held, now - self._held_since, _address(self._client))


def gather(
    client: Client,
    futures: list[Future[Any]],
    job: JobRef,
    progress: TaskProgressCallback | None = None,
) -> list[Any]:
    """``client.gather(futures)``, bounded by the workers (:class:`Waiter`).

    The results in the order of ``futures``; the first task to fail raises
    its error at once, as ``gather`` does. ``progress(done, total)`` is
    called once before any task finishes and after each task that succeeds.
    """
    waiter = Waiter(client, job, futures)
    done = 0
    if progress is not None:
        progress(done, len(futures))
    for future in waiter:
        if future.status == "error":
            waiter.result(future)  # raises the task's error
        done += 1
        if progress is not None:
            progress(done, len(futures))
    return [waiter.result(f) for f in futures]


def stop_tasks(client: Client, futures: list[Future[Any]]) -> list[Future[Any]]:
    """Cancel the tasks of a failing job that no worker has started; return the others.

    A running Dask task cannot be interrupted: cancelling its future only
    forgets it, while the worker goes on writing. Such a task ends at its
    next check of the job once the job is aborted (removing what the catalog
    refused), so the caller aborts the job, then waits for these (:func:`settle`)
    before it cleans up: otherwise a file published after the clean-up stays.
    """
    try:
        assigned = {key for keys in client.processing().values() for key in keys}
    except Exception:  # the scheduler is gone: nothing can be told apart, or waited for
        assigned = set()
    running = [f for f in futures if f.key in assigned]
    client.cancel([f for f in futures if f.key not in assigned])
    return running


def settle(client: Client, running: list[Future[Any]], timeout: float | None = None) -> None:
    """Wait (at most ``timeout`` seconds, by default the ``dask_failed_task_wait``
    setting) for ``running`` tasks to end, then forget them.

    Their errors are theirs to log: the job's own error is what the caller reports.
    """
    if not running:
        return
    from distributed import wait

    if timeout is None:
        timeout = failed_task_wait()

    with contextlib.suppress(Exception):
        wait(running, timeout=timeout)
    with contextlib.suppress(Exception):
        client.cancel(running)


def _address(client: Client) -> str:
    return str(getattr(client.scheduler, "address", None) or "its scheduler")


def _lost(job: JobRef, seconds: float, address: str) -> WorkersLostError:
    state, hint = _outcome(job, f"start workers (`dask worker {address}`) and ")
    return WorkersLostError(
        f"the Dask cluster at {address} has had no workers for {seconds:.0f} s "
        f"(all lost, or none started), so {job.what} stopped: {state}",
        hint=hint,
        dataset=job.dataset,
        job_id=job.job_id,
        job_name=job.job_name,
        seconds=seconds,
    )


def _held(job: JobRef, held: list[HeldWorker], seconds: float, address: str) -> WorkersHeldError:
    workers = [h.address for h in held]
    named = ", ".join(repr(w) for w in workers)
    one = len(held) == 1
    state, hint = _outcome(
        job,
        f"restart {'that worker' if one else 'those workers'} "
        f"(`Client({address!r}).restart_workers([{named}])` where a nanny runs "
        f"{'it' if one else 'them'}, else stop {'its `dask worker` process' if one else 'their `dask worker` processes'} "
        f"and start {'it' if one else 'them'} again), then ",
    )
    return WorkersHeldError(
        f"tasks of {job.what} have waited {seconds:.0f} s on workers whose every thread runs a "
        f"task whose client is gone (killed while it ran; Dask cannot stop a running task): "
        f"{'; '.join(h.describe() for h in held)}, so the job stopped: {state}",
        hint=hint,
        workers=workers,
        dataset=job.dataset,
        job_id=job.job_id,
        job_name=job.job_name,
        seconds=seconds,
    )


def _outcome(job: JobRef, start: str) -> tuple[str, Hint]:
    """What became of a job that stopped waiting, and how to run it again after ``start``."""
    if job.resumable:
        state = "it stays open"
        if job.job_name is not None:
            hint = Hint(
                python=f"{start}rerun the write with job_name={job.job_name!r} to resume it",
                cli=f"{start}rerun the command with --job-name {job.job_name} to resume it",
            )
        else:
            hint = Hint(
                python=f"{start}rerun the write with resume=True to resume it",
                cli=f"{start}rerun the command with --resume to resume it",
            )
    elif job.changes_nothing:
        state = "nothing was changed"
        hint = Hint(python=f"{start}run it again", cli=f"{start}run the command again")
    elif job.removes_output:
        state = "it was aborted, and the files it had published are removed"
        hint = Hint(python=f"{start}run it again", cli=f"{start}run the command again")
    else:
        state = "it was aborted, nothing of it is visible"
        hint = Hint(
            python=f"{start}run it again; shardcat.orchestration.gc.gc(catalog, {job.dataset!r}) "
            "removes what it wrote",
            cli=f"{start}run the command again; `shardcat gc {job.dataset}` removes what it wrote",
        )
    return state, hint


def interrupted(job: JobRef, *, stays_open: bool = False) -> JobInterrupted:
    """The :class:`~shardcat.errors.JobInterrupted` of ``job`` stopped by Ctrl-C.

    ``stays_open``: a named or resumed write, kept open for its rerun; any
    other job was aborted.
    """
    if stays_open:
        name = job.job_name
        return JobInterrupted(
            f"interrupted: {job.what} stays open",
            hint=Hint(
                python="rerun the write with "
                + (f"job_name={name!r}" if name else "resume=True")
                + " to finish it",
                cli="rerun the command with "
                + (f"--job-name {name}" if name else "--resume")
                + " to finish it",
            ),
        )
    if job.changes_nothing:
        return JobInterrupted(
            f"interrupted: {job.what} stopped, nothing was changed",
            hint=Hint(python="run it again", cli="run the command again"),
        )
    resume = " (name a write with --job-name to make it resumable)" if job.resumable else ""
    resume_py = " (name a write with job_name= to make it resumable)" if job.resumable else ""
    return JobInterrupted(
        f"interrupted: {job.what} was aborted, nothing of it is visible",
        hint=Hint(
            python=f"run it again{resume_py}; shardcat.orchestration.gc.gc(catalog, "
            f"{job.dataset!r}) removes what it wrote",
            cli=f"run the command again{resume}; `shardcat gc {job.dataset}` removes what it wrote",
        ),
    )
