"""Where a job's Dask tasks run: the one place a ``distributed.Client`` is chosen or started.

Every Dask operation (write, compact, copy, index-tar) enters
:func:`client_for` with what its caller gave: a client, a
:class:`DaskCluster` (a scheduler's address, or a local cluster of N worker
processes: the CLI's ``--scheduler`` and ``--workers``), or nothing (the
current client, else a local cluster sized to the machine). A cluster is
started only when the job needs one, and stopped with it. On a cluster it
did not start, a job's tasks keep off workers whose every thread still runs
a task whose client is gone (:mod:`.placement`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from .placement import avoid_held_workers

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["ClientChoice", "DaskCluster", "client_for"]


@dataclass(frozen=True, slots=True)
class DaskCluster:
    """A cluster to start or join for a job: a scheduler's address, or N local worker processes.

    Parameters
    ----------
    scheduler:
        A running Dask scheduler (``tcp://host:8786``); it is checked to
        answer before the client connects.
    workers:
        Otherwise, a local cluster of this many worker processes (one
        thread each), started and stopped with the job.

    Raises
    ------
    ValueError
        Both are given, or ``workers`` is below 1.
    """

    scheduler: str | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        if self.scheduler is not None and self.workers is not None:
            raise ValueError("give a scheduler or a number of workers, not both")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"workers must be at least 1, not {self.workers}")


ClientChoice: TypeAlias = "Client | DaskCluster | None"
"""What a Dask operation's ``client=`` takes (see :func:`client_for`)."""


@contextlib.contextmanager
def client_for(
    choice: ClientChoice = None, url: str = "", *, small: bool = False
) -> Iterator[Client]:
    """The ``distributed.Client`` a job runs on; what is started here is stopped at exit.

    Parameters
    ----------
    choice:
        A client (used as it is, never closed); a :class:`DaskCluster`
        (connect to its scheduler, or start a local cluster of its
        workers); or None: the current client (``distributed.default_client``),
        else a local cluster with one single-threaded worker process per core.
    url:
        Where the job writes or reads. ``memory://`` lives in this process
        only, so its cluster is threads in this process, and the current
        client (whose workers are other processes) is never used for it.
    small:
        The job is small enough that starting worker processes would cost
        more than it saves: with no choice and no current client, its
        cluster is threads in this process too.

    Raises
    ------
    SchedulerUnreachableError
        Nothing answers at the scheduler's ``tcp://`` address.
    """
    from distributed import Client, LocalCluster, default_client

    from .interrupts import interrupts_to_this_thread
    from .scheduler import connect

    if choice is not None and not isinstance(choice, DaskCluster):
        with avoid_held_workers(choice):
            yield choice
        return
    if choice is not None and choice.scheduler is not None:
        with connect(choice.scheduler) as client, avoid_held_workers(client):
            yield client
        return
    workers = None if choice is None else choice.workers
    in_process = url.startswith("memory://")
    if workers is None and not in_process:
        try:
            current = default_client()
        except ValueError:
            current = None
        if current is not None:
            with avoid_held_workers(current):
                yield current
            return
    threaded = workers is None and (in_process or small)
    if threaded:
        workers, threads = 1, 2
    else:
        threads = 1
    with contextlib.ExitStack() as stack:
        # Ctrl-C is the client's: the cluster's thread and worker processes never see it.
        with interrupts_to_this_thread():
            cluster = stack.enter_context(
                LocalCluster(
                    processes=not threaded,
                    n_workers=workers,
                    threads_per_worker=threads,
                    # A free loopback port: None still binds :8787, which a second job would
                    # fight for.
                    dashboard_address="127.0.0.1:0",
                    scheduler_port=0,
                )
            )
            client = stack.enter_context(Client(cluster))
        yield client
