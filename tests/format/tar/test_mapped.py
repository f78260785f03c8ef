"""Local tars walked in a mapping: the same results and errors as reading them, no fault on a shrinking file."""

from __future__ import annotations

import io
import mmap
import os
import resource
import threading
from pathlib import Path
from typing import Any

import pytest

from shardcat.format.tar import iter_tar_samples, mapped, scan_tar
from shardcat.format.tar.errors import TarChecksumError, TarError, TarTruncatedError
from shardcat.format.tar.mapped import map_stream
from shardcat.format.tar.spec import BLOCK
from shardcat.format.tar.walk import TarWalker

from .helpers import error_fields, random_samples_tar, summary_fields

CHUNK = 4096  # small windows: the archive below spans ~130 of them


DATA = random_samples_tar(7, 100)


def _summary(source: Any, **kwargs: Any) -> tuple[Any, ...]:
    info = scan_tar(source, "x.tar", chunk_size=CHUNK, map_file=True, **kwargs)
    return summary_fields(info)


def _error(source: Any, **kwargs: Any) -> tuple[type, str, Any, Any]:
    with pytest.raises(TarError) as e:
        scan_tar(source, "x.tar", chunk_size=CHUNK, map_file=True, **kwargs)
    return error_fields(e.value)


def _write(tmp_path: Path, data: bytes, name: str = "x.tar") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_a_local_file_is_mapped_and_a_stream_is_not(tmp_path):
    path = _write(tmp_path, DATA)
    with open(path, "rb") as f:
        walker = TarWalker(f, "x.tar", chunk_size=CHUNK, map_file=True)
        batches = iter(walker)
        next(batches)
        assert walker.mapped
        walker.close()
        assert not walker.mapped
        walker.close()  # twice is fine
    walker = TarWalker(io.BytesIO(DATA), "mem.tar", chunk_size=CHUNK, map_file=True)
    for _ in walker:
        assert not walker.mapped
    with open(path, "rb") as f:
        walker = TarWalker(f, "x.tar", chunk_size=CHUNK, map_file=False)  # read when asked
        for _ in walker:
            assert not walker.mapped
    with open(path, "rb") as f:
        walker = TarWalker(f, "x.tar", chunk_size=CHUNK)  # read by default
        for _ in walker:
            assert not walker.mapped
    with open(path, "rb") as f:
        f.seek(BLOCK)  # not at the archive's start: read from here, as given
        assert map_stream(f, CHUNK) is None
    empty = _write(tmp_path, b"", "empty.tar")
    with open(empty, "rb") as f:
        assert map_stream(f, CHUNK) is None


def test_a_pipe_is_read_as_a_stream():
    r, w = os.pipe()
    with open(r, "rb", buffering=0) as f:
        os.close(w)
        assert map_stream(f, CHUNK) is None


@pytest.mark.parametrize("chunk", [2048, CHUNK, 1 << 20])
def test_mapped_and_read_walks_find_the_same(tmp_path, chunk):
    path = _write(tmp_path, DATA)
    info = scan_tar(io.BytesIO(DATA), "x.tar", chunk_size=chunk)
    expected = (info.keys, info.records.tobytes(), info.entries.tobytes(), info.size)
    for kwargs in ({}, {"size": len(DATA)}):
        got = scan_tar(path, "x.tar", chunk_size=chunk, map_file=True, **kwargs)
        assert (got.keys, got.records.tobytes(), got.entries.tobytes(), got.size) == expected
    names = [s.key for s in iter_tar_samples(path, chunk_size=chunk, map_file=True)]
    assert names == info.keys


def test_every_truncated_file_is_reported_as_its_stream_is(tmp_path):
    end_of_members = _summary(io.BytesIO(DATA))[4]
    for cut in [*range(BLOCK, end_of_members + 1, 17_011), end_of_members, end_of_members + 7]:
        path = _write(tmp_path, DATA[:cut])
        expected = _error(io.BytesIO(DATA[:cut]))
        assert expected[0] is TarTruncatedError
        assert _error(path) == expected, cut
        sized = _error(io.BytesIO(DATA[:cut]), size=len(DATA))
        assert _error(path, size=len(DATA)) == sized, cut


