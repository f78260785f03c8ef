"""Range coalescing (shardcat._ranges): examples, then properties over any input."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat._ranges import (
    DEFAULT_MAX_GAP,
    DEFAULT_MAX_SPAN,
    Coalesced,
    coalesce,
    merge_sorted,
    split,
)
from shardcat._types import ByteRange


def spans(merged: list[Coalesced]) -> list[tuple[int, int, tuple[int, ...]]]:
    return [(c.range.start, c.range.end, c.members) for c in merged]


# --- examples -------------------------------------------------------------------------


def test_nothing_to_read():
    assert coalesce([]) == []
    assert split([], [], []) == []


def test_adjacent_and_nearby_ranges_become_one_read():
    ranges = [ByteRange(0, 10), ByteRange(10, 20), ByteRange(25, 30)]
    assert spans(coalesce(ranges, max_gap=5)) == [(0, 30, (0, 1, 2))]


def test_a_gap_of_exactly_max_gap_is_read_through_one_more_is_not():
    assert spans(coalesce([ByteRange(0, 10), ByteRange(15, 20)], max_gap=5)) == [(0, 20, (0, 1))]
    assert spans(coalesce([ByteRange(0, 10), ByteRange(16, 20)], max_gap=5)) == [
        (0, 10, (0,)),
        (16, 20, (1,)),
    ]


def test_input_order_does_not_matter_and_members_name_input_positions():
    ranges = [ByteRange(1000, 1100), ByteRange(0, 10), ByteRange(20, 30)]
    assert spans(coalesce(ranges, max_gap=50)) == [(0, 30, (1, 2)), (1000, 1100, (0,))]


def test_duplicates_and_overlaps_share_one_read():
    ranges = [ByteRange(5, 15), ByteRange(0, 10), ByteRange(5, 15), ByteRange(8, 9)]
    merged = coalesce(ranges, max_gap=0)
    assert spans(merged) == [(0, 15, (1, 0, 2, 3))]
    data = bytes(range(20))
    views = split(merged, [data[0:15]], ranges)
    assert [bytes(v) for v in views] == [data[5:15], data[0:10], data[5:15], data[8:9]]


def test_merged_reads_stay_under_max_span():
    ranges = [ByteRange(i * 10, i * 10 + 10) for i in range(10)]
    assert [c.range.length for c in coalesce(ranges, max_gap=100, max_span=30)] == [30, 30, 30, 10]


def test_a_range_longer_than_max_span_is_read_alone():
    ranges = [ByteRange(0, 10), ByteRange(10, 100), ByteRange(100, 110)]
    assert spans(coalesce(ranges, max_gap=10, max_span=50)) == [
        (0, 10, (0,)),
        (10, 100, (1,)),
        (100, 110, (2,)),
    ]


def test_empty_ranges_are_served_empty():
    ranges = [ByteRange(5, 5), ByteRange(0, 10)]
    merged = coalesce(ranges)
    assert [bytes(v) for v in split(merged, [bytes(range(10))], ranges)] == [b"", bytes(range(10))]


def test_a_short_read_cuts_the_views_short():
    """A merged read past the end of the file returns fewer bytes; the views say so (never pad)."""
    ranges = [ByteRange(0, 4), ByteRange(6, 10), ByteRange(12, 16)]
    merged = coalesce(ranges)
    views = split(merged, [b"0123456789"], ranges)  # the file ends at 10
    assert [bytes(v) for v in views] == [b"0123", b"6789", b""]


def test_byte_ranges_are_checked():
    assert ByteRange(3, 3).length == 0
    with pytest.raises(ValueError, match="invalid byte range"):
        ByteRange(-1, 3)
    with pytest.raises(ValueError, match="invalid byte range"):
        ByteRange(5, 4)


def test_the_defaults():
    assert (DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN) == (64 * 1024, 16 * 1024 * 1024)


# --- properties -----------------------------------------------------------------------

byte_ranges = st.builds(
    lambda start, length: ByteRange(start, start + length),
    st.integers(0, 5000),
    st.integers(0, 600),
)


@settings(max_examples=400, deadline=None)
@given(
    ranges=st.lists(byte_ranges, max_size=40),
    max_gap=st.integers(0, 300),
    max_span=st.integers(1, 2000),
)
def test_coalescing_properties(ranges, max_gap, max_span):
    merged = coalesce(ranges, max_gap=max_gap, max_span=max_span)
    # Every input is served by exactly one read.
    members = [i for c in merged for i in c.members]
    assert sorted(members) == list(range(len(ranges)))
    for c in merged:
        inside = [ranges[i] for i in c.members]
        # The read is exactly the hull of what it serves, members in file order.
        assert c.range.start == min(r.start for r in inside)
        assert c.range.end == max(r.end for r in inside)
        assert inside == sorted(inside, key=lambda r: (r.start, r.end))
        # Only a single range may exceed max_span.
        assert len(inside) == 1 or c.range.length <= max_span
    # Reads are in file order, and each was merged as far as the caps allow: the next
    # read was not merged because its gap is too large or the merged read too long.
    for a, b in itertools.pairwise(merged):
        assert a.range.start <= b.range.start
        first = ranges[b.members[0]]
        assert (
            first.start - a.range.end > max_gap
            or max(a.range.end, first.end) - a.range.start > max_span
        )


@settings(max_examples=200, deadline=None)
@given(
    ranges=st.lists(byte_ranges, max_size=30),
    max_gap=st.integers(0, 300),
    max_span=st.integers(1, 2000),
    file_size=st.integers(0, 6000),
    seed=st.integers(0, 255),
)
def test_split_gives_each_range_its_bytes(ranges, max_gap, max_span, file_size, seed):
    data = bytes((i * 31 + seed) % 251 for i in range(file_size))
    merged = coalesce(ranges, max_gap=max_gap, max_span=max_span)
    blobs = [data[c.range.start : c.range.end] for c in merged]  # short where the file ends
    views = split(merged, blobs, ranges)
    assert [bytes(v) for v in views] == [data[r.start : r.end] for r in ranges]


# --- merge_sorted: many files, sorted arrays, one vectorised pass ---------------

sorted_ranges = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2000), st.integers(0, 300)), max_size=60
).map(sorted)


@settings(max_examples=200, deadline=None)
@given(sorted_ranges, st.integers(0, 200), st.sampled_from([1, 50, 400, 1500, 5000]))
def test_merge_sorted_serves_each_range_from_one_read_like_coalesce(rows, gap, span):
    file = np.array([f for f, _, _ in rows], dtype=np.int64)
    start = np.array([s for _, s, _ in rows], dtype=np.int64)
    end = start + np.array([n for _, _, n in rows], dtype=np.int64)
    gaps = np.full(4, gap, dtype=np.int64)
    merged = merge_sorted(file, start, end, gaps, span)
    assert len(merged.read) == len(rows)
    for i in range(len(rows)):
        r = int(merged.read[i])
        assert merged.file[r] == file[i]
        assert merged.start[r] <= start[i] and end[i] <= merged.end[r]
    # Reads never overlap within a file, and only one longer than max_span holds one range.
    for r in range(len(merged)):
        members = np.flatnonzero(merged.read == r)
        assert len(members) >= 1
        if merged.end[r] - merged.start[r] > span:
            assert len(members) == 1
    # Without a span cap, reads never overlap and are coalesce's, per file.
    if span >= 2300:
        for f in range(4):
            reads = np.flatnonzero(merged.file == f)
            assert all(merged.end[a] < merged.start[b] for a, b in itertools.pairwise(reads))
            mine = [
                (int(merged.start[r]), int(merged.end[r])) for r in np.flatnonzero(merged.file == f)
            ]
            ranges = [ByteRange(int(s), int(e)) for s, e in zip(start[file == f], end[file == f])]
            assert mine == [(c.range.start, c.range.end) for c in coalesce(ranges, gap, span)]


def test_merge_sorted_gaps_are_per_file_and_files_never_merge():
    merged = merge_sorted(
        np.array([0, 0, 1, 1]),
        np.array([0, 20, 20, 40]),
        np.array([10, 30, 30, 50]),
        np.array([10, 5]),
    )
    assert merged.read.tolist() == [0, 0, 1, 2]
    assert list(zip(merged.start.tolist(), merged.end.tolist())) == [(0, 30), (20, 30), (40, 50)]


def test_merge_sorted_nothing_and_unsorted_input():
    empty = np.zeros(0, dtype=np.int64)
    assert len(merge_sorted(empty, empty, empty, np.zeros(1, dtype=np.int64))) == 0
    with pytest.raises(ValueError, match="sorted"):
        merge_sorted(np.array([0, 0]), np.array([10, 0]), np.array([20, 5]), np.array([0]))
