"""Opening one file as a RangeSource: local paths by ``os.pread``, other URLs through fsspec.

Every read of a shard goes through :func:`open_source`, directly (readers,
verify, reindex, streaming) or through a :class:`~shardcat.storage.cache.SourceCache`
(lookups).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

from .._types import ByteRange, RangeSource, StorageOptions
from ..format.sources import FileSource
from . import gap, retry
from .fs import is_local, local_path, redact, resolve
from .objstore import open_obstore
from .translate import is_backend_error, storage_errors, translate

if TYPE_CHECKING:
    import fsspec

__all__ = ["FsspecSource", "in_flight", "open_source", "retried", "try_once"]

_STREAM_BLOCK = 8 * 1024 * 1024


# Backends that cannot read "the last N bytes" (an HTTP suffix range, a negative
# start to cat_file): adlfs passes the negative offset to the Azure SDK, which
# fails with "Required Content-Range response header is missing or malformed".
# They read the size, then a positive range (two round trips instead of one).
_NO_SUFFIX_PROTOCOLS = frozenset({"az", "abfs", "abfss", "adl"})
# Filesystem classes found lacking them at run time (a ValueError or
# NotImplementedError for a negative start): asked once per process, not per read.
_no_suffix_classes: set[type] = set()


def _suffix_reads(fs: fsspec.AbstractFileSystem) -> bool:
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return type(fs) not in _no_suffix_classes and _NO_SUFFIX_PROTOCOLS.isdisjoint(protocols)


class FsspecSource:
    """Reads one file through an fsspec filesystem.

    Always passes ``start=``/``end=`` by keyword: s3fs's second positional
    argument of ``cat_file`` is a version id.
    """

    read_ahead = True
    """Streams read the next chunk on a background thread while one is decoded.

    Every read waits on a round trip here, and ``fs.cat_file`` may be called
    from any thread (fsspec runs the request on its own event loop).
    """
    transport = "fsspec"
    """The client reading this file (``ObstoreSource.transport`` is ``"obstore"``)."""

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, name: str) -> None:
        self.fs = fs
        self.path = path
        self._name = name
        self.suffix_reads = _suffix_reads(fs)
        """Whether :meth:`read_suffix` is one request (False: a size, then a ranged read)."""
        self.store_key = gap.fsspec_store_key(fs)
        """Whose latency and bandwidth this file's reads measure (:mod:`.gap`)."""
        self.in_flight = in_flight(fs)
        """Requests one ``cat_ranges`` call keeps in flight."""

    @property
    def stream_chunk(self) -> int:
        """Bytes per read-ahead request of a stream, from the store's measured latency and
        bandwidth (:func:`.gap.stream_chunk`)."""
        return gap.stream_chunk(self.store_key)

    @property
    def name(self) -> str:
        return self._name

    def size(self) -> int:
        with storage_errors(self._name, fs=self.fs):
            return int(retried(self.fs, "size", self._name, self.path))

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        started = time.perf_counter()
        with storage_errors(self._name, fs=self.fs):
            data = bytes(retried(self.fs, "cat_file", self._name, self.path, start=start, end=end))
        gap.record(self.store_key, 1, len(data), started, 1)
        return data

    def read_suffix(self, length: int) -> bytes:
        if self.suffix_reads:
            try:
                # A negative start is one suffix-range request on HTTP stores.
                started = time.perf_counter()
                data = bytes(retried(self.fs, "cat_file", self._name, self.path, start=-length))
                gap.record(self.store_key, 1, len(data), started, 1)
                # A server that ignores a suffix range answers with the whole object
                # (gcp-storage-emulator does; gcsfs does not check for a 206): its end is
                # the suffix asked for.
                return data[len(data) - length :] if len(data) > length else data
            except (ValueError, NotImplementedError):
                # This backend has no suffix reads: remember it for its class, and
                # fall back (a real failure shows again in the reads below).
                _no_suffix_classes.add(type(self.fs))
                self.suffix_reads = False
            except Exception as e:
                if not is_backend_error(e):
                    raise
                raise translate(e, self._name, fs=self.fs) from e
        size = self.size()
        return self.read(max(0, size - length), size)

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        if not ranges:
            return []
        if len(ranges) == 1:
            return [self.read(ranges[0].start, ranges[0].end)]
        started = time.perf_counter()
        with storage_errors(self._name, fs=self.fs):
            out = retried(
                self.fs,
                "cat_ranges",
                self._name,
                [self.path] * len(ranges),
                [r.start for r in ranges],
                [r.end for r in ranges],
                on_error="raise",
            )
        blobs = [bytes(b) for b in out]
        gap.record(self.store_key, len(blobs), sum(map(len, blobs)), started, self.in_flight)
        return blobs

    def open_stream(self, start: int = 0) -> BinaryIO:
        with storage_errors(self._name, fs=self.fs):
            f = self.fs.open(self.path, "rb", block_size=_STREAM_BLOCK, cache_type="none")
        if start:
            f.seek(start)
        return f  # type: ignore[no-any-return]

    def close(self) -> None:
        pass