def test_a_damaged_header_is_reported_as_its_stream_is(tmp_path):
    data = bytearray(DATA)
    at = len(data) // 2 // BLOCK * BLOCK
    while data[at + 257 : at + 262] != b"ustar":
        at -= BLOCK
    data[at + 3] ^= 1
    expected = _error(io.BytesIO(bytes(data)))
    assert expected[0] is TarChecksumError and expected[3] == at
    assert _error(_write(tmp_path, bytes(data))) == expected


@pytest.mark.parametrize("sized", [False, True])
def test_a_file_cut_while_it_is_walked_is_a_truncated_tar_not_a_fault(tmp_path, sized):
    """The file shrinks after it was mapped: the next window stops at its new size."""
    path = _write(tmp_path, DATA)
    cut = len(DATA) // 2 + 300  # inside a member, well past the first window
    kwargs: dict[str, Any] = {"size": len(DATA)} if sized else {}
    expected = _error(io.BytesIO(DATA[:cut]), **kwargs)
    with open(path, "rb") as f:
        walker = TarWalker(f, "x.tar", chunk_size=CHUNK, map_file=True, **kwargs)

        def walk_and_cut() -> None:
            for _ in walker:
                # Cut past what the walk was given (a page it was given and lost would fault).
                if os.path.getsize(path) > cut and walker._end < cut - CHUNK:
                    assert walker.mapped
                    os.truncate(path, cut)

        with pytest.raises(TarTruncatedError) as e:
            walk_and_cut()
        assert walker.mapped is False  # closed by the failed walk
    assert os.path.getsize(path) == cut
    err = e.value
    assert (type(err), str(err), err.path, err.offset) == expected


def test_the_mapping_is_released_after_a_walk(tmp_path):
    path = _write(tmp_path, DATA)
    with open(path, "rb") as f:
        walker = TarWalker(f, "x.tar", chunk_size=CHUNK, map_file=True)
        mapped = None
        for _ in walker:
            mapped = walker._mapped
        assert mapped is not None and mapped.map.closed
        assert not walker.mapped


@pytest.mark.parametrize("populate", [True, False])
def test_windows_populated_or_only_advised_walk_the_same(tmp_path, monkeypatch, populate):
    """MADV_POPULATE_READ (Linux 5.14+) or, where the kernel refuses it, MADV_WILLNEED: same walk."""
    monkeypatch.setattr(mapped, "_CAN_POPULATE", populate and mapped._CAN_POPULATE)
    path = _write(tmp_path, DATA)
    info = scan_tar(io.BytesIO(DATA), "x.tar", chunk_size=CHUNK)
    got = scan_tar(path, "x.tar", chunk_size=CHUNK, map_file=True)
    assert (got.keys, got.records.tobytes(), got.entries.tobytes()) == (
        info.keys,
        info.records.tobytes(),
        info.entries.tobytes(),
    )


@pytest.mark.skipif(not mapped._CAN_POPULATE, reason="MADV_POPULATE_READ is Linux's")
def test_a_populated_window_is_mapped_without_a_fault_per_page(tmp_path):
    """A window populated in one call: touching its pages afterwards takes no page fault."""
    size = 4 << 20
    path = tmp_path / "blob"
    data = os.urandom(size)
    # Written a page at a time, as tar writers do: the page cache then holds
    # small folios, and a walk without populating faults once per 16 pages.
    with open(path, "wb", buffering=0) as out:
        for at in range(0, size, mmap.PAGESIZE):
            out.write(data[at : at + mmap.PAGESIZE])
    with open(path, "rb") as f:
        m = map_stream(f, size)
        assert m is not None
        try:
            # map_stream populated the first window (the whole file here).
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            total = sum(m.map[i] for i in range(0, size, mmap.PAGESIZE))
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        finally:
            m.close()
    assert total >= 0
    # Without populating, fault-around maps 16 pages per fault: 64 faults here.
    assert faults < size // mmap.PAGESIZE // 16 // 4, faults


@pytest.mark.parametrize("chunk", [3584, 4608, 12288])
@pytest.mark.parametrize("readahead", [0, None])
def test_windows_that_cut_headers_and_payloads_walk_the_same(tmp_path, chunk, readahead):
    """Windows of every size: boundaries fall inside headers and payloads, the last window is short."""
    assert len(DATA) % chunk  # the file is not a whole number of windows
    path = _write(tmp_path, DATA)
    expected = summary_fields(scan_tar(io.BytesIO(DATA), "x.tar", chunk_size=chunk))
    got = scan_tar(path, "x.tar", chunk_size=chunk, map_file=True, readahead=readahead)
    assert summary_fields(got) == expected


