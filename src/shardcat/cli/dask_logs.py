"""Dask's own report of a failed task, kept off the terminal unless ``-v``.

A task that raises is logged by the worker that ran it ("Compute Failed", the
task, a ``Traceback: '...'`` line) before the client re-raises the error,
which :func:`shardcat.cli.app.main` prints as one line. A local cluster's
workers are processes of their own that take their logging from Dask's
configuration, read from the environment as they start: so the level is set
there, and on this process's logger for workers that run in it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["failed_tasks_quiet"]

_LOGGERS = (
    "distributed.worker",  # "Compute Failed" (with the task's traceback), lost heartbeats
    "distributed.nanny",  # "Worker process still alive ..., killing" as a failed job's cluster stops
)
_ENV = "DASK_LOGGING"  # Dask parses the value as a Python literal: {logger: level}


@contextmanager
def failed_tasks_quiet(verbose: object) -> Iterator[None]:
    """While the command runs, Dask workers log only their critical messages (unless ``verbose``).

    A ``$DASK_LOGGING`` of the user's own wins: it is left as it is.
    """
    if verbose or _ENV in os.environ:
        yield
        return
    loggers = [logging.getLogger(name) for name in _LOGGERS]
    levels = [logger.level for logger in loggers]
    os.environ[_ENV] = repr(dict.fromkeys(_LOGGERS, "critical"))
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        os.environ.pop(_ENV, None)
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
