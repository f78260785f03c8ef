"""Reindex from footers; verify catalog against shards; rows pointing at changed shards."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from shardcat.errors import ChecksumError, FormatError, ShardNotFoundError

from .helpers import flip_byte, make_dataset, sample, shard_keys, write_shard

_SHARD_COLUMNS = (
    "url, shard_number, state, job_id, file_id, format_major, format_minor, flags, created_at, alignment, "
    "compression, header_crc, record_count, entry_count, size_bytes, payload_bytes, data_crc, footer_crc, user_metadata"
)


def _snapshot(cat):
    """Every catalog row that describes shards and records, without surrogate ids."""
    with cat.engine.connect() as conn:
        shards = sorted(
            tuple(str(v) for v in row)
            for row in conn.execute(
                sa.text(f"SELECT {_SHARD_COLUMNS} FROM shards WHERE state = 'committed'")
            )
        )
        records = sorted(
            conn.execute(
                sa.text(
                    "SELECT s.url, r.byte_offset, r.key_hash, r.key, r.byte_length, l.signature, r.spans "
                    "FROM records r JOIN shards s ON s.id = r.shard_id JOIN layouts l ON l.id = r.layout_id"
                )
            ).all()
        )
        entries = sorted(
            conn.execute(
                sa.text("SELECT position, name, content_type, codec FROM layout_entries")
            ).all()
        )
    return shards, [tuple(r) for r in records], [tuple(e) for e in entries]


def _payload_byte(info, key, name="jpg"):
    """Offset of a byte in the middle of one entry's payload."""
    i = info.keys.index(key)
    starts = info.entry_starts()
    for j in range(int(starts[i]), int(starts[i + 1])):
        if info.specs[int(info.entries["spec"][j])].name == name:
            return int(
                info.records["offset"][i] + info.entries["offset"][j] + info.entries["size"][j] // 2
            )
    raise KeyError(name)


def test_reindex_from_footers_gives_identical_rows(cat, local_root):
    infos = make_dataset(cat, local_root, 3)
    before = _snapshot(cat)
    urls = [info.path for info in infos]
    rows = cat.reindex("train", urls)
    assert [r.url for r in rows] == urls
    assert _snapshot(cat) == before
    assert cat.get("train", shard_keys(1)[3]).key == shard_keys(1)[3]
    assert cat.verify("train").ok


def test_reindex_registers_shards_the_catalog_never_saw(cat, local_root):
    cat.create_dataset("train", local_root)
    for i in range(3):
        write_shard(f"{local_root}/train-{i:06d}.shard", shard_keys(i), shard_number=i)
    rows = cat.reindex("train", f"{local_root}/train-{{000000..000002}}.shard")
    assert [r.shard_number for r in rows] == [0, 1, 2]
    assert all(r.state == "committed" for r in rows)
    assert cat.get_many("train", shard_keys(2)).ok
    assert len({r.job_id for r in rows}) == 1


def test_reindex_of_a_missing_shard_changes_nothing(cat, local_root):
    infos = make_dataset(cat, local_root, 1)
    before = _snapshot(cat)
    with pytest.raises(ShardNotFoundError):
        cat.reindex("train", [infos[0].path, f"{local_root}/nope.shard"])
    assert _snapshot(cat) == before