@pytest.mark.skipif(not mapped.can_map_ahead(), reason="needs MADV_POPULATE_READ, _ctar, 2 CPUs")
@pytest.mark.parametrize("readahead", [None, 1, 0])
def test_windows_are_mapped_ahead_on_a_thread_unless_one_thread_is_asked(tmp_path, readahead):
    path = _write(tmp_path, DATA)
    with open(path, "rb") as f:
        walker = TarWalker(f, "x.tar", chunk_size=CHUNK, map_file=True, readahead=readahead)
        seen = set()
        for _ in walker:
            assert walker._mapped is not None
            seen.add(walker._mapped.maps_ahead)
            mapping = walker._mapped
    assert seen == {readahead != 0}
    assert mapping.map.closed and not mapping.maps_ahead  # the thread stopped, then unmapped


@pytest.mark.skipif(not mapped.can_map_ahead(), reason="needs MADV_POPULATE_READ, _ctar, 2 CPUs")
def test_windows_dropped_behind_the_walk_still_read_the_file(tmp_path):
    """The thread drops walked windows' page tables: reading them again faults the same bytes in."""
    path = _write(tmp_path, DATA)
    with open(path, "rb") as f:
        m = map_stream(f, CHUNK, ahead=True)
        assert m is not None and m.maps_ahead
        try:
            end = 0
            while (new := m.extend(end)) > end:
                end = new
                if m._pending is not None:
                    m._pending[3].result()  # as a walk slower than the thread: nothing cancelled
            assert end == len(DATA)
            assert m._dropped > len(DATA) // 2  # most of the file was dropped behind the walk
            assert m.map[:] == DATA
        finally:
            m.close()
    assert m.map.closed


@pytest.mark.skipif(not mapped.can_map_ahead(), reason="needs MADV_POPULATE_READ, _ctar, 2 CPUs")
def test_walks_at_once_share_at_most_one_mapping_thread_per_spare_cpu(tmp_path):
    """Many open walks: MAX_MAPPING_THREADS map ahead, the rest map their own windows; a
    closed walk's thread is free for the next one."""
    path = _write(tmp_path, DATA)
    cap = mapped.MAX_MAPPING_THREADS
    files = [open(path, "rb") for _ in range(cap + 3)]  # noqa: SIM115 - closed below
    walks: list[Any] = []
    try:
        walks = [map_stream(f, CHUNK, ahead=True) for f in files]
        assert [m.maps_ahead for m in walks] == [True] * cap + [False] * 3
        for m in walks:  # each still reads the whole file
            end = 0
            while (new := m.extend(end)) > end:
                end = new
            assert m.map[:] == DATA
        walks[0].close()
        with open(path, "rb") as f:
            again = map_stream(f, CHUNK, ahead=True)
            assert again is not None and again.maps_ahead
            again.close()
    finally:
        for m in walks:
            m.close()
        for f in files:
            f.close()
    with open(path, "rb") as f:  # every slot was given back
        after = [map_stream(f, CHUNK, ahead=True) for _ in range(cap)]
        assert all(m is not None and m.maps_ahead for m in after)
        for m in after:
            m.close()


