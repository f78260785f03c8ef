"""One dataset through every kind of source, and exactly which reads the reader issues."""

from __future__ import annotations

import errno
import io
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import fsspec
import numpy as np
import pytest

from shardcat._types import ByteRange, RangeSource
from shardcat.format import BytesSource, FileSource, ShardInfo, ShardReader, ShardWriter
from shardcat.format.spec import TAIL_READ_SIZE
from shardcat.storage import FsspecSource, open_source

from .conftest import (
    FIXED_CLOCK_NS,
    FIXED_FILE_ID,
    expected_plain,
    parse_layout,
    plain,
    write_shard,
)

WRITER_OPTIONS: dict[str, Any] = {
    "compression": "zstd",
    "metadata": {"split": "val"},
    "shard_number": 3,
    "clock": lambda: FIXED_CLOCK_NS,
    "file_id": FIXED_FILE_ID,
}


class CountingSource:
    """A RangeSource that records every call made to the source it wraps."""

    def __init__(self, inner: RangeSource) -> None:
        self.inner = inner
        self.calls: list[tuple[Any, ...]] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def size(self) -> int:
        self.calls.append(("size",))
        return self.inner.size()

    def read(self, start: int, end: int) -> bytes:
        self.calls.append(("read", start, end))
        return self.inner.read(start, end)

    def read_suffix(self, length: int) -> bytes:
        self.calls.append(("read_suffix", length))
        return self.inner.read_suffix(length)

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        self.calls.append(("read_ranges", tuple((r.start, r.end) for r in ranges)))
        return self.inner.read_ranges(ranges)

    def open_stream(self, start: int = 0) -> BinaryIO:
        self.calls.append(("open_stream", start))
        return self.inner.open_stream(start)

    def close(self) -> None:
        self.inner.close()

    def take_calls(self) -> list[tuple[Any, ...]]:
        calls, self.calls = self.calls, []
        return calls


def dataset() -> list[dict[str, Any]]:
    rng = np.random.default_rng(11)
    return [
        {
            "__key__": f"sample/{i:04d}",
            "jpg": rng.bytes(100 + 37 * i),
            "json": {"i": i, "label": f"class-{i % 3}"},
            "txt": f"caption number {i} " * (1 + i % 5),
            "npy": rng.standard_normal((i % 4, 3)).astype("<f4"),
        }
        for i in range(12)
    ]


def expected() -> list[tuple[str, dict[str, tuple[str, bytes]]]]:
    return [expected_plain(s) for s in dataset()]


@pytest.fixture
def memory_fs() -> Iterator[tuple[fsspec.AbstractFileSystem, str]]:
    fs = fsspec.filesystem("memory")
    root = f"/shardcat-tests-{uuid.uuid4().hex[:10]}"
    fs.mkdir(root)
    try:
        yield fs, root
    finally:
        fs.rm(root, recursive=True)


def assert_reads_the_dataset(reader: ShardReader, name: str) -> ShardInfo:
    want = expected()
    assert reader.path == name
    assert len(reader) == len(want)
    assert reader.keys() == [k for k, _ in want]
    assert [plain(r) for r in reader] == want
    assert [plain(reader.read(i)) for i in range(len(reader))] == want
    assert [plain(reader.get(k)) for k, _ in want] == want
    assert [plain(r) for r in reader.take([5, 1, 11])] == [want[5], want[1], want[11]]
    assert [plain(r) for r in reader.read_range(3, 4)] == want[3:7]
    only = reader.take([2, 7], entries=["json"])
    assert [r["json"].decode() for r in only] == [
        {"i": 2, "label": "class-2"},
        {"i": 7, "label": "class-1"},
    ]
    assert reader.metadata == {"split": "val"}
    assert reader.header.shard_number == 3
    report = reader.verify()
    assert (report.path, report.records, report.bytes) == (name, len(want), reader.size)
    info = reader.info
    assert info.path == name
    return info


def assert_same_info(a: ShardInfo, b: ShardInfo) -> None:
    assert a.header == b.header
    assert (a.size, a.data_crc, a.footer_crc, a.keys, a.specs) == (
        b.size,
        b.data_crc,
        b.footer_crc,
        b.keys,
        b.specs,
    )
    assert a.records.tobytes() == b.records.tobytes()
    assert a.entries.tobytes() == b.entries.tobytes()
    assert a.metadata == b.metadata


