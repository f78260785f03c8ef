"""Staging a write task's shards in the catalog on a thread, while the task writes the next one.

A write task publishes shard N and goes on encoding shard N+1. Staging N
(its records' bulk insert, most of which runs inside the database without
the GIL: SQLite's B-tree work, PostgreSQL's COPY on the wire) runs meanwhile
on one background thread, in publication order, so the two overlap on a
machine with a spare core instead of adding up.

What stays as it was with staging inline:

- shards are staged in the order they were published, one at a time;
- the task returns only once every shard it published is staged, and a
  stage that failed fails the task with its own error;
- after a failed stage nothing more is staged: a shard published meanwhile
  is handed to ``discard`` if the failure says the job has ended
  (:class:`~shardcat.errors.CommitConflictError`: the file is the task's
  alone), and is otherwise left for gc, as a task that fails mid-way leaves
  its files;
- an in-memory SQLite catalog, whose one connection two threads cannot
  share, and a thread that cannot start, stage inline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import Any, Generic, TypeVar

from ..errors import CommitConflictError

__all__ = ["Stager"]

log = logging.getLogger(__name__)

V = TypeVar("V")


class Stager(Generic[V]):
    """Runs ``stage(info, values)`` for each published shard, in order, on one thread.

    A context manager: leaving it waits for every stage. Without an error
    in its body, it raises the first stage's error, if any.
    """

    def __init__(
        self,
        stage: Callable[[Any, V], None],
        discard: Callable[[Any], None],
        *,
        background: bool = True,
    ) -> None:
        self._stage = stage
        self._discard = discard
        self._background = background
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._failure: BaseException | None = None

    def submit(self, info: Any, values: V) -> None:
        """Stage ``info`` after every shard submitted before it.

        Raises the error of an earlier stage that failed (``info`` is then
        not staged), or, staging inline, this stage's own.
        """
        if self._failure is not None:
            self._skip(info)
            self.wait()  # raises the failure, once the stages in flight have ended
        if self._background:
            try:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(1, thread_name_prefix="shardcat-stage")
                self._pending.append(self._pool.submit(self._run, info, values))
                return
            except RuntimeError as e:  # no thread to be had (interpreter limits, shutdown)
                log.debug("staging inline: %s", e)
                self.wait()
                self._background = False
        self._run(info, values)

    def wait(self) -> None:
        """Wait for every stage submitted; raises the first failure, if any."""
        pending, self._pending = self._pending, []
        for future in pending:
            future.exception()  # waits; the first failure is kept by _run
        if self._failure is not None:
            raise self._failure

    def _run(self, info: Any, values: V) -> None:
        if self._failure is not None:  # queued before the failure: never staged
            self._skip(info)
            return
        try:
            self._stage(info, values)
        except BaseException as e:
            self._failure = e
            raise

    def _skip(self, info: Any) -> None:
        if isinstance(self._failure, CommitConflictError):
            self._discard(info)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> Stager[V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc is None:
                self.wait()
                return
            try:
                self.wait()  # no thread goes on staging after its task has failed
            except BaseException as e:
                log.debug("a shard's staging also failed: %s", e)
        finally:
            self.close()
