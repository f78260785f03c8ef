"""S3 reads through obstore (the Rust ``object_store`` crate, as Lance uses): the default where it can serve.

s3fs (aiobotocore + aiohttp) does each request's signing, parsing and body
copies in Python, holding the GIL; obstore does them in Rust, without it.
On the benchmarks' moto server that made one ranged GET ~3 x faster and a
batch's merged ranges ~3.5 x (``benchmarks/bench_s3_client.py``,
``benchmarks/README.md`` at a731c64). Which URLs it reads is decided in
:mod:`.transport` (``SHARDCAT_S3_TRANSPORT``, ``auto`` by default: obstore
where it finds the same credentials, endpoint and region as s3fs, s3fs
everywhere else); fsspec stays the way every other store is read.

Reads (point lookups, batches, streams) are here; uploads are in :mod:`.objput`,
which takes its stores from :func:`s3_store`.
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Sequence
from typing import Any, BinaryIO, cast

from .._types import ByteRange, StorageOptions
from ..errors import StorageError
from . import gap, retry
from .fs import protocol_of, redact
from .translate import storage_errors
from .transport import S3_PROTOCOLS, TRANSPORT_ENV, TransportChoice, choose_transport

__all__ = ["TRANSPORT_ENV", "ObstoreSource", "open_obstore", "s3_store"]

_log = logging.getLogger(__name__)
_STREAM_BUFFER = 8 << 20
# Per process, bucket, use (obstore's multipart uploads, or everything else) and retry
# settings: the route it was built for (the s3fs filesystem's botocore resolution) and the store.
_stores: dict[tuple[int, str, bool, str], tuple[Any, Any]] = {}
# The process that started obstore's (tokio) runtime. The runtime's threads do
# not survive fork: in a forked child (a DataLoader worker) every obstore call
# hangs, so a child of a process that used it reads through s3fs instead.
_runtime_pid: int | None = None
_logged: set[tuple[str, str]] = set()
# Buckets S3 redirected to another region (auto mode): s3fs follows, obstore cannot.
_redirected: set[str] = set()
_REDIRECTED = "S3 redirected to the bucket's region (s3fs follows redirects, obstore cannot)"


def _split(url: str) -> tuple[str, str]:
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def open_obstore(url: str, storage_options: StorageOptions | None = None) -> ObstoreSource | None:
    """An obstore source for an s3:// ``url`` where :func:`.transport.choose_transport` picks obstore.

    Returns None where s3fs reads it instead (not S3, ``fsspec`` selected,
    ``auto`` and a credential, endpoint or region situation that only s3fs
    reads right, an option obstore does not understand, or a process forked
    after obstore ran). Each decision is logged once per bucket and reason
    (logger ``shardcat.storage.objstore``: DEBUG, or WARNING where
    ``SHARDCAT_S3_TRANSPORT=obstore`` was asked for and cannot serve).

    Raises
    ------
    StorageError
        ``obstore`` is selected but not installed, or the variable's value is unknown.
    """
    found = s3_store(url, storage_options)
    if found is None:
        return None
    store, key, choice = found
    return ObstoreSource(
        store,
        key,
        redact(url),
        url=url,
        storage_options=storage_options,
        region_fallback=choice.mode == "auto",
        store_key=f"obstore {choice.config.get('endpoint') if choice.config else None}",
    )


def s3_store(
    url: str, storage_options: StorageOptions | None = None, *, parts: bool = False
) -> tuple[Any, str, TransportChoice] | None:
    """obstore's ``S3Store`` for ``url``'s bucket, the object's key and why; None where s3fs serves.

    Its requests are retried under :mod:`.retry`'s deadline by the caller
    (obstore's own retries off), except with ``parts``: a store for obstore's
    multipart uploads (:mod:`.objput`), which retries each part itself
    (:func:`.retry.obstore_retry_config`). Stores are cached per process,
    bucket, use and configuration. The rules and the errors are :func:`open_obstore`'s.
    """
    global _runtime_pid
    if protocol_of(url) not in S3_PROTOCOLS:
        return None
    choice = choose_transport(url, storage_options)
    bucket, key = _split(url)
    if choice.transport == "fsspec" or choice.config is None:
        _log_once(bucket, choice.reason, "s3fs", forced=choice.mode == "obstore")
        return None
    if choice.mode == "auto" and bucket in _redirected:
        _log_once(bucket, _REDIRECTED, "s3fs")
        return None
    if _runtime_pid is not None and _runtime_pid != os.getpid():
        _log_once(bucket, "forked after obstore ran (its runtime does not survive fork)", "s3fs")
        return None
    try:
        from obstore.store import S3Store
    except ImportError:
        raise StorageError(
            f"{TRANSPORT_ENV}=obstore needs obstore: pip install 'shardcat[s3]'"
        ) from None
    # One store per bucket and route: a new s3fs filesystem (other options, or its cache
    # cleared) is resolved again, and its store replaces the bucket's old one.
    timeouts = retry.obstore_retry_config(parts=parts)
    cache_key = (os.getpid(), bucket, parts, repr(timeouts))  # a new deadline: a new store
    cached = _stores.get(cache_key)
    if cached is not None and cached[0] is choice.route:
        store = cached[1]
    else:
        options = {**choice.config}
        options["client_options"] = {
            **options.get("client_options", {}),
            **timeouts["client_options"],
        }
        store = S3Store(
            bucket,
            retry_config=timeouts["retry_config"],
            credential_provider=choice.credentials,
            **options,
        )
        _stores[cache_key] = (choice.route, store)
    _runtime_pid = os.getpid()
    _log_once(bucket, choice.reason, "obstore")
    return store, key, choice


def region_redirected(e: BaseException, url: str) -> bool:
    """Whether ``e`` is S3's redirect to the bucket's region; if so, later opens of ``url``'s
    bucket take s3fs, which follows it (``auto`` only: the caller's source was picked by it)."""
    if "incorrectly configured region" not in str(e):
        return False
    bucket = url.split("://", 1)[-1].split("/", 1)[0]
    _redirected.add(bucket)
    _log_once(bucket, _REDIRECTED, "s3fs")
    return True


def _log_once(bucket: str, reason: str, transport: str, *, forced: bool = False) -> None:
    if (bucket, reason) in _logged:
        return
    _logged.add((bucket, reason))
    level = logging.WARNING if forced else logging.DEBUG
    _log.log(level, "s3://%s read through %s: %s", bucket, transport, reason)


def _past_end(e: BaseException) -> bool:
    # object_store raises a generic error for HTTP 416 (a range that starts at
    # or after the end); RangeSource.read returns fewer bytes there.
    text = str(e)
    return "416" in text and ("InvalidRange" in text or "Range Not Satisfiable" in text)


class ObstoreSource:
    """Reads one S3 object through an obstore ``S3Store`` (thread-safe, releases the GIL)."""

    read_ahead = True
    """Streams read ahead on threads (``format/prefetch.py``): obstore calls may come from any thread."""

    def __init__(
        self,
        store: Any,
        path: str,
        name: str,
        *,
        url: str | None = None,
        storage_options: StorageOptions | None = None,
        region_fallback: bool = False,
        store_key: str = "obstore",
    ) -> None:
        self.store = store
        self.store_key = store_key
        """Whose latency and bandwidth this file's reads measure (:mod:`.gap`)."""
        self.in_flight = gap.requests_in_flight()
        """Requests a batch of this file's store keeps in flight (:mod:`.fanout`)."""
        self.path = path
        self._name = name
        self._url = url
        self._options = storage_options
        self._pid = os.getpid()
        self._s3fs: Any = None
        self._region_fallback = region_fallback
        self._on_s3fs = False

    @property
    def transport(self) -> str:
        """The client reading this file: ``"obstore"``, or ``"fsspec"`` after fork or a region
        redirect (``FsspecSource.transport`` is ``"fsspec"``)."""
        return "fsspec" if self._on_s3fs or self._pid != os.getpid() else "obstore"

    def _redirected(self, e: BaseException) -> bool:
        """Whether ``e`` is S3's redirect to the bucket's region and this source, picked by
        ``auto``, now reads through s3fs (which follows it), as later opens of the bucket do."""
        if not self._region_fallback or not region_redirected(e, self._url or ""):
            return False
        self._on_s3fs = True
        return True

    def _forked(self) -> Any:
        """The same file through s3fs in a forked child (where obstore hangs) or after a
        region redirect; else None."""
        if self._pid == os.getpid() and not self._on_s3fs:
            return None
        if self._s3fs is None:
            from .fs import resolve
            from .sources import FsspecSource

            if self._url is None:
                raise StorageError(f"{self._name}: an obstore source cannot be used after fork")
            fs, path = resolve(self._url, self._options)
            self._s3fs = FsspecSource(fs, path, self._name)
        return self._s3fs

    @property
    def stream_chunk(self) -> int:
        """Bytes per read-ahead request of a stream, from the store's measured latency and
        bandwidth (:func:`.gap.stream_chunk`)."""
        return gap.stream_chunk(self.store_key)

    @property
    def name(self) -> str:
        return self._name

    def size(self) -> int:
        if (inherited := self._forked()) is not None:
            return int(inherited.size())
        import obstore

        def attempt(timeout: float | None) -> int:
            try:
                return int(obstore.head(self.store, self.path)["size"])
            except Exception as e:
                if self._redirected(e):
                    return self.size()
                raise

        with storage_errors(self._name):
            return retry.call(attempt, self._name)

    def read(self, start: int, end: int) -> bytes:
        return bytes(self.read_buffer(start, end))

    def read_buffer(self, start: int, end: int) -> memoryview:
        """Bytes ``[start, end)`` as a view of obstore's buffer (no copy): a stream's chunks."""
        if end <= start:
            return memoryview(b"")
        if (inherited := self._forked()) is not None:
            return memoryview(inherited.read(start, end))
        import obstore

        def attempt(timeout: float | None) -> memoryview:
            try:
                return memoryview(obstore.get_range(self.store, self.path, start=start, end=end))
            except Exception as e:
                if _past_end(e):
                    return memoryview(b"")
                if self._redirected(e):
                    return self.read_buffer(start, end)
                raise

        started = time.perf_counter()
        with storage_errors(self._name):
            data = retry.call(attempt, self._name)
        gap.record(self.store_key, 1, len(data), started, 1)
        return data

    def read_suffix(self, length: int) -> bytes:
        if (inherited := self._forked()) is not None:
            return bytes(inherited.read_suffix(length))
        import obstore

        def attempt(timeout: float | None) -> bytes:
            try:
                result = obstore.get(self.store, self.path, options={"range": {"suffix": length}})
                return bytes(result.bytes())
            except Exception as e:
                if self._redirected(e):
                    return self.read_suffix(length)
                raise

        started = time.perf_counter()
        with storage_errors(self._name):
            data = retry.call(attempt, self._name)
        gap.record(self.store_key, 1, len(data), started, 1)
        return data

    def read_many(self, starts: Sequence[int], ends: Sequence[int]) -> list[memoryview]:
        """Ranges ``[starts[i], ends[i])`` as views of obstore's buffers (no copy).

        Sent as they are (already merged by the caller), up to 10 at once.
        """
        if not starts:
            return []
        if (inherited := self._forked()) is not None:
            ranges = [ByteRange(a, b) for a, b in zip(starts, ends)]
            return [memoryview(b) for b in inherited.read_ranges(ranges)]
        import obstore

        def attempt(timeout: float | None) -> list[Any]:
            return list(
                obstore.get_ranges(
                    self.store, self.path, starts=list(starts), ends=list(ends), coalesce=0
                )
            )

        started = time.perf_counter()
        with storage_errors(self._name):
            try:
                out = retry.call(attempt, self._name)
            except BaseException as e:
                # A range that starts past the end fails (HTTP 416); one that ends
                # past it makes object_store 0.12's get_ranges panic (a Rust panic
                # is a BaseException). Either way: each range on its own, where a
                # short or empty answer is fine, as RangeSource promises.
                if isinstance(e, Exception) and self._redirected(e):
                    return self.read_many(starts, ends)
                if not (_past_end(e) or type(e).__name__ == "PanicException"):
                    raise
                return [memoryview(self.read(a, b)) for a, b in zip(starts, ends)]
        views = [memoryview(b) for b in out]
        gap.record(self.store_key, len(views), sum(map(len, views)), started, self.in_flight)
        return views

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        views = self.read_many([r.start for r in ranges], [r.end for r in ranges])
        return [bytes(v) for v in views]

    def open_stream(self, start: int = 0) -> BinaryIO:
        if (inherited := self._forked()) is not None:
            return cast(BinaryIO, inherited.open_stream(start))
        raw = _RangeStream(self, start)
        return cast(BinaryIO, io.BufferedReader(raw, buffer_size=_STREAM_BUFFER))

    def close(self) -> None:
        pass


class _RangeStream(io.RawIOBase):
    """A sequential reader of one source by ranged reads (one request per buffer refill)."""

    def __init__(self, source: ObstoreSource, start: int) -> None:
        self._source = source
        self._pos = start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._source.read(self._pos, self._pos + len(view))
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)