# --- the same shard through every source ---------------------------------------------------


def test_local_file_written_and_read_by_path_and_by_file_object(tmp_path):
    path = tmp_path / "local.shard"
    with ShardWriter(open(path, "wb"), path=str(path), close_file=True, **WRITER_OPTIONS) as w:
        for sample in dataset():
            w.write(sample)
    written = w.info
    assert written.path == str(path)
    assert path.read_bytes() == write_shard(dataset(), **WRITER_OPTIONS)

    for source in (str(path), path):
        with ShardReader(source) as r:
            assert_same_info(assert_reads_the_dataset(r, str(path)), written)

    with open(path, "rb") as f:
        r = ShardReader(f)
        assert_same_info(assert_reads_the_dataset(r, str(path)), written)
        r.close()
        assert not f.closed, "the reader does not close a file it did not open"

    with open(path, "rb") as f, ShardReader(FileSource(f), name="ignored") as r:
        assert_reads_the_dataset(r, str(path))

    with ShardReader(path, name="alias.shard") as r:
        assert_reads_the_dataset(r, "alias.shard")


def test_bytes_like_and_in_memory_files(tmp_path):
    data = write_shard(dataset(), **WRITER_OPTIONS)
    info = ShardReader(data).info
    for source, name in [
        (data, "<bytes>"),
        (bytearray(data), "<bytes>"),
        (memoryview(data), "<bytes>"),
        (BytesSource(data, "mem.shard"), "mem.shard"),
    ]:
        assert_same_info(assert_reads_the_dataset(ShardReader(source), name), info)
    assert_reads_the_dataset(ShardReader(data, name="named.shard"), "named.shard")

    buf = io.BytesIO(data)
    assert_reads_the_dataset(ShardReader(buf, name="bytesio.shard"), "bytesio.shard")


def test_fsspec_memory_filesystem(memory_fs):
    fs, root = memory_fs
    path = f"{root}/part-000003.shard"
    with fs.open(path, "wb") as f, ShardWriter(f, path=f"memory:/{path}", **WRITER_OPTIONS) as w:
        for sample in dataset():
            w.write(sample)
    assert fs.cat_file(path) == write_shard(dataset(), **WRITER_OPTIONS)

    url = f"memory:/{path}"  # memory://<root>/..., the same file
    source = open_source(url)
    assert isinstance(source, FsspecSource)
    assert isinstance(source, RangeSource)
    assert source.size() == fs.size(path)
    with ShardReader(source) as r:
        assert_same_info(assert_reads_the_dataset(r, url), w.info)

    # fsspec's own file objects are seekable binary files.
    with fs.open(path, "rb") as f:
        assert_reads_the_dataset(ShardReader(f, name=url), url)


@pytest.mark.parametrize(
    "scheme", ["memory://", "memory:///"], ids=["two-slashes", "three-slashes"]
)
def test_the_name_of_an_fsspec_source_reopens_the_same_shard(memory_fs, scheme):
    fs, root = memory_fs
    fs.pipe(f"{root}/again.shard", write_shard(dataset(), **WRITER_OPTIONS))
    url = f"{scheme}{root.lstrip('/')}/again.shard"
    first = ShardReader(open_source(url))
    # The name is what error messages and catalogs record; it must still locate the file.
    again = ShardReader(open_source(first.path))
    assert again.info.file_id == first.info.file_id
    assert again.keys() == first.keys()


def test_local_paths_through_open_source(tmp_path):
    path = tmp_path / "local.shard"
    path.write_bytes(write_shard(dataset(), **WRITER_OPTIONS))
    for url in (str(path), f"file://{path}"):
        source = open_source(url)
        assert isinstance(source, RangeSource)
        with ShardReader(source) as r:
            assert_reads_the_dataset(r, str(path))
        source.close()  # a source passed in stays the caller's to close


# --- which reads, and how many bytes ----------------------------------------------------------


def many_long_keys(n: int) -> list[dict[str, Any]]:
    return [
        {"__key__": f"long/{i:06d}/" + "k" * 400, "json": {"i": i}, "bin": bytes([i % 256]) * 3}
        for i in range(n)
    ]