_POOL = 10
"""botocore's default ``max_pool_connections`` (an s3fs filesystem made without
:func:`.fs.resolve`, which sizes it to ``remote_in_flight``), and what other async
filesystems are taken to keep in flight."""


def in_flight(fs: fsspec.AbstractFileSystem) -> int:
    """Requests one ``cat_ranges`` call of ``fs`` has in flight at once: an async filesystem's
    connection pool (botocore's ``max_pool_connections``), else one after another."""
    if not getattr(fs, "async_impl", False):
        return 1
    config = getattr(fs, "config_kwargs", None) or {}
    return max(1, int(config.get("max_pool_connections", _POOL)))


def retried(
    fs: fsspec.AbstractFileSystem, method: str, name: str, *args: Any, **kwargs: Any
) -> Any:
    """``fs.<method>(*args, **kwargs)``, retried through transient failures (:func:`.retry.call`).

    On an async filesystem (s3fs, gcsfs, adlfs) each try is cut off when the
    deadline's time left runs out (fsspec's ``timeout=``, which cancels the
    request): a store that never answers fails in time. A try that returns
    failures among its results (``cat_ranges(on_error="return")``) is
    retried where one of them is transient.
    """
    bound = getattr(fs, "async_impl", False)
    if bound and getattr(fs, "_s3", False) is None:
        # s3fs makes its botocore client at its first call (a second or more: the service
        # model is parsed on the event loop's thread). Made here, untimed, it is not taken
        # for a store that does not answer.
        fs.connect()

    def attempt(timeout: float | None) -> Any:
        out = try_once(fs, method, timeout, *args, **kwargs)
        if isinstance(out, list):
            for item in out:
                if isinstance(item, Exception) and retry.is_retryable(item):
                    raise item
        return out

    return retry.call(attempt, name)


def try_once(
    fs: fsspec.AbstractFileSystem, method: str, timeout: float | None, *args: Any, **kwargs: Any
) -> Any:
    """One try of ``fs.<method>(*args, **kwargs)``, cut off after ``timeout`` seconds where the
    filesystem can cut it off (an async one's sync wrappers: fsspec's ``timeout=``)."""
    call = getattr(fs, method)
    # Only fsspec's sync wrappers of async methods (set on the instance) take timeout=:
    # a filesystem's own sync method (adlfs's size) does not.
    timed = getattr(fs, "async_impl", False) and timeout and method in vars(fs)
    return call(*args, timeout=timeout, **kwargs) if timed else call(*args, **kwargs)


def open_source(
    url: str | os.PathLike[str], storage_options: StorageOptions | None = None
) -> RangeSource:
    """A RangeSource for ``url``: positional reads (``os.pread``) for local files, fsspec otherwise
    (obstore for s3:// where ``SHARDCAT_S3_TRANSPORT``, ``auto`` by default, picks it:
    :func:`~shardcat.storage.choose_transport`)."""
    url = os.fspath(url)
    if is_local(url):
        path = local_path(url)
        try:
            return FileSource(path)
        except OSError as e:
            raise translate(e, path) from e
    # s3:// through obstore where storage/transport.py picks it (storage/objstore.py).
    fast = open_obstore(url, storage_options)
    if fast is not None:
        return fast
    fs, path = resolve(url, storage_options)
    return FsspecSource(fs, path, redact(url))