def test_verify_reports_each_disagreement(cat, local_root):
    infos = make_dataset(cat, local_root, 4)
    assert cat.verify("train").ok
    # 0: deleted.  1: a payload byte flipped.  2: a catalog row the footer does not have.
    # 3: a footer record the catalog lost.
    os.remove(infos[0].path)
    flip_byte(infos[1].path, _payload_byte(infos[1], shard_keys(1)[5]))
    with cat.engine.begin() as conn:
        shard2 = conn.execute(
            sa.text("SELECT id FROM shards WHERE url = :u"), {"u": infos[2].path}
        ).scalar_one()
        conn.execute(
            sa.text(
                "UPDATE records SET byte_offset = byte_offset + 1 WHERE shard_id = :s AND key = :k"
            ),
            {"s": shard2, "k": shard_keys(2)[7]},
        )
        shard3 = conn.execute(
            sa.text("SELECT id FROM shards WHERE url = :u"), {"u": infos[3].path}
        ).scalar_one()
        conn.execute(
            sa.text("DELETE FROM records WHERE shard_id = :s AND key = :k"),
            {"s": shard3, "k": shard_keys(3)[0]},
        )
    report = cat.verify("train")
    assert not report.ok
    by_shard = report.by_shard()
    assert [p.kind for p in by_shard[infos[0].path]] == ["missing"]
    assert [p.kind for p in by_shard[infos[1].path]] == ["corrupt"]
    assert "CRC32C mismatch" in by_shard[infos[1].path][0].message
    kinds2 = sorted(p.kind for p in by_shard[infos[2].path])
    assert kinds2 == ["record-not-in-catalog", "row-not-in-footer"]
    assert all(p.keys == (shard_keys(2)[7],) for p in by_shard[infos[2].path])
    assert [(p.kind, p.keys) for p in by_shard[infos[3].path]] == [
        ("record-not-in-catalog", (shard_keys(3)[0],))
    ]
    assert report.shards_checked == 4
    assert "problem" in str(report)
    # The shards are the source of truth: reindexing the intact ones repairs their rows.
    cat.reindex("train", [infos[2].path, infos[3].path])
    assert set(cat.verify("train").by_shard()) == {infos[0].path, infos[1].path}


def test_verify_reports_a_replaced_shard(cat, local_root):
    infos = make_dataset(cat, local_root, 1)
    write_shard(infos[0].path, shard_keys(0))  # same keys, new file id and header CRC
    report = cat.verify("train")
    assert [p.kind for p in report.problems] == ["shard-mismatch"]
    assert "file_id" in report.problems[0].message