def counting(data: bytes) -> CountingSource:
    return CountingSource(BytesSource(data, "counted.shard"))


def test_opening_a_small_shard_is_one_suffix_read():
    data = write_shard(dataset(), **WRITER_OPTIONS)
    assert len(data) < TAIL_READ_SIZE
    src = counting(data)
    r = ShardReader(src)
    assert src.take_calls() == [("read_suffix", TAIL_READ_SIZE)]
    # The whole file came with the tail: the header needs no further read.
    assert r.header.shard_number == 3
    assert len(r) == 12
    assert r.keys()[0] == "sample/0000"
    assert "sample/0003" in r
    r.info  # noqa: B018
    assert src.take_calls() == []


def test_opening_a_shard_larger_than_the_tail_whose_footer_fits_is_one_suffix_read():
    samples = [{"__key__": f"big/{i}", "bin": bytes([i]) * 20_000} for i in range(10)]
    data = write_shard(samples)
    footer_offset = parse_layout(data).footer_offset
    assert len(data) > 2 * TAIL_READ_SIZE
    assert len(data) - footer_offset < TAIL_READ_SIZE
    src = counting(data)
    r = ShardReader(src)
    assert src.take_calls() == [("read_suffix", TAIL_READ_SIZE)]
    assert r.keys() == [f"big/{i}" for i in range(10)]
    assert src.take_calls() == []
    # The header was not in the tail: it is read once, on first use, and kept.
    assert r.header.alignment == 64
    assert src.take_calls() == [("read", 0, 64)]
    assert r.header.alignment == 64
    assert src.take_calls() == []


def test_opening_a_shard_with_a_footer_larger_than_the_tail_is_two_suffix_reads():
    data = write_shard(many_long_keys(300))
    footer_offset = parse_layout(data).footer_offset
    footer_size = len(data) - footer_offset
    assert footer_size > TAIL_READ_SIZE
    src = counting(data)
    r = ShardReader(src)
    # The second read is a suffix read of exactly the footer and trailer: bounded by the
    # file's real size even when a damaged trailer claims absurd sizes.
    assert src.take_calls() == [("read_suffix", TAIL_READ_SIZE), ("read_suffix", footer_size)]
    assert len(r) == 300
    assert r.get("long/000123/" + "k" * 400, entries=["json"])["json"].decode() == {"i": 123}
    r.verify()


@pytest.mark.parametrize("samples", [dataset(), many_long_keys(300)], ids=["small", "large-footer"])
def test_reading_one_record_is_one_read_of_exactly_its_bytes(samples):
    data = write_shard(samples, **WRITER_OPTIONS)
    src = counting(data)
    r = ShardReader(src)
    r.header  # noqa: B018 - may cost one read of 64 bytes for a large file; not counted below
    src.take_calls()
    rows = r.footer.records
    for i in (0, 5, len(r) - 1):
        start, length = int(rows[i]["offset"]), int(rows[i]["length"])
        rec = r.read(i)
        assert src.take_calls() == [("read", start, start + length)]
        assert rec.key == samples[i]["__key__"]
        assert rec.offset == start and rec.length == length
        r.get(samples[i]["__key__"])
        assert src.take_calls() == [("read", start, start + length)]


@pytest.mark.parametrize("samples", [dataset(), many_long_keys(300)], ids=["small", "large-footer"])
def test_reading_one_entry_reads_only_that_entrys_bytes(samples):
    data = write_shard(samples, **WRITER_OPTIONS)
    src = counting(data)
    r = ShardReader(src)
    src.take_calls()
    footer = r.footer
    json_spec = next(k for k, s in enumerate(footer.specs) if s.name == "json")
    for i in (0, 7, len(r) - 1):
        rows = range(int(footer.entry_starts[i]), int(footer.entry_starts[i + 1]))
        row = next(footer.entries[j] for j in rows if int(footer.entries[j]["spec"]) == json_spec)
        start = int(footer.records[i]["offset"]) + int(row["offset"])
        rec = r.read(i, entries=["json"])
        assert src.take_calls() == [("read_ranges", ((start, start + int(row["size"])),))]
        assert list(rec.entries) == ["json"]
        assert rec["json"].decode()["i"] == i


