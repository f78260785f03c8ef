"""ShardWriter and ShardReader that also take URLs on any fsspec backend."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, BinaryIO

from .._closing import CloseOrAbort
from .._types import RangeSource, StorageOptions
from .._units import parse_size
from ..format import reader as _reader
from ..format import writer as _writer
from ..format.entries import sample_key
from ..format.info import ShardInfo
from .atomic import PendingFile, open_pending
from .fs import join, redact
from .sources import open_source

__all__ = ["RollingShardWriter", "ShardReader", "ShardWriter", "open_shard", "open_writer"]

_log = logging.getLogger(__name__)


def open_writer(
    target: str | os.PathLike[str] | BinaryIO,
    *,
    storage_options: StorageOptions | None = None,
    exclusive: bool = False,
    **writer_options: Any,
) -> _writer.ShardWriter:
    """A :class:`shardcat.format.ShardWriter` writing one shard to a URL, a path or a file object.

    A URL is written through the sink :func:`.atomic.open_pending` builds for
    it, published only when the writer closes successfully: a local file is
    synced and renamed (or linked) into place, its 4 MiB blocks written by a
    background thread while the next one is encoded; an object-store upload
    completes at close (its parts sent concurrently) and is aborted on error.
    A file object is written as it is (``close_file`` closes it).

    Parameters
    ----------
    target:
        A URL or path, or a writable binary file object.
    storage_options:
        fsspec options for the URL's filesystem (credentials, endpoint, ...).
    exclusive:
        Never replace an existing object: ``close()`` raises
        :class:`~shardcat.errors.ObjectExistsError` if the name is taken by
        then (and nothing is published). By default a URL target is replaced,
        like ``open(path, "wb")``.
    **writer_options:
        Every option of :class:`shardcat.format.ShardWriter`.

    Raises
    ------
    StorageError
        The URL cannot be written (a missing bucket, refused credentials, ...).
    """
    sink, options = _sink(target, storage_options, exclusive, writer_options)
    try:
        return _writer.ShardWriter(sink, **options)
    except BaseException:
        _drop(sink)
        raise


def _sink(
    target: str | os.PathLike[str] | BinaryIO,
    storage_options: StorageOptions | None,
    exclusive: bool,
    options: dict[str, Any],
) -> tuple[Any, dict[str, Any]]:
    """The sink for ``target`` (a URL's :class:`.atomic.PendingFile`, or the file object)."""
    if not isinstance(target, (str, os.PathLike)):
        return target, options
    url = os.fspath(target)
    return open_pending(url, storage_options, exclusive=exclusive), {"path": redact(url), **options}


def _drop(sink: Any) -> None:
    if isinstance(sink, PendingFile):
        sink.discard()


class ShardWriter(_writer.ShardWriter):
    """Write one shard to a file object or a URL (``s3://bucket/train-000000.shard``, a path, ...).

    :class:`shardcat.format.ShardWriter` over the sink :func:`open_writer`
    builds for the target, and nothing else: a URL is published only when
    the writer closes successfully (see :func:`open_writer`).

    Parameters
    ----------
    target:
        A URL or path, or a writable binary file object.
    storage_options:
        fsspec options for the URL's filesystem (credentials, endpoint, ...).
    exclusive:
        Never replace an existing object (:class:`~shardcat.errors.ObjectExistsError`
        at ``close()``); by default a URL target is replaced.
    **kwargs:
        Every option of :class:`shardcat.format.ShardWriter`.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | BinaryIO,
        *,
        storage_options: StorageOptions | None = None,
        exclusive: bool = False,
        **kwargs: Any,
    ) -> None:
        sink, options = _sink(target, storage_options, exclusive, kwargs)
        try:
            super().__init__(sink, **options)
        except BaseException:
            _drop(sink)
            raise


class ShardReader(_reader.ShardReader):
    """Read one shard from a URL, a path, a file object, bytes or a RangeSource.

    Parameters
    ----------
    source:
        Where the shard is. Local paths are read with ``os.pread``; other URLs
        through fsspec with ranged requests.
    storage_options:
        fsspec options for the URL's filesystem.
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | BinaryIO | bytes | bytearray | memoryview | RangeSource,
        *,
        storage_options: StorageOptions | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(source, (str, os.PathLike)):
            src = open_source(source, storage_options)
            try:
                super().__init__(src, **kwargs)
            except BaseException:
                src.close()
                raise
            self._owned = True
        else:
            super().__init__(source, **kwargs)


def open_shard(
    url: str | os.PathLike[str], storage_options: StorageOptions | None = None, **kwargs: Any
) -> ShardReader:
    """Open a shard for reading; the same as ``ShardReader(url, storage_options=...)``."""
    return ShardReader(url, storage_options=storage_options, **kwargs)


class RollingShardWriter(CloseOrAbort):
    """Write numbered shards into a folder, starting the next one when a shard is full.

    Shards are named by ``pattern`` under ``root``: ``{number}`` is the shard
    number (stored in its header), ``{index}`` its position in this writer
    (``number - start``), e.g. ``"train-{number:06d}.shard"``. A shard is
    closed once it holds ``max_bytes`` or ``max_records``. Where publishing a
    shard is mostly a wait for the store (a local file's ``fsync`` and link,
    an S3 PUT through obstore) it runs on a thread while the next shard is
    encoded; ``on_shard_closed`` is called, in shard order, once
    a shard is published: at once where it was published before the next is
    opened, else by the next call that waits for it (the next shard's
    closing, :meth:`close` or :meth:`abort`). Its error is raised by that
    call, or logged by :meth:`abort` (the error that led there is the one to
    see).

    Parameters
    ----------
    root:
        Folder URL the shards go to.
    pattern:
        Name of shard ``number``, as a ``str.format`` pattern, or a function
        of ``(number, index)`` returning the name (called as each shard opens).
    max_bytes:
        Close a shard once it has this many bytes (an int or ``"256MB"``).
    max_records:
        Close a shard once it has this many records.
    start:
        Number of the first shard.
    on_shard_closed:
        Called with each shard's :class:`ShardInfo` once it is published (see above).
    **writer_options:
        Passed to every :class:`ShardWriter` (``compression``, ``metadata``, ...).
    """

    def __init__(
        self,
        root: str,
        pattern: str | Callable[[int, int], str] = "shard-{number:06d}.shard",
        *,
        max_bytes: int | str = "256MB",
        max_records: int | None = None,
        start: int = 0,
        storage_options: StorageOptions | None = None,
        on_shard_closed: Callable[[ShardInfo], None] | None = None,
        **writer_options: Any,
    ) -> None:
        self.root = root
        self.pattern = pattern
        self.max_bytes = parse_size(max_bytes)
        self.max_records = max_records
        self.start = start
        self.next_number = start
        self._storage_options = storage_options
        self._on_closed = on_shard_closed
        self._options = writer_options
        self._current: _writer.ShardWriter | None = None
        self._publishing: Future[ShardInfo] | None = None
        self._last: dict[str, Any] | None = None
        self.shards: list[ShardInfo] = []

    def url_of(self, number: int) -> str:
        index = number - self.start
        if callable(self.pattern):
            return join(self.root, self.pattern(number, index))
        return join(self.root, self.pattern.format(number=number, index=index))

    def add(self, key: str, entries: Mapping[str, Any]) -> None:
        """Add a record to the current shard, opening one if needed."""
        w = self._current
        if w is None:
            number = self.next_number
            self.next_number += 1
            w = self._current = open_writer(
                self.url_of(number),
                storage_options=self._storage_options,
                shard_number=number,
                **self._options,
            )
            if self._last is not None:
                w.update_metadata(self._last)
        w.add(key, entries)
        if w.bytes_written >= self.max_bytes or (
            self.max_records is not None and w.record_count >= self.max_records
        ):
            self._close_current()

    def mark_last(self, metadata: Mapping[str, Any]) -> None:
        """Give the shard that takes the next record this extra metadata, and no later shard.

        Call it before adding the last record: that record's shard (the open
        one, or the one it opens) says in its footer that it is the last, so
        a reader can tell a complete run of shards from an interrupted one.
        """
        self._last = dict(metadata)
        if self._current is not None:
            self._current.update_metadata(self._last)

    def write(self, sample: Mapping[str, Any]) -> None:
        """Add a sample dict with a ``__key__``."""
        self.add(sample_key(sample), sample)

    @property
    def closed_shards(self) -> int:
        """Shards closed so far: those in :attr:`shards` and the one still being published."""
        return len(self.shards) + (self._publishing is not None)

    def _close_current(self) -> None:
        w, self._current = self._current, None
        if w is None:
            return
        # Where publishing is a wait for the store (fsync, a PUT) it runs on a thread while
        # the next shard is encoded. The previous shard is reported before this one
        # starts: shards are reported in order, each once published, and if one
        # failed, the next is dropped, never published.
        try:
            self._report_published()
        except BaseException:
            w.abort()
            raise
        self._publishing = w.close_in_background()
        # A shard published before close_in_background returned (s3fs, memory://, a file
        # object) is reported here. One published on a thread is reported by the next call
        # that waits for it (the next rollover, close() or abort()), however fast the store
        # answered: which call runs on_shard_closed, and so where its error surfaces, does
        # not depend on a race with the thread.
        if not w.sink.publishes_in_background:
            self._report_published()

    def _report_published(self) -> None:
        """Wait for the shard being published, if any, and report it (or raise its error)."""
        publishing = self._publishing
        if publishing is None:
            return
        try:
            info = publishing.result()
        finally:
            # Only once its outcome is known: a wait cut short (Ctrl-C) leaves it to abort().
            if publishing.done():
                self._publishing = None
        self.shards.append(info)
        if self._on_closed is not None:
            self._on_closed(info)

    def close(self) -> list[ShardInfo]:
        """Close the open shard and return the summaries of all shards written."""
        self._close_current()
        self._report_published()
        return self.shards

    def abort(self) -> None:
        """Drop the shard being written (shards already closed stay).

        A closed shard still being published is waited for and, once
        published, reported like any other (its own failure is logged: the
        error that led here is the one to see).
        """
        w, self._current = self._current, None
        try:
            if w is not None:
                w.abort()
        finally:
            publishing = self._publishing
            try:
                self._report_published()
            except Exception as e:
                failed = publishing is not None and publishing.exception() is not None
                what = "was not published" if failed else "was published but not reported"
                _log.warning("during abort, a closed shard %s: %s", what, e)
