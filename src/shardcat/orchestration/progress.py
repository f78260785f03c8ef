"""How far a write job has got: the events ``shardcat.write(progress=...)`` sends.

The library draws nothing here and imports no terminal library: a caller
that wants a bar passes a callable (the CLI passes its own, ``progress=True``
uses :class:`~shardcat.orchestration.progress_bar.WriteProgressBar`), and
gets a :class:`WriteProgress` after each partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from ..errors import ProgressCallbackError
from .throughput import Throughput

if TYPE_CHECKING:
    from .tasks import PartitionResult

__all__ = ["ProgressReporter", "WriteProgress", "WriteProgressCallback"]


@dataclass(frozen=True, slots=True)
class WriteProgress(Throughput):
    """Where a write job stands, as a progress callback receives it.

    Every field only grows from one event to the next, and ``total_partitions``
    never changes once it is known.

    Attributes
    ----------
    done_partitions:
        Partition tasks that have finished (their shards are written and staged).
    total_partitions:
        Partition tasks of the job; ``None`` while an iterable is still being
        read (its batches are counted as they are sent).
    records:
        Records written by the finished partitions.
    bytes:
        Bytes of the shards the finished partitions wrote.
    seconds:
        Time since the job's first task was sent.
    """

    done_partitions: int
    total_partitions: int | None
    records: int
    bytes: int
    seconds: float

    @property
    def finished(self) -> bool:
        """Whether every partition has finished (the commit comes next)."""
        return self.total_partitions is not None and self.done_partitions >= self.total_partitions


WriteProgressCallback: TypeAlias = Callable[[WriteProgress], object]
"""What ``shardcat.write(progress=...)`` accepts besides ``True``/``False``: its return value is ignored."""


class ProgressReporter:
    """Sums up partition results and sends each new state to the callback (if any).

    Runs in the thread that called ``shardcat.write``. A callback that raises
    fails the write with :class:`~shardcat.errors.ProgressCallbackError`:
    the job is then aborted like any failed job, which also makes raising
    from the callback the way to cancel a job.
    """

    def __init__(
        self, callback: WriteProgressCallback | None, *, dataset: str, job_id: int
    ) -> None:
        self._callback = callback
        self._dataset = dataset
        self._job_id = job_id
        self._t0 = time.perf_counter()
        self._total: int | None = None
        self._done = 0
        self._records = 0
        self._bytes = 0

    def start(self, total: int | None) -> None:
        """The job's tasks are being sent: ``total`` of them, or ``None`` if not known yet."""
        self._t0 = time.perf_counter()
        self._total = total
        self._emit()

    def total_known(self, total: int) -> None:
        """Every task has been sent (an iterable ran out): there are ``total`` of them."""
        self._total = total
        self._emit()

    def partition_done(self, result: PartitionResult) -> None:
        """One partition task has finished."""
        self._done += 1
        self._records += result.records
        self._bytes += result.bytes
        self._emit()

    def _emit(self) -> None:
        if self._callback is None:
            return
        event = WriteProgress(
            done_partitions=self._done,
            total_partitions=self._total,
            records=self._records,
            bytes=self._bytes,
            seconds=time.perf_counter() - self._t0,
        )
        try:
            self._callback(event)
        except Exception as e:
            name = getattr(self._callback, "__qualname__", type(self._callback).__name__)
            raise ProgressCallbackError(
                f"the progress callback {name} raised {type(e).__name__}: {e}; write job "
                f"{self._job_id} of dataset {self._dataset!r} is aborted and none of its records "
                "become visible (fix the callback, or write with progress=False)"
            ) from e
