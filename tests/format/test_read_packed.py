"""The local batch read (``recordcodec.read_packed``) under both record codecs.

It reads the records of a batch table (sorted by file and offset) from open
descriptors into buffers that hold the records alone, and fills each row's
``blob`` and ``at``. The compiled one reads nearby records with one
``preadv`` (gaps land in scratch space); the reference one ``pread`` per
record. Both must return the same buffers and table.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat import _pread
from shardcat.format import recordcodec
from shardcat.format.spec import BATCH_ROW_DTYPE

pytestmark = pytest.mark.skipif(not hasattr(os, "pread"), reason="positional reads are POSIX")

SIZE = 1 << 16


class Files(tuple[list[int], list[bytes]]):
    """(descriptors, contents), shown briefly when hypothesis reports an example."""

    def __repr__(self) -> str:
        return f"Files(fds={self[0]})"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[int], list[bytes]]]:
    """Two files of random bytes, open for reading."""
    root = tmp_path_factory.mktemp("packed")
    rng = random.Random(3)
    contents = [rng.randbytes(SIZE), rng.randbytes(SIZE // 2)]
    fds = []
    for i, data in enumerate(contents):
        path = root / f"f{i}"
        path.write_bytes(data)
        fds.append(os.open(path, os.O_RDONLY))
    yield Files((fds, contents))
    for fd in fds:
        os.close(fd)


def table_of(ranges: list[tuple[int, int, int]]) -> np.ndarray:
    """A batch table of ``(shard, offset, length)`` rows, sorted by (shard, offset)."""
    ranges = sorted(ranges)
    table = np.zeros(len(ranges), dtype=BATCH_ROW_DTYPE)
    for t, (shard, offset, length) in enumerate(ranges):
        table[t]["shard"], table[t]["offset"], table[t]["length"] = shard, offset, length
        table[t]["row"] = t
    return table


RANGES = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, SIZE // 2 - 1), st.integers(0, 700)), max_size=200
)
"""A batch's records as (file, offset, length): either file, any order, overlaps and empties."""


def check(buffers: list[bytes], table: np.ndarray, contents: list[bytes], group: int) -> None:
    """Every row's bytes are its record's, the buffers hold nothing else, and groups are kept."""
    used = [0] * len(buffers)
    for blob, shard, _, _, at, length, offset in table.tolist():
        assert buffers[blob][at : at + length] == contents[shard][offset : offset + length]
        assert at == used[blob]
        used[blob] += length
    assert used == [len(b) for b in buffers]
    for blob, size in enumerate(used):
        records = int(np.count_nonzero((table["blob"] == blob) & (table["length"] > 0)))
        assert size <= group or records == 1


def test_reads_every_record_into_packed_buffers(files: tuple[list[int], list[bytes]]) -> None:
    fds, contents = files
    rng = random.Random(5)
    ranges = {
        (s, rng.randrange(len(contents[s]) - 600), rng.randrange(1, 600))
        for s in (0, 1)
        for _ in range(300)
    }
    table = table_of(sorted(ranges))
    buffers = recordcodec.read_packed(fds, table, 8192, 4096)
    assert buffers is not None and len(buffers) > 1
    check(buffers, table, contents, 4096)


def test_more_records_in_one_run_than_one_preadv_takes(
    files: tuple[list[int], list[bytes]],
) -> None:
    # 3,000 adjacent 16-byte records: more iovecs than one preadv accepts (1,024).
    fds, contents = files
    table = table_of([(0, 16 * i, 16) for i in range(3000)])
    buffers = recordcodec.read_packed(fds, table, 8192, 1 << 20)
    assert buffers is not None and len(buffers) == 1
    check(buffers, table, contents, 1 << 20)


def test_overlapping_and_empty_records(files: tuple[list[int], list[bytes]]) -> None:
    # A damaged catalog may name overlapping ranges: each record still gets its own bytes.
    fds, contents = files
    table = table_of([(0, 100, 50), (0, 120, 50), (0, 120, 0), (0, 300, 10), (1, 0, 5)])
    buffers = recordcodec.read_packed(fds, table, 8192, 1 << 20)
    assert buffers is not None
    check(buffers, table, contents, 1 << 20)


def test_a_record_larger_than_a_group_gets_its_own_buffer(
    files: tuple[list[int], list[bytes]],
) -> None:
    fds, contents = files
    table = table_of([(0, 0, 10), (0, 20, 5000), (0, 6000, 10)])
    buffers = recordcodec.read_packed(fds, table, 8192, 1000)
    assert buffers is not None and [len(b) for b in buffers] == [10, 5000, 10]
    check(buffers, table, contents, 1000)


def test_no_records(files: tuple[list[int], list[bytes]]) -> None:
    assert recordcodec.read_packed(files[0], table_of([]), 8192, 1 << 20) == []


