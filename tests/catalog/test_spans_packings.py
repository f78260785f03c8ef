"""``records.spans`` in every packing a catalog may hold (format/spans.py).

New rows are packed compactly; a catalog written before that holds the fixed
packings (12 or 20 bytes an entry). Both kinds of row must read, batch and
verify the same, natively and for tars indexed in place, and a compact value
that does not fit its layout is a typed error that says to reindex, not a
wrong answer.
"""

from __future__ import annotations

import json
import struct

import pytest
import sqlalchemy as sa

from shardcat.errors import ShardcatError
from shardcat.format.spans import pack_record_spans, unpack_spans
from shardcat.reading.checks import scan_tar_url
from shardcat.testing.tars import write_wds_tar

from .helpers import sample, write_shard

_ROWS = sa.text(
    "SELECT r.shard_id, r.byte_offset, r.spans, l.signature FROM records r "
    "JOIN layouts l ON l.id = r.layout_id"
)


def _spans_rows(cat) -> list[tuple[int, int, bytes, int]]:
    with cat.engine.connect() as conn:
        return [
            (shard, offset, bytes(spans), len(json.loads(signature)))
            for shard, offset, spans, signature in conn.execute(_ROWS)
        ]


def _set_spans(cat, changes: list[tuple[int, int, bytes]]) -> None:
    with cat.engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE records SET spans = :spans WHERE shard_id = :shard AND byte_offset = :at"
            ),
            [{"spans": spans, "shard": shard, "at": at} for shard, at, spans in changes],
        )


def _dataset(cat, root, tmp_path) -> tuple[list[str], list[str]]:
    """A native shard and a WebDataset tar in one dataset each; their keys."""
    keys = [f"img/{i:04d}" for i in range(60)]
    cat.create_dataset("native", root)
    cat.register_shard("native", write_shard(f"{root}/a.shard", keys))
    tar = write_wds_tar(tmp_path / "train-000000.tar", n=25, seed=3, prefix="t-")
    cat.create_dataset("wds", str(tmp_path))
    cat.register_shard("wds", scan_tar_url(str(tar), {}))
    tar_keys = cat.keys("wds")
    return keys, list(tar_keys)


def _reads_back(cat, keys: list[str], tar_keys: list[str]) -> None:
    for key in keys[:20]:
        got = cat.get("native", key)
        assert got["jpg"].data == sample(key)["jpg"]
        assert got["txt"].decode() == sample(key)["txt"]
        assert cat.get("native", key, entries=["jpg"])["jpg"].data == sample(key)["jpg"]
    batch = cat.get_many("native", keys)
    assert [r["jpg"].data for r in batch] == [sample(k)["jpg"] for k in keys]
    tars = cat.get_many("wds", tar_keys)
    for key, rec in zip(tar_keys, tars, strict=True):
        one = cat.get("wds", key)
        assert sorted(one.entries) == sorted(rec.entries)
        for name in one.entries:
            assert one[name].data == rec[name].data
    assert cat.verify("native").ok
    assert cat.verify("wds").ok


def test_new_rows_are_compact_and_read_back(cat, local_root, tmp_path):
    keys, tar_keys = _dataset(cat, local_root, tmp_path)
    rows = _spans_rows(cat)
    # Neither fixed length: every row of these shards is compact (entries in order).
    assert all(len(s) not in (12 * n, 20 * n) for _, _, s, n in rows if n)
    compact = sum(len(s) for *_, s, _ in rows)
    narrow = sum(12 * n for *_, n in rows)
    assert compact < 0.75 * narrow, (compact, narrow)
    _reads_back(cat, keys, tar_keys)


@pytest.mark.parametrize("packing", ["<III", "<QQI"])
def test_rows_in_the_fixed_packings_still_read_and_verify(cat, local_root, tmp_path, packing):
    """A catalog written before the compact packing: every row rewritten narrow or wide."""
    keys, tar_keys = _dataset(cat, local_root, tmp_path)
    _set_spans(
        cat,
        [
            (shard, at, b"".join(struct.pack(packing, *e) for e in unpack_spans(spans, n)))
            for shard, at, spans, n in _spans_rows(cat)
        ],
    )
    assert all(len(s) == struct.calcsize(packing) * n for *_, s, n in _spans_rows(cat))
    _reads_back(cat, keys, tar_keys)


def test_a_compact_value_that_does_not_fit_its_layout_is_a_typed_error(cat, local_root, tmp_path):
    keys, _ = _dataset(cat, local_root, tmp_path)
    with cat.engine.connect() as conn:
        shard, at, spans = conn.execute(
            sa.text(
                "SELECT r.shard_id, r.byte_offset, r.spans FROM records r "
                "JOIN datasets d ON d.id = r.dataset_id WHERE d.name = 'native' AND r.key = :k"
            ),
            {"k": keys[5]},
        ).one()
    _set_spans(cat, [(shard, at, bytes(spans)[:-2])])  # cut inside the last entry's CRC
    with pytest.raises(ShardcatError, match="reindex"):
        cat.get("native", keys[5])
    with pytest.raises(ShardcatError, match="reindex"):
        cat.get_many("native", [keys[4], keys[5]])
    assert cat.get("native", keys[4])["jpg"].data == sample(keys[4])["jpg"]
    report = cat.verify("native")
    assert not report.ok
    assert {p.kind for p in report.problems} == {"row-not-in-footer", "record-not-in-catalog"}
    assert all(keys[5] in p.keys for p in report.problems)


@pytest.mark.parametrize("packing", ["compact", "<III", "<QQI"])
@pytest.mark.parametrize("field", [1, 2])  # an entry's size, its CRC
def test_spans_that_say_something_else_are_reported_for_their_key(
    cat, local_root, tmp_path, packing, field
):
    """verify compares what a row's spans say with the footer's entries, in any packing."""
    keys, _ = _dataset(cat, local_root, tmp_path)
    with cat.engine.connect() as conn:
        shard, at, spans, signature = conn.execute(
            sa.text(
                "SELECT r.shard_id, r.byte_offset, r.spans, l.signature FROM records r "
                "JOIN layouts l ON l.id = r.layout_id "
                "JOIN datasets d ON d.id = r.dataset_id WHERE d.name = 'native' AND r.key = :k"
            ),
            {"k": keys[7]},
        ).one()
    entries = [list(e) for e in unpack_spans(bytes(spans), len(json.loads(signature)))]
    entries[-1][field] += 1
    if packing == "compact":
        changed = pack_record_spans([(o, n, c) for o, n, c in entries])
    else:
        changed = b"".join(struct.pack(packing, *e) for e in entries)
    _set_spans(cat, [(shard, at, changed)])
    report = cat.verify("native")
    assert {p.kind for p in report.problems} == {"row-not-in-footer", "record-not-in-catalog"}
    assert all(p.keys == (keys[7],) for p in report.problems)
    assert cat.verify("wds").ok
