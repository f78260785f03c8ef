"""A batch query's rows as the batch decoder's table (``recordcodec.batch_table``), both codecs.

Rows are ``(url, offset, length, spans, key, alignment, kind, signature)``.
A row counts once per wanted key (the first; a key that is not wanted is a
hash collision); shards are numbered in order of first appearance. The
compiled pass must give exactly what the reference gives, including for rows
it does not expect (it hands those to the reference).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcat.format import recordcodec, records

URLS = ["/a/train-000000.shard", "/a/train-000001.shard", "s3://b/train-000002.tar"]


def row(i: int, key: str, url: int = 0, kind: str | None = None, spans: Any = None) -> tuple:
    sig = None if kind is None else '[["jpg","image/jpeg","none"]]'
    spans = bytes([i % 256]) * 12 if spans is None else spans
    return (URLS[url], 64 * i, 32 + i, spans, key, 64 if url < 2 else 1, kind, sig)


def plain(batch: records.BatchTable) -> tuple:
    return (batch.table.tobytes(), *batch[1:])


def test_rows_become_the_table_in_row_order() -> None:
    rows = [
        row(3, "k/3", url=1),
        row(1, "k/1"),
        row(9, "not/asked"),  # a collision: another key with an asked-for hash
        row(5, "k/3", url=0),  # the same key again: the first row counts
        row(7, "k/7", url=2, kind="tar"),
    ]
    batch = recordcodec.batch_table(rows, dict.fromkeys(["k/1", "k/3", "k/7", "k/8"]))
    assert batch.keys == ["k/3", "k/1", "k/7"]
    assert batch.seen == {"k/3": 0, "k/1": 1, "k/7": 2}
    assert batch.urls == [URLS[1], URLS[0], URLS[2]]
    assert batch.alignments == [64, 64, 1]
    assert batch.spans == [rows[0][3], rows[1][3], rows[4][3]]
    assert batch.others == [(2, "tar", rows[4][7])]
    t = batch.table
    assert t["shard"].tolist() == [0, 1, 2]
    assert t["row"].tolist() == [0, 1, 2]
    assert t["offset"].tolist() == [64 * 3, 64, 64 * 7]
    assert t["length"].tolist() == [35, 33, 39]
    assert t["blob"].tolist() == t["at"].tolist() == t["reserved"].tolist() == [0, 0, 0]


def test_no_rows() -> None:
    batch = recordcodec.batch_table([], {"k": None})
    assert len(batch.table) == 0 and batch.keys == [] and batch.seen == {}


@pytest.mark.skipif("compiled" not in recordcodec.available(), reason="needs the compiled codec")
@settings(max_examples=150, deadline=None)
@given(
    picks=st.lists(
        st.tuples(
            st.integers(0, 30),
            st.integers(0, 2),
            st.sampled_from([None, "tar"]),
            st.sampled_from(["bytes", "memoryview", "list"]),
        ),
        max_size=60,
    ),
    wanted=st.sets(st.integers(0, 30)),
)
def test_the_compiled_pass_equals_the_reference(picks: list, wanted: set[int]) -> None:
    rows: list[Any] = []
    for i, url, kind, container in picks:
        r = row(i, f"k/{i}", url, kind)
        if container == "memoryview":  # what a driver may return for a blob: the reference's job
            r = (*r[:3], memoryview(r[3]), *r[4:])
        rows.append(list(r) if container == "list" else r)
    asked = {f"k/{i}": None for i in sorted(wanted)}
    compiled = recordcodec._compiled_batch_table(rows, asked)
    reference = records.batch_table(rows, asked)
    assert plain(compiled) == plain(reference)