@pytest.mark.parametrize("past", [1, 100])
def test_a_record_the_file_ends_inside_returns_none(
    files: tuple[list[int], list[bytes]], past: int
) -> None:
    # None, not a short record: the caller's general path reports the truncation.
    fds, _ = files
    table = table_of([(1, 10, 10), (1, SIZE // 2 - 50, 50 + past)])
    assert recordcodec.read_packed(fds, table, 8192, 1 << 20) is None


def test_rows_out_of_order_or_range_are_refused(files: tuple[list[int], list[bytes]]) -> None:
    fds, _ = files
    table = table_of([(0, 10, 10), (0, 100, 10)])[::-1].copy()
    with pytest.raises(ValueError, match="order"):
        recordcodec.read_packed(fds, table, 8192, 1 << 20)
    with pytest.raises(ValueError, match="range"):
        recordcodec.read_packed(fds[:1], table_of([(1, 0, 10)]), 8192, 1 << 20)


def test_a_failed_read_raises_the_oserror_of_pread(tmp_path: Path) -> None:
    fd = os.open(tmp_path, os.O_RDONLY)  # a directory: pread fails with EISDIR
    try:
        with pytest.raises(IsADirectoryError):
            recordcodec.read_packed([fd], table_of([(0, 0, 10)]), 8192, 1 << 20)
    finally:
        os.close(fd)


@pytest.mark.skipif("compiled" not in recordcodec.available(), reason="needs the compiled codec")
@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    gap=st.sampled_from([0, 1, 64, 8192]),
    group=st.sampled_from([1, 100, 4096, 1 << 20]),
)
def test_the_compiled_read_equals_the_reference(
    files: tuple[list[int], list[bytes]], data: st.DataObject, gap: int, group: int
) -> None:
    fds, contents = files
    table = table_of(data.draw(RANGES))
    ours = table.copy()
    compiled = recordcodec._compiled.read_packed(fds, ours, gap, group)
    reference = _pread.read_packed(fds, table, gap, group)
    assert compiled == reference
    if reference is not None:
        assert ours.tobytes() == table.tobytes()
        check(reference, table, contents, group)


def test_a_pool_lends_free_buffers_and_keeps_at_most_pool_max(
    files: tuple[list[int], list[bytes]],
) -> None:
    """With a pool, groups of at least half a buffer go into reused buffers (compiled only)."""
    fds, contents = files
    group = 4096
    table = table_of([(0, 700 * i, 600) for i in range(40)])  # 6 groups of 6 records, one of 4
    pool: list[bytes] = []
    first = recordcodec.read_packed(fds, table, 8192, group, pool, 3)
    assert first is not None
    check([bytes(b) for b in first], table, contents, group)
    if recordcodec.active() == "python":
        assert pool == [] and all(type(b) is bytes for b in first)  # bytes cannot be written
        return
    # The first three full groups were lent from (and left in) the pool; the rest are new.
    assert len(pool) == 3 and all(len(b) == group for b in pool)
    owners = [b.obj if isinstance(b, memoryview) else b for b in first]
    assert [any(o is p for p in pool) for o in owners] == [True] * 3 + [False] * 4
    assert [len(b) for b in first] == [3600] * 6 + [2400]
    assert all(type(b) is bytes for b in first[3:])  # no room left: buffers of their own size
    # While they are alive, another batch cannot have them.
    second = recordcodec.read_packed(fds, table_of([(1, 0, 3000)]), 8192, group, pool, 3)
    assert second is not None and not any(
        isinstance(b, memoryview) and any(b.obj is p for p in pool) for b in second
    )
    # Dropped: the next batch is read into them, and its bytes are its own.
    del first, owners, second
    other = table_of([(1, 500 * i, 450) for i in range(30)])
    again = recordcodec.read_packed(fds, other, 8192, group, pool, 3)
    assert again is not None
    assert [isinstance(b, memoryview) and any(b.obj is p for p in pool) for b in again][:3] == [
        True
    ] * 3
    check([bytes(b) for b in again], other, contents, group)
    assert len(pool) == 3


def test_a_pool_must_be_a_list(files: tuple[list[int], list[bytes]]) -> None:
    with pytest.raises(TypeError, match="pool must be a list"):
        recordcodec.read_packed(files[0], table_of([(0, 0, 10)]), 8192, 4096, (), 3)


@pytest.mark.skipif("compiled" not in recordcodec.available(), reason="needs the compiled codec")
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    group=st.sampled_from([100, 4096, 1 << 20]),
    pool_max=st.sampled_from([0, 1, 4, 64]),
)
def test_reads_through_a_pool_equal_the_reference(
    files: tuple[list[int], list[bytes]], data: st.DataObject, group: int, pool_max: int
) -> None:
    """Batch after batch through one pool, some kept alive: every batch's bytes are the reference's."""
    fds, _ = files
    pool: list[bytes] = []
    kept = []
    for _ in range(3):
        table = table_of(data.draw(RANGES))
        ours = table.copy()
        got = recordcodec._compiled.read_packed(fds, ours, 8192, group, pool, pool_max)
        reference = _pread.read_packed(fds, table, 8192, group)
        if reference is None:
            assert got is None
            continue
        assert got is not None and [bytes(b) for b in got] == reference
        assert ours.tobytes() == table.tobytes()
        assert len(pool) <= pool_max
        if data.draw(st.booleans()):
            kept.append((got, reference))  # alive while later batches run
    for got, reference in kept:
        assert [bytes(b) for b in got] == reference
