"""Reindex from footers; verify catalog against shards; rows pointing at changed shards."""

from __future__ import annotations

import os

import pytest
import sqlalchemy as sa

from shardcat.errors import ChecksumError, FormatError, ShardNotFoundError

from .helpers import make_dataset, shard_keys, write_shard

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


def _flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


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
    _flip(infos[1].path, _payload_byte(infos[1], shard_keys(1)[5]))
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
    _flip(infos[0].path, _payload_byte(infos[0], key))
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


def test_verify_reports_progress_once_per_shard(cat, local_root):
    urls = [info.path for info in make_dataset(cat, local_root, 3)]
    seen: list[tuple[str, int]] = []
    report = cat.verify("train", on_shard=lambda url, total: seen.append((url, total)))
    assert report.ok
    assert sorted(url for url, _ in seen) == sorted(urls)
    assert {total for _, total in seen} == {3}
