"""Where a ShardWriter's bytes go: the :class:`ShardSink` protocol, and a sink over a binary file.

A shard is written in one forward pass, so its target needs only to take
bytes in order, then either publish them (``close``) or drop them
(``abort``). :mod:`shardcat.storage` builds the sinks for URLs (a local file
renamed into place, an object-store upload); :class:`FileSink` is the one for
a writable file object.
"""

from __future__ import annotations

from typing import Any, BinaryIO, Protocol, runtime_checkable

__all__ = ["FileSink", "ShardSink", "as_sink"]


@runtime_checkable
class ShardSink(Protocol):
    """The target of a :class:`~shardcat.format.ShardWriter`.

    Attributes
    ----------
    keeps_partial:
        An aborted shard's bytes stay readable (a plain file: its records can
        be salvaged), so the writer hands over what it gathered before
        aborting; False where ``abort`` drops everything anyway.
    publishes_in_background:
        ``close`` is mostly a wait without the GIL (a local file's ``fsync``
        and link, an S3 PUT through obstore), worth running on a thread while
        the caller goes on (:meth:`ShardWriter.close_in_background`).
    """

    keeps_partial: bool
    publishes_in_background: bool

    def write(self, data: bytes | bytearray | memoryview, /) -> Any:
        """Append ``data`` (the writer never reuses a ``bytes`` it handed over)."""

    def flush(self) -> None:
        """Hand over every byte written (errors of writes still in flight are raised here)."""

    def close(self) -> None:
        """Publish the shard: every byte was written. Raises if nothing could be published."""

    def abort(self) -> None:
        """Give the shard up: nothing is published (idempotent)."""


class FileSink:
    """A writable binary file as a sink: ``close`` flushes it, and closes it if ``close_file``."""

    keeps_partial = True
    publishes_in_background = False

    def __init__(self, file: BinaryIO, *, close_file: bool = False) -> None:
        self.file = file
        self._close_file = close_file
        self.write = file.write  # no frame of ours per write

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.flush()
        if self._close_file:
            self.file.close()

    def abort(self) -> None:
        if self._close_file:
            self.file.close()


def as_sink(target: ShardSink | BinaryIO, *, close_file: bool = False) -> ShardSink:
    """``target`` itself if it is a :class:`ShardSink`, else a :class:`FileSink` over it."""
    if isinstance(target, ShardSink):
        return target
    return FileSink(target, close_file=close_file)
