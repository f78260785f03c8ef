"""Range coalescing (shardcat._ranges): examples, then properties over any input."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat._ranges import DEFAULT_MAX_GAP, DEFAULT_MAX_SPAN, Coalesced, coalesce, split
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
