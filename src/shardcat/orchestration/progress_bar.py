"""A ready-made progress drawer for ``shardcat.write``: a rich bar on the terminal.

``shardcat.write(..., progress=True)`` draws one; the ``shardcat write``
command passes its own instance. rich is imported when the bar first
draws, never by a write that shows no progress.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from .._units import format_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from .progress import WriteProgress

__all__ = ["WriteProgressBar"]


class WriteProgressBar:
    """Partitions done, records and bytes written, throughput: one rich bar, updated per event.

    A progress callback for :func:`shardcat.write`. The bar appears with
    the first event and stops with the last partition (before the commit);
    use it as a context manager so that a failed write stops it too::

        with WriteProgressBar() as bar:
            shardcat.write(bag, url, catalog=url, dataset="train", progress=bar)

    Parameters
    ----------
    console:
        The rich console to draw on (default: rich's global console).
    transient:
        Remove the bar when it stops, instead of leaving its last state.
    """

    def __init__(self, console: Console | None = None, *, transient: bool = False) -> None:
        self._console = console
        self._transient = transient
        self._progress: Any = None
        self._task: Any = None
        self._stopped = False

    def __call__(self, event: WriteProgress) -> None:
        if self._stopped:
            return
        if self._progress is None:
            self._start()
        stats = (
            f"{event.records:,} records, {format_bytes(event.bytes)}, {event.mb_per_s:.0f} MB/s"
            if event.done_partitions
            else ""
        )
        self._progress.update(
            self._task,
            total=event.total_partitions,
            completed=event.done_partitions,
            stats=stats,
        )
        if event.finished:
            self.close()

    def _start(self) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]writing"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("partitions"),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=self._console,
            transient=self._transient,
        )
        self._progress.start()
        self._task = self._progress.add_task("write", total=None, stats="")

    def close(self) -> None:
        """Stop drawing (the bar's last state stays unless ``transient``); safe to call twice."""
        if self._progress is not None and not self._stopped:
            self._progress.stop()
        self._stopped = True

    def __enter__(self) -> WriteProgressBar:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
