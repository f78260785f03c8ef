"""Entry layouts and spans: records with different entries, compression, wide offsets."""

from __future__ import annotations

import numpy as np
import pytest
import sqlalchemy as sa

from shardcat.format.spans import NARROW, WIDE, pack_spans, unpack_spans

from .helpers import write_shard


def mixed(key: str) -> dict:
    """Some records have a jpg, some a npy, one has no entries at all."""
    i = int(key.rsplit("/", 1)[1])
    if i == 7:
        return {}
    sample = {"json": {"i": i}}
    if i % 2:
        sample["jpg"] = bytes([i % 256]) * (100 + i)
    if i % 3 == 0:
        sample["npy"] = np.arange(i, dtype=np.int32)
    if i % 5 == 0:
        sample["txt"] = "compressible " * 200
    return sample


def test_records_with_different_entries(cat, local_root, reads):
    cat.create_dataset("train", local_root)
    keys = [f"k/{i}" for i in range(30)]
    info = write_shard(f"{local_root}/a.shard", keys, make=mixed)
    cat.register_shard("train", info)
    for key in keys:
        want = mixed(key)
        got = cat.get("train", key)
        assert sorted(got.entries) == sorted(want)
        only = cat.get("train", key, entries=["jpg", "npy"])
        assert sorted(only.entries) == sorted(set(want) & {"jpg", "npy"})
        if "npy" in want:
            assert np.array_equal(only["npy"].decode(), want["npy"])
        if "jpg" in want:
            assert only["jpg"].data == want["jpg"]
    reads.clear()
    assert cat.get("train", "k/7", entries=["jpg"]).entries == {}
    assert reads.count == 0  # nothing to read
    batch = cat.get_many("train", keys, entries=["txt"])
    assert [sorted(r.entries) for r in batch] == [sorted(set(mixed(k)) & {"txt"}) for k in keys]
    assert batch[0]["txt"].decode() == "compressible " * 200
    with cat.engine.connect() as conn:
        layouts = conn.execute(sa.text("SELECT count(*) FROM layouts")).scalar()
        with_jpg = conn.execute(
            sa.text(
                "SELECT count(*) FROM records r JOIN layout_entries e ON e.layout_id = r.layout_id "
                "WHERE e.name = 'jpg'"
            )
        ).scalar()
    assert layouts == len({tuple(sorted(mixed(k))) for k in keys})
    assert with_jpg == sum("jpg" in mixed(k) for k in keys)
    assert cat.verify("train").ok


def test_compressed_entries(cat, local_root):
    import shardcat

    cat.create_dataset("train", local_root)
    with shardcat.ShardWriter(f"{local_root}/z.shard", compression="zstd") as w:
        for i in range(20):
            w.add(f"z/{i}", {"txt": "hello world " * (50 + i), "bin": bytes(range(256)) * 4})
    cat.register_shard("train", w.close())
    assert cat.get("train", "z/3")["txt"].decode() == "hello world " * 53
    assert cat.get("train", "z/3", entries=["txt"])["txt"].decode() == "hello world " * 53
    assert cat.get_many("train", ["z/4"], entries=["bin"])[0]["bin"].data == bytes(range(256)) * 4
    with cat.engine.connect() as conn:
        codecs = set(conn.execute(sa.text("SELECT DISTINCT codec FROM layout_entries")).scalars())
    assert "zstd" in codecs


def _entries(rows):
    e = np.zeros(
        len(rows), dtype=[("offset", "<u8"), ("size", "<u8"), ("crc", "<u4"), ("spec", "<u2")]
    )
    for i, (o, s, c) in enumerate(rows):
        e[i] = (o, s, c, 0)
    return e


def test_spans_compact_in_order_fixed_otherwise():
    # Entries back to back (a gap of 64 before the first, 54 between): the compact packing,
    # 1-byte varints and the CRC, 6 bytes an entry.
    rows = [(64, 10, 1), (128, 20, 2), (64, 30, 3), (94, 5, 4), (99, 6, 5)]
    values = pack_spans(_entries(rows), np.array([2, 0, 3])).tolist()
    assert [len(v) for v in values] == [12, 0, 18]
    assert unpack_spans(values[0], 2) == rows[:2]
    assert unpack_spans(values[1], 0) == []
    assert unpack_spans(values[2], 3) == rows[2:]
    # Varints of 4 bytes each: 12 bytes for one entry, the narrow length: a pad byte.
    padded = pack_spans(_entries([(1 << 21, 1 << 21, 6)]), np.array([1])).tolist()[0]
    assert len(padded) == 13 and padded[-1] == 0
    assert unpack_spans(padded, 1) == [(1 << 21, 1 << 21, 6)]
    # An entry before its predecessor's end: the shard keeps the fixed packings.
    rows = [(64, 10, 1), (128, 20, 2), (64, 30, 3), (32, 5, 4), (256, 6, 5)]
    values = pack_spans(_entries(rows), np.array([2, 0, 3])).tolist()
    assert [len(v) for v in values] == [2 * NARROW.itemsize, 0, 3 * NARROW.itemsize]
    assert unpack_spans(values[2], 3) == rows[2:]
    huge = [(64, 5 << 30, 7), ((5 << 30) + 64, 10, 8)]  # a 5 GiB entry: offsets need 64 bits
    # gap 64 and a 33-bit size, then gap 0 and size 10: 1 + 5 + 4 + 1 + 1 + 4 bytes.
    assert len(pack_spans(_entries(huge), np.array([2])).tolist()[0]) == 16
    backwards = [*huge, (0, 1, 9)]
    values = pack_spans(_entries(backwards), np.array([3])).tolist()
    assert len(values[0]) == 3 * WIDE.itemsize
    assert unpack_spans(values[0], 3) == backwards
    with pytest.raises(ValueError, match="do not describe"):
        unpack_spans(b"\0" * 13, 1)