def test_one_cpu_maps_no_window_ahead(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert not mapped.can_map_ahead()
    path = _write(tmp_path, DATA)
    with open(path, "rb") as f:
        m = map_stream(f, CHUNK, ahead=True)
        assert m is not None
        try:
            assert not m.maps_ahead
        finally:
            m.close()


@pytest.mark.skipif(not mapped.can_map_ahead(), reason="needs MADV_POPULATE_READ, _ctar, 2 CPUs")
def test_a_window_the_busy_thread_has_not_started_is_mapped_by_the_walk(tmp_path):
    """The thread's task still queued when the walk needs its window: cancelled, mapped in place."""
    path = _write(tmp_path, DATA)
    with open(path, "rb") as f:
        m = map_stream(f, CHUNK, ahead=True)
        assert m is not None and m._ahead is not None and m._pending is not None
        busy = threading.Event()
        try:
            end = m.extend(0)  # the first window, mapped by map_stream
            for _ in range(3):
                end = m.extend(end)  # let the thread drop a few windows
            m._pending[3].result()  # its last task is done: the blocker below runs next
            blocker = m._ahead.submit(busy.wait, 10)
            queued = m.extend(end)  # queues the next window behind the blocker
            assert queued > end
            task = m._pending
            assert task is not None and not task[3].done()
            dropped_before = task[2]
            after = m.extend(queued)  # cancels that task and maps the window itself
            assert task[3].cancelled() and after > queued and m._done >= after
            assert m._pending is not None and m._pending[2] == dropped_before  # dropped later
            busy.set()
            blocker.result()
            end = after
            while (new := m.extend(end)) > end:
                end = new
            assert end == len(DATA) and m.map[:] == DATA
        finally:
            busy.set()
            m.close()


@pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="RWF_NOWAIT reads are Linux's")
def test_the_next_window_is_advised_only_when_it_is_not_cached(tmp_path, monkeypatch):
    """One-thread walk: MADV_WILLNEED for a window whose last page the page cache lacks, only."""
    path = _write(tmp_path, DATA)
    advised: list[tuple[str, int, int]] = []
    real = mapped._advise

    def spy(m: mmap.mmap, option: str, start: int, length: int) -> None:
        advised.append((option, start, length))
        real(m, option, start, length)

    monkeypatch.setattr(mapped, "_advise", spy)
    with open(path, "rb") as f:
        assert mapped._cached(f.fileno(), len(DATA) - 1)  # just written: in the page cache
        info = scan_tar(path, "x.tar", chunk_size=CHUNK, map_file=True, readahead=0)
    assert summary_fields(info) == summary_fields(scan_tar(io.BytesIO(DATA), "x.tar"))
    assert [a for a in advised if a[0] == "MADV_WILLNEED"] == []
    # Whether a dropped page reads as uncached is the kernel's business (a RWF_NOWAIT probe
    # that misses may start reading it in), so the uncached case is given, not provoked.
    at = len(DATA) - 2 * CHUNK
    with open(path, "rb") as f:
        m = map_stream(f, CHUNK, ahead=False)
        assert m is not None
        try:
            monkeypatch.setattr(mapped, "_cached", lambda fd, offset: offset != at + CHUNK - 1)
            m._read_ahead(at - CHUNK, CHUNK)  # its last page cached: no advice
            assert advised[-1][0] != "MADV_WILLNEED"
            m._read_ahead(at, CHUNK)
            assert advised[-1] == ("MADV_WILLNEED", at, CHUNK)
        finally:
            m.close()
    assert m.map.closed


@pytest.mark.skipif(not mapped.can_map_ahead(), reason="needs MADV_POPULATE_READ, _ctar, 2 CPUs")
def test_a_failing_mapping_thread_leaves_the_walk_to_map_its_windows(tmp_path, monkeypatch):
    def broken(*args: Any) -> int:
        raise RuntimeError("the thread's task failed")

    monkeypatch.setattr(mapped, "_map_and_drop", broken)
    path = _write(tmp_path, DATA)
    got = scan_tar(path, "x.tar", chunk_size=CHUNK, map_file=True)
    assert summary_fields(got) == summary_fields(scan_tar(io.BytesIO(DATA), "x.tar"))


@pytest.mark.skipif(not mapped.can_map_ahead(), reason="needs MADV_POPULATE_READ, _ctar, 2 CPUs")
def test_a_walk_after_interpreter_shutdown_began_maps_its_windows_itself(tmp_path, monkeypatch):
    """A thread still walking once the main thread has returned: no new task can be submitted
    (concurrent.futures refuses them), so the walk maps on one thread instead of failing."""
    import concurrent.futures.thread as pool

    path = _write(tmp_path, DATA)
    expected = summary_fields(scan_tar(io.BytesIO(DATA), "x.tar"))
    with open(path, "rb") as f:
        m = map_stream(f, CHUNK, ahead=True)
        assert m is not None and m.maps_ahead
        try:
            monkeypatch.setattr(pool, "_shutdown", True)  # what interpreter exit sets
            end = 0
            while (new := m.extend(end)) > end:
                end = new
            assert end == len(DATA) and m.map[:] == DATA and not m.maps_ahead
        finally:
            m.close()
        got = scan_tar(path, "x.tar", chunk_size=CHUNK, map_file=True)  # set up after it
    assert summary_fields(got) == expected
