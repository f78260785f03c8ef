"""Conformance suites for RangeSource implementations and storage backends.

pytest collects the ``test_*`` methods of a subclass whose name starts with
``Test``; each suite asks for one fixture (see its docstring). The suites
depend only on shardcat and pytest, so a user's own backend can run them.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from .._types import ByteRange, RangeSource, StorageOptions
from ..errors import ShardNotFoundError
from ..storage import SourceCache, is_local, join, open_source, resolve

__all__ = ["RangeSourceTests", "RequestLog", "StorageTests"]

DATA = random.Random(20).randbytes(20_000)
"""The file every test reads: random bytes, so a slice identifies its offsets."""

Store = tuple[str, StorageOptions | None]
"""An empty folder to write test files into: its URL and the fsspec options for it."""


class RequestLog:
    """Read requests that leave shardcat while installed: ``(start, end)`` each.

    Counted where a request is handed to the OS or to fsspec: each
    ``os.pread`` of a local file, and each range given to a filesystem's
    ``cat_file`` or ``cat_ranges`` (one request each on object stores; a
    suffix read is ``(-length, None)``). Calls fsspec makes to itself
    (``cat_ranges`` looping over ``cat_file``) are not counted twice.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[int, int | None]] = []
        self._depth = 0

    def install(self, monkeypatch: pytest.MonkeyPatch, fs: Any | None = None) -> RequestLog:
        """Count ``os.pread`` calls, and the requests of the filesystem ``fs`` (if given)."""
        real_pread = os.pread
        requests = self.requests

        def pread(fd: int, length: int, offset: int) -> bytes:
            requests.append((offset, offset + length))
            return real_pread(fd, length, offset)

        monkeypatch.setattr(os, "pread", pread)
        # The cache's point reads of an open descriptor go through the compiled
        # pread_linked (fstat + pread in C), which os.pread does not see: count
        # them where every caller finds it (the reference calls os.pread itself).
        from ..format import sources as _format_sources

        real_linked = _format_sources.pread_linked
        if real_linked is not _format_sources._pread_linked:

            def linked(fd: int, length: int, offset: int) -> bytes | None:
                requests.append((offset, offset + length))
                return real_linked(fd, length, offset)

            monkeypatch.setattr(_format_sources, "pread_linked", linked)
        self._install_obstore(monkeypatch)
        if fs is None:
            return self
        real_cat_file = fs.cat_file
        real_cat_ranges = fs.cat_ranges

        def cat_file(path: str, start: int | None = None, end: int | None = None, **kw: Any) -> Any:
            with self._outermost() as outermost:
                if outermost:
                    requests.append((start or 0, end))
                return real_cat_file(path, start=start, end=end, **kw)

        def cat_ranges(
            paths: Sequence[str], starts: Sequence[int], ends: Sequence[int], **kw: Any
        ) -> Any:
            with self._outermost() as outermost:
                if outermost:
                    requests.extend(zip(starts, ends))
                return real_cat_ranges(paths, starts, ends, **kw)

        monkeypatch.setattr(fs, "cat_file", cat_file)
        monkeypatch.setattr(fs, "cat_ranges", cat_ranges)
        return self

    def _install_obstore(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Count obstore's requests too (``SHARDCAT_S3_TRANSPORT=obstore``), if it is loaded."""
        obstore = sys.modules.get("obstore")
        if obstore is None:
            return
        requests = self.requests
        real_range, real_ranges, real_get = obstore.get_range, obstore.get_ranges, obstore.get
        real_async = obstore.get_range_async

        def get_range(store: Any, path: str, *, start: int, end: int) -> Any:
            requests.append((start, end))
            return real_range(store, path, start=start, end=end)

        def get_range_async(store: Any, path: str, *, start: int, end: int) -> Any:
            # A batch's ranges of all files (storage/fanout.py), on fsspec's event loop.
            requests.append((start, end))
            return real_async(store, path, start=start, end=end)

        def get_ranges(store: Any, path: str, *, starts: Any, ends: Any, **kw: Any) -> Any:
            requests.extend(zip(starts, ends))
            return real_ranges(store, path, starts=starts, ends=ends, **kw)

        def get(store: Any, path: str, *, options: Any = None) -> Any:
            suffix = ((options or {}).get("range") or {}).get("suffix")
            requests.append((-suffix, None) if suffix is not None else (0, None))
            return real_get(store, path, options=options)

        monkeypatch.setattr(obstore, "get_range", get_range)
        monkeypatch.setattr(obstore, "get_range_async", get_range_async)
        monkeypatch.setattr(obstore, "get_ranges", get_ranges)
        monkeypatch.setattr(obstore, "get", get)

    @contextlib.contextmanager
    def _outermost(self) -> Iterator[bool]:
        self._depth += 1
        try:
            yield self._depth == 1
        finally:
            self._depth -= 1

    @property
    def count(self) -> int:
        return len(self.requests)

    @property
    def nbytes(self) -> int:
        """Bytes asked for by ranged requests (suffix reads not included)."""
        return sum(end - start for start, end in self.requests if end is not None and start >= 0)

    def clear(self) -> None:
        self.requests.clear()


class RangeSourceTests:
    """The :class:`~shardcat._types.RangeSource` contract.

    Subclasses provide the fixture ``make_source``: a function of the file's
    bytes returning a source that reads them (the suite closes it).
    """

    @pytest.fixture
    def make_source(self) -> Callable[[bytes], RangeSource]:
        raise NotImplementedError("a RangeSourceTests subclass provides the make_source fixture")

    @pytest.fixture
    def source(self, make_source: Callable[[bytes], RangeSource]) -> Iterator[RangeSource]:
        src = make_source(DATA)
        try:
            yield src
        finally:
            src.close()

    def test_is_a_range_source_with_a_name(self, source: RangeSource) -> None:
        assert isinstance(source, RangeSource)
        assert isinstance(source.name, str) and source.name

    def test_size(self, source: RangeSource) -> None:
        assert source.size() == len(DATA)

    @pytest.mark.parametrize(
        ("start", "end"), [(0, 1), (0, 4096), (1234, 5678), (19_000, 20_000), (0, 20_000)]
    )
    def test_ranged_reads(self, source: RangeSource, start: int, end: int) -> None:
        assert source.read(start, end) == DATA[start:end]

    def test_an_empty_range_is_empty(self, source: RangeSource) -> None:
        assert source.read(500, 500) == b""

    def test_a_read_past_the_end_is_short(self, source: RangeSource) -> None:
        assert source.read(19_990, 20_100) == DATA[19_990:]

    @pytest.mark.parametrize("length", [1, 8, 4096, 20_000, 1 << 20])
    def test_suffix_reads(self, source: RangeSource, length: int) -> None:
        assert source.read_suffix(length) == DATA[-length:]

    def test_batched_reads_in_order(self, source: RangeSource) -> None:
        ranges = [
            ByteRange(9000, 9100),
            ByteRange(10, 20),
            ByteRange(15, 40),  # overlaps the one before
            ByteRange(10, 20),  # the same twice
            ByteRange(19_950, 20_000),
        ]
        assert source.read_ranges(ranges) == [DATA[r.start : r.end] for r in ranges]
        assert source.read_ranges([]) == []

    def test_streams(self, source: RangeSource) -> None:
        with contextlib.closing(source.open_stream()) as stream:
            assert stream.read() == DATA
        with contextlib.closing(source.open_stream(12_345)) as stream:
            assert stream.read(100) == DATA[12_345:12_445]
            assert stream.read(100) == DATA[12_445:12_545]

    def test_close_twice(self, make_source: Callable[[bytes], RangeSource]) -> None:
        src = make_source(DATA)
        src.close()
        src.close()


class StorageTests(RangeSourceTests):
    """A storage backend through :mod:`shardcat.storage`: sources opened by URL,
    cached, read one range at a time and in batches.

    Subclasses provide the fixture ``store``: ``(root_url, storage_options)``
    of an empty folder the test may write to (a new one for each test).
    A backend that cannot read "the last N bytes" in one request sets
    ``suffix_reads = False``: its tail reads are then checked to be one
    positive range of exactly those bytes, after a size request.
    """

    suffix_reads = True

    @pytest.fixture
    def store(self) -> Store:
        raise NotImplementedError("a StorageTests subclass provides the store fixture")

    @pytest.fixture
    def make_source(self, store: Store) -> Callable[[bytes], RangeSource]:
        def make(data: bytes) -> RangeSource:
            return open_source(self.put(store, data), store[1])

        return make

    @pytest.fixture
    def cache(self, store: Store) -> Iterator[SourceCache]:
        with SourceCache(store[1]) as cache:
            yield cache

    @pytest.fixture
    def log(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> RequestLog:
        root, options = store
        fs = None if is_local(root) else resolve(root, options)[0]
        return RequestLog().install(monkeypatch, fs)

    # --- helpers ------------------------------------------------------------------

    def put(self, store: Store, data: bytes, name: str | None = None) -> str:
        """Write ``data`` to a file of ``store`` and return its URL."""
        url = join(store[0], name or f"{uuid.uuid4().hex}.bin")
        fs, path = resolve(url, store[1])
        fs.pipe_file(path, data)
        return url

    def remove(self, store: Store, url: str) -> None:
        fs, path = resolve(url, store[1])
        fs.rm_file(path)

    def replace(self, store: Store, url: str, data: bytes) -> None:
        """Put other bytes under ``url`` the way publication does: write aside, then move."""
        aside = self.put(store, data)
        fs, path = resolve(url, store[1])
        fs.mv(resolve(aside, store[1])[1], path)

    # --- one file ------------------------------------------------------------------

    def test_a_range_is_one_request_of_exactly_its_bytes(
        self, store: Store, log: RequestLog
    ) -> None:
        url = self.put(store, DATA)
        with contextlib.closing(open_source(url, store[1])) as src:
            log.clear()
            assert src.read(100, 5100) == DATA[100:5100]
            assert log.requests == [(100, 5100)]

    def test_a_suffix_read_is_one_request(self, store: Store, log: RequestLog) -> None:
        url = self.put(store, DATA)
        with contextlib.closing(open_source(url, store[1])) as src:
            log.clear()
            assert src.read_suffix(300) == DATA[-300:]
            assert src.read_suffix(1 << 20) == DATA  # longer than the file: all of it
            if self.suffix_reads:
                assert log.count == 2
                assert is_local(store[0]) or [start for start, _ in log.requests] == [
                    -300,
                    -(1 << 20),
                ]
            else:
                assert log.requests == [(len(DATA) - 300, len(DATA)), (0, len(DATA))]

    def test_a_missing_file_is_shard_not_found_naming_it(self, store: Store) -> None:
        url = join(store[0], "missing.shard")
        # Local files are found missing when opened, remote ones on their first read.
        with (
            pytest.raises(ShardNotFoundError) as err,
            contextlib.closing(open_source(url, store[1])) as src,
        ):
            src.read(0, 10)
        assert err.value.path is not None and err.value.path.endswith("missing.shard")
        assert isinstance(err.value, FileNotFoundError)

    def test_short_preads_are_continued(
        self, store: Store, cache: SourceCache, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        if not is_local(store[0]):
            pytest.skip("only local files are read with os.pread")
        url = self.put(store, DATA)
        real_pread = os.pread

        def short_pread(fd: int, length: int, offset: int) -> bytes:
            # A signal, a network filesystem or the kernel's 2 GiB cap: fewer bytes than asked.
            return real_pread(fd, min(length, 1000), offset)

        monkeypatch.setattr(os, "pread", short_pread)
        # The point read's compiled pread_linked does not call os.pread: use its reference.
        from ..format import sources as _format_sources

        monkeypatch.setattr(_format_sources, "pread_linked", _format_sources._pread_linked)
        assert cache.read(url, 10, 15_010) == DATA[10:15_010]
        views = cache.read_batch([(url, ByteRange(0, 9000)), (url, ByteRange(18_000, 20_000))])
        assert [bytes(v) for v in views] == [DATA[:9000], DATA[18_000:]]
        with contextlib.closing(open_source(url, store[1])) as src:
            assert src.read_suffix(5000) == DATA[-5000:]

    # --- the cache -----------------------------------------------------------------

    def test_point_reads_keep_the_source_open(
        self, store: Store, cache: SourceCache, log: RequestLog
    ) -> None:
        url = self.put(store, DATA)
        assert cache.read(url, 0, 10) == DATA[:10]
        source = cache.source(url)
        log.clear()
        for start in (50, 7000, 19_000):
            assert cache.read(url, start, start + 100) == DATA[start : start + 100]
        assert log.requests == [(50, 150), (7000, 7100), (19_000, 19_100)]
        assert cache.source(url) is source
        assert len(cache) == 1

    def test_batched_reads_across_files_in_input_order(
        self, store: Store, cache: SourceCache
    ) -> None:
        other = bytes(reversed(DATA))
        a, b = self.put(store, DATA), self.put(store, other)
        requests = [
            (b, ByteRange(5, 50)),
            (a, ByteRange(19_000, 19_500)),
            (a, ByteRange(0, 10)),
            (b, ByteRange(30, 60)),  # overlaps the first
            (a, ByteRange(0, 10)),  # the same twice
            (a, ByteRange(700, 700)),  # empty
            (b, ByteRange(19_990, 20_500)),  # past the end: short
        ]
        files = {a: DATA, b: other}
        got = [bytes(v) for v in cache.read_batch(requests)]
        assert got == [files[url][r.start : r.end] for url, r in requests]
        assert cache.read_batch([]) == []

    def test_batched_reads_are_coalesced_and_counted(
        self, store: Store, cache: SourceCache, log: RequestLog
    ) -> None:
        a, b = self.put(store, DATA), self.put(store, DATA)
        near = [ByteRange(1000 + 150 * i, 1100 + 150 * i) for i in range(10)]  # 50-byte gaps
        far = [ByteRange(15_000, 15_100), ByteRange(15_300, 15_400)]
        requests = [(url, r) for url in (a, b) for r in near + far]
        random.Random(3).shuffle(requests)
        cache.read_batch(requests[:1])  # open the sources first: count only the reads
        cache.read_batch([(b, ByteRange(0, 1))])
        log.clear()
        views = cache.read_batch(requests, max_gap=1000)
        assert [bytes(v) for v in views] == [DATA[r.start : r.end] for _, r in requests]
        # Per file: one read for the ten nearby ranges, one for the two far ones.
        assert sorted(log.requests) == sorted([(1000, 2450), (15_000, 15_400)] * 2)
        assert log.nbytes == 2 * (1450 + 400)
        log.clear()
        cache.read_batch(requests, max_gap=10)  # gaps too large to read through
        assert log.count == 2 * 12

    def test_a_missing_file_in_a_batch_is_named_by_the_error(
        self, store: Store, cache: SourceCache
    ) -> None:
        url = self.put(store, DATA)
        missing = join(store[0], "gone.shard")
        with pytest.raises(ShardNotFoundError) as err:
            cache.read_batch([(url, ByteRange(0, 10)), (missing, ByteRange(0, 10))])
        assert err.value.path is not None and err.value.path.endswith("gone.shard")
        assert missing not in cache
        with pytest.raises(ShardNotFoundError) as err:
            cache.read(missing, 0, 10)
        assert err.value.path is not None and err.value.path.endswith("gone.shard")
        # Found once it exists: a miss is not remembered.
        self.put(store, DATA, "gone.shard")
        assert cache.read(missing, 0, 10) == DATA[:10]
        assert bytes(cache.read_batch([(missing, ByteRange(5, 9))])[0]) == DATA[5:9]

    def test_a_deleted_file_is_never_served_from_the_cache(
        self, store: Store, cache: SourceCache
    ) -> None:
        url = self.put(store, DATA)
        assert cache.read(url, 0, 10) == DATA[:10]
        self.remove(store, url)
        with pytest.raises(ShardNotFoundError):
            cache.read(url, 0, 10)
        with pytest.raises(ShardNotFoundError):
            cache.read_batch([(url, ByteRange(0, 10))])

    def test_a_replaced_file_is_read_afresh(self, store: Store, cache: SourceCache) -> None:
        url = self.put(store, DATA)
        assert cache.read(url, 0, 100) == DATA[:100]
        other = bytes(reversed(DATA))
        self.replace(store, url, other)
        assert cache.read(url, 0, 100) == other[:100]
        assert bytes(cache.read_batch([(url, ByteRange(200, 300))])[0]) == other[200:300]

    def test_least_recently_used_sources_are_closed(self, store: Store) -> None:
        urls = [self.put(store, DATA) for _ in range(3)]
        with SourceCache(store[1], max_open=2) as cache:
            for url in urls:
                assert cache.read(url, 10, 20) == DATA[10:20]
            assert len(cache) == 2 and urls[0] not in cache
            assert cache.read(urls[0], 30, 40) == DATA[30:40]  # reopened
            assert urls[1] not in cache
            cache.close()
            assert len(cache) == 0
            assert cache.read(urls[2], 0, 5) == DATA[:5]  # still usable
