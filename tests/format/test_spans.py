"""Properties of ``records.spans`` packing (format/spans.py): every value reads back as written.

The compiled reader of the same values is fuzzed against ``unpack_spans`` in
tests/fuzz/test_fuzz_codec.py (``test_unpack_spans``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat.format.spans import pack_record_spans, pack_spans, unpack_spans

U64 = (1 << 64) - 1
_DTYPE = np.dtype([("offset", "<u8"), ("size", "<u8"), ("crc", "<u4")])

sizes = st.one_of(st.integers(0, 300), st.integers(0, 1 << 40), st.integers(0, U64 >> 1))
crcs = st.integers(0, (1 << 32) - 1)


@st.composite
def in_order(draw: st.DrawFn, max_entries: int = 6) -> list[tuple[int, int, int]]:
    """One record's spans as shardcat writes them: each entry at or after the previous end."""
    out, end = [], 0
    for _ in range(draw(st.integers(0, max_entries))):
        gap = draw(st.one_of(st.just(0), st.integers(0, 600), st.integers(0, 1 << 62)))
        size = draw(sizes)
        if end + gap + size > U64:
            break
        out.append((end + gap, size, draw(crcs)))
        end += gap + size
    return out


any_order = st.lists(
    st.tuples(st.integers(0, U64 >> 1), st.integers(0, U64 >> 2), crcs), max_size=6
)


@settings(max_examples=400, deadline=None)
@given(st.one_of(in_order(), any_order))
def test_a_record_reads_back_in_whatever_packing_it_gets(spans):
    value = pack_record_spans(spans)
    assert unpack_spans(value, len(spans)) == spans


@settings(max_examples=400, deadline=None)
@given(in_order())
def test_entries_in_order_are_compact_and_never_a_fixed_length(spans):
    value = pack_record_spans(spans)
    n = len(spans)
    if n:
        assert len(value) not in (12 * n, 20 * n)
        # Each entry is two varints of at most 10 bytes and a CRC, plus one pad byte.
        assert 6 * n <= len(value) <= 24 * n + 1


@settings(max_examples=200, deadline=None)
@given(st.lists(in_order(4), max_size=8))
def test_a_shards_packing_is_each_records_packing(records):
    flat = [s for r in records for s in r]
    entries = np.array(flat, dtype=_DTYPE) if flat else np.zeros(0, dtype=_DTYPE)
    packed = pack_spans(entries, np.array([len(r) for r in records], dtype=np.int64))
    assert len(packed) == len(records)
    assert packed.tolist() == [pack_record_spans(r) for r in records]


def test_a_shard_with_a_record_out_of_order_keeps_the_fixed_packing():
    records = [[(0, 5, 1), (5, 5, 2)], [(10, 5, 3), (0, 5, 4)]]
    flat = [s for r in records for s in r]
    values = pack_spans(np.array(flat, dtype=_DTYPE), np.array([2, 2])).tolist()
    assert [len(v) for v in values] == [24, 24]
    assert [unpack_spans(v, 2) for v in values] == records


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (b"\x80\x00\x05" + bytes(4), 1),  # a gap of 0 in two bytes: longer than needed
        (b"\x00" + b"\xff" * 9 + b"\x02" + bytes(4), 1),  # a size past 64 bits
        (b"\x00\x05" + bytes(3), 1),  # the CRC cut short
        (b"\x00\x05" + bytes(4) + b"\x00", 1),  # a byte after the entries that is no pad
        (b"\x00\x05" + bytes(4) + b"\x00\x00\x00", 2),  # the second entry cut short
        (b"\xff" * 9 + b"\x01" + b"\x01" + bytes(4), 1),  # ends at 2**64: past the last byte
        (b"\x00", 0),  # no entries: only the empty value
    ],
)
def test_malformed_compact_values_are_refused(value, count):
    with pytest.raises(ValueError, match=f"spans of {len(value)} bytes do not describe {count}"):
        unpack_spans(value, count)


def test_the_pad_byte_is_only_where_the_length_would_be_fixed():
    entry = b"\x80\x80\x80\x01" * 2 + bytes(4)  # gap and size 2**21: 12 bytes, one entry
    assert unpack_spans(entry + b"\x00", 1) == [(1 << 21, 1 << 21, 0)]
    assert len(pack_record_spans([(1 << 21, 1 << 21, 0)])) == 13
    with pytest.raises(ValueError, match="do not describe 1 entries"):
        unpack_spans(entry + b"\x01", 1)  # a pad is zero
