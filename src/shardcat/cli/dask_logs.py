"""Dask's own report of a failed task, kept off the terminal unless ``-v``.

A task that raises is logged by the worker that ran it ("Compute Failed", the
task, a ``Traceback: '...'`` line) before the client re-raises the error,
which :func:`shardcat.cli.app.main` prints as one line. A local cluster's
workers are processes of their own that take their logging from Dask's
configuration, read from the environment as they start: so the level is set
there, and on this process's logger for workers that run in it. The nannies of a
local cluster run in this process: when a job stops (failed, interrupted) they
warn about the workers they stop, which is their business, not the user's.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["failed_tasks_quiet"]

_LEVELS = {
    "distributed.worker": logging.CRITICAL,  # "Compute Failed"; heartbeats lost at shutdown
    "distributed.nanny": logging.ERROR,  # "Worker process still alive after 4.0 seconds, killing"
    # "Couldn't gather 1 keys, rescheduling": every worker gone; the job's own error says so.
    "distributed.client": logging.ERROR,
}


class _AbandonedGather(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" for a gather the job gave up on.

    When every worker is lost the job stops with WorkersLostError; the gather it
    abandoned ends in Dask's ``AllExit``, which asyncio reports when the task is
    collected, possibly as the process exits: so the filter stays for the process.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            exc = getattr(record, "msg", None) if isinstance(record.msg, BaseException) else None
        return not (exc is not None and type(exc).__name__ == "AllExit")


_ABANDONED = _AbandonedGather()
_ENV = "DASK_LOGGING"  # Dask parses the value as a Python literal: {logger: level}


@contextmanager
def failed_tasks_quiet(verbose: object) -> Iterator[None]:
    """While the command runs, Dask workers log only their critical messages, nannies their
    errors (unless ``verbose``).

    A ``$DASK_LOGGING`` of the user's own wins: it is left as it is.
    """
    if verbose or _ENV in os.environ:
        yield
        return
    logging.getLogger("asyncio").addFilter(_ABANDONED)  # once: a filter is added at most once
    loggers = {name: logging.getLogger(name) for name in _LEVELS}
    before = {name: logger.level for name, logger in loggers.items()}
    os.environ[_ENV] = repr(
        {name: logging.getLevelName(lv).lower() for name, lv in _LEVELS.items()}
    )
    for name, logger in loggers.items():
        logger.setLevel(_LEVELS[name])
    try:
        yield
    finally:
        os.environ.pop(_ENV, None)
        for name, logger in loggers.items():
            logger.setLevel(before[name])