def test_get_from_a_deleted_shard(cat, store):
    infos = make_dataset(cat, store["root"], 1, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    key = shard_keys(0)[2]
    assert cat.get("train", key).key == key  # the shard is now open in the lookup's cache
    if store["kind"] == "local":
        os.remove(infos[0].path)
    else:
        import fsspec

        fs, path = fsspec.core.url_to_fs(infos[0].path, **(store["storage_options"] or {}))
        fs.rm(path)
    with pytest.raises(ShardNotFoundError, match=r"does not exist.*shardcat verify"):
        cat.get("train", key)
    with pytest.raises(ShardNotFoundError):
        cat.get_many("train", [key])
    with pytest.raises(ShardNotFoundError):
        cat.get("train", key, entries=["txt"])


def test_get_from_a_shard_that_changed(cat, local_root):
    infos = make_dataset(cat, local_root, 1)
    key = shard_keys(0)[4]
    cat.get("train", key)
    flip_byte(infos[0].path, _payload_byte(infos[0], key))
    with pytest.raises(ChecksumError, match=r"CRC32C mismatch.*shardcat verify") as err:
        cat.get("train", key)
    assert infos[0].path in str(err.value)
    with pytest.raises(ChecksumError):
        cat.get_many("train", [shard_keys(0)[0], key])
    with pytest.raises(ChecksumError, match="'jpg'"):
        cat.get("train", key, entries=["jpg"])
    # A single-entry read of an intact entry reads (and checks) only that entry.
    assert cat.get("train", key, entries=["txt"])["txt"].decode() == f"text of {key}"
    # Other records of the shard are still fine.
    assert cat.get("train", shard_keys(0)[5]).key == shard_keys(0)[5]


def test_get_from_a_rewritten_shard_never_returns_another_record(cat, local_root):
    infos = make_dataset(cat, local_root, 1)
    key = shard_keys(0)[4]
    cat.get("train", key)
    # The file now holds other keys at (some of) the same offsets; the catalog is stale.
    write_shard(infos[0].path, [f"other/{i}" for i in range(len(shard_keys(0)))])
    with pytest.raises(FormatError, match="reindex"):
        cat.get("train", key)
    with pytest.raises(FormatError):
        cat.get_many("train", [key])
    with pytest.raises(FormatError):
        cat.get("train", key, entries=["json"])
    truncated = infos[0].path
    with open(truncated, "r+b") as f:
        f.truncate(200)
    with pytest.raises(FormatError, match="shard"):
        cat.get("train", shard_keys(0)[30])
    # A batch whose record the file ends inside: reported, not served short.
    with pytest.raises(FormatError, match="shard"):
        cat.get_many("train", [shard_keys(0)[30]])


def test_a_valid_rewrite_with_the_same_keys_and_offsets_is_never_served(cat, store):
    """Every CRC of the new file is right and every key sits where the catalog says:
    only the CRCs the catalog registered tell the bytes are not the ones it indexed."""
    opts = store["storage_options"]
    infos = make_dataset(cat, store["root"], 1, storage_options=opts)
    cat.storage_options = opts or {}
    keys = shard_keys(0)

    def other(key: str) -> dict:
        # Same entries and sizes as sample(key), other bytes: every offset stays the same.
        return {
            k: (bytes(b ^ 0x55 for b in v) if k == "jpg" else v) for k, v in sample(key).items()
        }

    assert cat.get("train", keys[0]).key == keys[0]  # the old file is open in the lookup's cache
    rewritten = write_shard(infos[0].path, keys, storage_options=opts, make=other)
    assert rewritten.records["offset"].tolist() == infos[0].records["offset"].tolist()
    for key in keys[:10]:
        with pytest.raises(ChecksumError, match="not the one registered"):
            cat.get("train", key)
    with pytest.raises(ChecksumError, match="shardcat verify"):
        cat.get_many("train", keys)
    with pytest.raises(ChecksumError):
        cat.get("train", keys[3], entries=["jpg"])
    # Entries whose bytes did not change are still served, checked against the catalog.
    assert cat.get("train", keys[3], entries=["txt"])["txt"].decode() == f"text of {keys[3]}"


def test_verify_reports_progress_once_per_shard(cat, local_root):
    urls = [info.path for info in make_dataset(cat, local_root, 3)]
    seen: list[tuple[str, int]] = []
    report = cat.verify("train", on_shard=lambda url, total: seen.append((url, total)))
    assert report.ok
    assert sorted(url for url, _ in seen) == sorted(urls)
    assert {total for _, total in seen} == {3}


# --- hostile shards: verify reports one and checks the others ----------------------------------

HOSTILE_KINDS = [
    "deep-metadata",
    "created-us-2^62",
    "zstd-damaged-blocks",
    "lz4-not-a-frame",
    "zstd-declares-1.1GB",
    "lz4-declares-1.1GB",
    "zstd-bomb-3GiB",
    "no-declared-size",
    "longer-than-the-file",
]


def _hostile_shard(kind: str, keys: list[str]) -> bytes:
    """A shard of ``keys`` with every CRC right, made hostile in the way ``kind`` names."""
    # tests/ is on sys.path (as for every test package): the builders live with the format tests.
    from format.hostile import (
        build_shard,
        lz4_frame,
        with_longer_last_record,
        with_metadata,
        zstd_frame,
        zstd_rle_bomb,
    )
    from shardcat.format import Codec

    content = bytes(range(256)) * 16
    zstd_ok = zstd_frame(content, len(content))
    entries = {
        "zstd-damaged-blocks": (Codec.ZSTD, zstd_ok[:14] + bytes(b ^ 0xA5 for b in zstd_ok[14:])),
        "lz4-not-a-frame": (Codec.LZ4, b"this is not an lz4 frame"),
        "zstd-declares-1.1GB": (Codec.ZSTD, zstd_frame(os.urandom(32 << 10), 1_100_000_000)),
        "lz4-declares-1.1GB": (Codec.LZ4, lz4_frame(os.urandom(32 << 10), 1_100_000_000)),
        "zstd-bomb-3GiB": (Codec.ZSTD, zstd_rle_bomb(3 << 30, 3 << 30)),
        "no-declared-size": (Codec.ZSTD, zstd_frame(content, None)),
    }
    filler = bytes(2048) if kind == "longer-than-the-file" else b"fine"  # > 64 KiB in all
    records = [(k, [("txt", "text/plain", Codec.NONE, filler)]) for k in keys]
    if kind in entries:
        codec, payload = entries[kind]
        records[3] = (
            keys[3],
            [*records[3][1], ("bin", "application/octet-stream", codec, payload)],
        )
    data = build_shard(records, created_us=2**62 if kind == "created-us-2^62" else 0)
    if kind == "deep-metadata":
        data = with_metadata(data, b'{"user":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    elif kind == "longer-than-the-file":
        data = with_longer_last_record(data, 1_100_000_000)
    return data


@pytest.mark.parametrize("kind", HOSTILE_KINDS)
def test_verify_reports_a_hostile_shard_and_checks_the_others(cat, local_root, kind):
    # Before: a RecursionError (deep metadata) or ValueError (created_us) from the
    # middle shard aborted the whole verify; the frames were never looked at.
    infos = make_dataset(cat, local_root, 3)
    hostile = infos[1].path
    with open(hostile, "wb") as f:
        f.write(_hostile_shard(kind, shard_keys(1)))
    seen: list[str] = []
    report = cat.verify("train", on_shard=lambda url, total: seen.append(url))
    assert set(report.by_shard()) == {hostile}, str(report)
    assert report.shards_checked == 3 and sorted(seen) == sorted(i.path for i in infos)
    # The two intact shards were read and verified in full.
    assert report.records_checked in (2 * len(shard_keys(0)), 3 * len(shard_keys(0)))
    assert report.bytes_checked >= infos[0].size + infos[2].size
    kinds = {p.kind for p in report.problems}
    if kind in ("deep-metadata", "longer-than-the-file"):
        assert kinds == {"unreadable"}  # the footer cannot be trusted at all
    elif kind in ("zstd-declares-1.1GB", "lz4-declares-1.1GB", "zstd-bomb-3GiB"):
        assert "corrupt" in kinds
        assert "SHARDCAT_MAX_DECOMPRESSED_BYTES" in str(report)
    elif kind in ("lz4-not-a-frame", "no-declared-size"):
        assert "corrupt" in kinds
    else:  # readable, but not the file the catalog registered
        assert "shard-mismatch" in kinds
    for p in report.problems:
        assert "Traceback" not in p.message and p.message


def test_a_shard_with_a_created_us_beyond_the_calendar_registers_and_verifies(cat, local_root):
    import datetime as dt

    from shardcat import ShardReader

    cat.create_dataset("train", local_root)
    paths = [f"{local_root}/train-{i:06d}.shard" for i in range(3)]
    write_shard(paths[0], shard_keys(0))
    write_shard(paths[2], shard_keys(2))
    with open(paths[1], "wb") as f:
        f.write(_hostile_shard("created-us-2^62", shard_keys(1)))
    rows = cat.reindex("train", paths)  # before: ValueError: year 148108 is out of range
    clamped = dt.datetime(9999, 12, 30, 23, 59, 59, tzinfo=dt.timezone.utc)
    assert rows[1].created_at == clamped
    with ShardReader(paths[1]) as r:
        assert r.info.created == clamped
    report = cat.verify("train")
    assert report.ok, str(report)
    assert report.records_checked == 3 * len(shard_keys(0))
    assert cat.get("train", shard_keys(1)[5])["txt"].data == b"fine"