def test_streaming_opens_one_stream_and_issues_no_ranged_reads():
    data = write_shard(dataset(), **WRITER_OPTIONS)
    src = counting(data)
    r = ShardReader(src)
    src.take_calls()
    assert len(list(r)) == 12
    assert src.take_calls() == [("open_stream", 0)]
    assert len(list(r.iter_records(entries=["json"]))) == 12
    assert src.take_calls() == [("open_stream", 0)]


def test_nearby_records_are_fetched_in_one_merged_read():
    data = write_shard(dataset(), **WRITER_OPTIONS)
    src = counting(data)
    r = ShardReader(src)
    src.take_calls()
    rows = r.footer.records
    r.take([4, 2, 3])
    start = int(rows[2]["offset"])
    end = int(rows[4]["offset"]) + int(rows[4]["length"])
    assert src.take_calls() == [("read_ranges", ((start, end),))]
    r.read_range(2, 3)
    assert src.take_calls() == [("read", start, end)]


def bytes_requested(src: CountingSource, file_size: int) -> int:
    total = 0
    for call in src.calls:
        if call[0] == "read_suffix":
            total += min(call[1], file_size)
        elif call[0] == "read":
            total += call[2] - call[1]
        elif call[0] == "read_ranges":
            total += sum(end - start for start, end in call[1])
        else:
            raise AssertionError(f"unexpected call {call}")
    return total


def test_bytes_requested_when_opening():
    small = write_shard(dataset(), **WRITER_OPTIONS)
    src = counting(small)
    ShardReader(src)
    assert bytes_requested(src, len(small)) == len(small)

    large = write_shard(many_long_keys(300))
    footer_bytes = len(large) - parse_layout(large).footer_offset  # with the trailer
    src = counting(large)
    ShardReader(src)
    assert bytes_requested(src, len(large)) == TAIL_READ_SIZE + footer_bytes


def test_tail_size_option_changes_the_speculative_read():
    data = write_shard(many_long_keys(300))
    footer_offset = parse_layout(data).footer_offset
    src = counting(data)
    ShardReader(src, tail_size=len(data) - footer_offset)
    assert src.take_calls() == [("read_suffix", len(data) - footer_offset)]


def test_reading_through_a_real_file_source_does_not_move_shared_streams(tmp_path):
    path = Path(tmp_path) / "shared.shard"
    path.write_bytes(write_shard(dataset(), **WRITER_OPTIONS))
    with open(path, "rb") as f:
        r = ShardReader(f)
        stream = iter(r)
        first = next(stream)
        r.read(7)  # a random read between two streamed records
        second = next(stream)
        assert (first.key, second.key) == ("sample/0000", "sample/0001")
        assert [x.key for x in stream] == [f"sample/{i:04d}" for i in range(2, 12)]


# --- pread_linked: the point lookup's read of a cached descriptor -----------------


def _pread_linked_impls() -> list[Any]:
    from shardcat.format import sources

    impls = [sources._pread_linked]
    if sources.pread_linked is not sources._pread_linked:
        impls.append(sources.pread_linked)  # the compiled one
    return impls


@pytest.mark.parametrize("impl", _pread_linked_impls())
def test_pread_linked_reads_then_says_none_once_the_file_is_unlinked(impl, tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(200)))
    fd = os.open(path, os.O_RDONLY)
    try:
        assert impl(fd, 10, 5) == bytes(range(5, 15))
        assert impl(fd, 100, 150) == bytes(range(150, 200))  # short at the end of the file
        assert impl(fd, 0, 0) == b""
        path.unlink()
        assert impl(fd, 10, 5) is None
    finally:
        os.close(fd)
    with pytest.raises(OSError, match="Bad file descriptor") as e:
        impl(fd, 10, 0)  # closed
    assert e.value.errno == errno.EBADF


def test_pread_linked_compiled_refuses_bad_arguments():
    from shardcat.format import sources

    if sources.pread_linked is sources._pread_linked:
        pytest.skip("the compiled record codec is not built")
    with pytest.raises(TypeError):
        sources.pread_linked(0, 1)
    with pytest.raises(ValueError, match=">= 0"):
        sources.pread_linked(0, -1, 0)
    with pytest.raises(TypeError):
        sources.pread_linked("0", 1, 0)
