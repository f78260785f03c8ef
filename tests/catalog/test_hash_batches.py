"""Batches of a hash-only dataset the lookup has met: one round of reads, still exact.

A hash-only dataset's rows have no key text (docs/CATALOG.md, "Hash-only
datasets"). Its first batch reads each row's key from its record's head, then
the records: two rounds of reads. Once the lookup knows the dataset is
hash-only, a batch's rows come with their key hash, a row that is the only one
of its hash takes the asked key of that hash, and the record's own read checks
it: one round. These tests hold that path to the same answers as a dict, under
hashes narrowed so that asked keys collide with stored ones, and count the reads.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from shardcat.errors import ShardcatError
from shardcat.format import checksums
from shardcat.testing.collisions import colliding_key_hashes

from .helpers import ReadCounter, keyed_dataset, sample, shard_keys, write_shard


def _records(batch) -> list[str | None]:
    return [None if r is None else r.key for r in batch.records]


def _absent_colliding_with_a_lone_row(keys: list[str]) -> tuple[str, str]:
    """A key not among ``keys`` whose (narrowed) hash exactly one of them has, and that one."""
    hashes = [checksums.signed_key_hash(k.encode()) for k in keys]
    single = {h: k for h, k in zip(hashes, keys) if hashes.count(h) == 1}
    absent = next(
        f"absent/{i}"
        for i in range(100_000)
        if checksums.signed_key_hash(f"absent/{i}".encode()) in single
    )
    return absent, single[checksums.signed_key_hash(absent.encode())]


def test_a_met_dataset_batches_with_as_many_reads_as_one_with_key_text(cat, store, monkeypatch):
    """Locally merged ``pread`` runs, in memory and on S3 (moto) ranged requests: the same
    count for a hash-only dataset as for one with key text, where two rounds took twice."""
    root, options = store["root"], store["storage_options"]
    cat.storage_options = options
    for name, mode in (("t", "text"), ("h", "hash")):
        cat.create_dataset(name, f"{root}/{name}", keys=mode)
        for i in range(2):
            url = f"{root}/{name}/{name}-{i:06d}.shard"
            info = write_shard(url, shard_keys(i), storage_options=options, shard_number=i)
            cat.register_shard(name, info)
    keys = shard_keys(0) + shard_keys(1)
    asked = [*keys[::3], "absent/1", "absent/2"]
    for name in ("t", "h"):
        cat.get_many(name, asked[:4])  # each dataset met, its shards opened
    reads = {}
    for name in ("t", "h"):
        counter = ReadCounter(monkeypatch)
        batch = cat.get_many(name, asked)
        reads[name] = len(counter.reads)
        monkeypatch.undo()
        assert _records(batch) == [k if k in keys else None for k in asked]
        assert batch.missing == ["absent/1", "absent/2"]
        assert [r["jpg"].data for r in batch.records if r is not None] == [
            sample(k)["jpg"] for k in asked if k in keys
        ]
    assert reads["h"] == reads["t"] > 0, reads


def test_the_first_batch_of_a_new_catalog_reads_one_round_too(catalog_url, local_root, monkeypatch):
    """The batch that meets a hash-only dataset asks for its rows again with their hashes
    (one statement more), not for every head (a round of reads more)."""
    from shardcat.reading import Catalog

    from .helpers import QueryCounter

    with Catalog(catalog_url) as cat:
        keyed_dataset(cat, local_root, "t", "text", shards=2)
        keyed_dataset(cat, local_root, "h", "hash", shards=2)
    keys = shard_keys(0) + shard_keys(1)
    asked = [*keys[1::4], "absent"]
    reads, statements = {}, {}
    for name in ("t", "h"):
        with Catalog(catalog_url) as cat:
            counter = ReadCounter(monkeypatch)
            with QueryCounter(cat) as queries:
                batch = cat.get_many(name, asked)
            reads[name], statements[name] = len(counter.reads), len(queries.statements)
            monkeypatch.undo()
            assert _records(batch) == [*keys[1::4], None]
            assert cat._lookup().hash_datasets == ({"h"} if name == "h" else set())
    assert reads["h"] == reads["t"] > 0, reads
    assert statements["h"] == statements["t"] + 1, statements


def test_an_absent_key_whose_hash_one_record_holds_is_missing(cat, local_root):
    """The collision the one-round path must catch: one row of the hash, another key's."""
    with colliding_key_hashes(bits=12):  # 4,096 hashes for 80 keys: nearly all one row each
        keyed_dataset(cat, local_root, "h", "hash", shards=2)
        keys = shard_keys(0) + shard_keys(1)
        absent, holder = _absent_colliding_with_a_lone_row(keys)
        others = [k for k in keys[::7] if k != holder]
        cat.get_many("h", keys[:2])  # met: the next batches take the one-round path
        for asked in ([absent], [absent, *others], [holder, absent, *others], [absent, holder]):
            batch = cat.get_many("h", asked)
            assert _records(batch) == [None if k == absent else k for k in asked], asked
            assert batch.missing == [absent]
        assert cat.get_many("h", [holder])[0].key == holder


def test_a_changed_record_is_still_an_error_that_says_what_to_do(cat, local_root):
    infos = keyed_dataset(cat, local_root, "h", "hash", shards=1)
    keys = shard_keys(0)
    cat.get_many("h", keys[:2])  # met
    row = infos[0].records[5]
    payload = int(row["offset"]) + int(row["length"]) // 2  # inside its image bytes
    with open(infos[0].path, "r+b") as f:
        f.seek(payload)
        byte = f.read(1)
        f.seek(payload)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ShardcatError, match="reindex"):
        cat.get_many("h", keys[3:8])
    with pytest.raises(ShardcatError, match="reindex"):
        cat.get_many("h", keys[3:8], entries=["jpg"])
    described = cat.describe_many("h", keys[3:8], want=lambda info: info.name == "jpg")
    assert list(described.errors) == [keys[5]] and "reindex" in str(described.errors[keys[5]])
    assert sorted(described.records) == sorted(k for k in keys[3:8] if k != keys[5])
    assert _records(cat.get_many("h", keys[:5] + keys[6:9])) == keys[:5] + keys[6:9]
    assert (
        cat.get_many("h", [keys[5]], entries=["txt"])[0]["txt"].decode() == sample(keys[5])["txt"]
    )


def test_two_asked_keys_of_one_hash_are_both_found(cat, local_root):
    with colliding_key_hashes(bits=3):  # 8 hashes for 40 keys: every hash asked twice or more
        keyed_dataset(cat, local_root, "h", "hash", shards=1)
        keys = shard_keys(0)
        cat.get_many("h", keys[:1])
        batch = cat.get_many("h", [*reversed(keys), "absent"])
        assert _records(batch) == [*reversed(keys), None]
        with cat.engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT count(DISTINCT key_hash) FROM records")).scalar() <= 8
            )


def _rounds(monkeypatch) -> list[int]:
    """The batches of reads a lookup sends (``SourceCache.read_batch`` calls and their size)."""
    from shardcat.storage import SourceCache

    calls: list[int] = []
    real = SourceCache.read_batch

    def counted(self, requests, *args, **kwargs):
        calls.append(len(requests))
        return real(self, requests, *args, **kwargs)

    monkeypatch.setattr(SourceCache, "read_batch", counted)
    return calls


def test_entries_and_descriptions_take_one_round_of_reads(cat, store, monkeypatch):
    """get_many(entries=) and describe_many of a hash-only dataset: the assumed keys' heads
    are read in the batch of the entries' reads, as many rounds as with key text."""
    root, options = store["root"], store["storage_options"]
    cat.storage_options = options
    for name, mode in (("t", "text"), ("h", "hash")):
        cat.create_dataset(name, f"{root}/{name}", keys=mode)
        url = f"{root}/{name}/{name}-000000.shard"
        cat.register_shard(name, write_shard(url, shard_keys(0), storage_options=options))
    keys = shard_keys(0)
    asked = [*keys[::3], "absent"]
    want = {"txt", "json"}
    for name in ("t", "h"):
        cat.get_many(name, asked[:2])  # met, shards open
    rounds = {}
    for name in ("t", "h"):
        calls = _rounds(monkeypatch)
        batch = cat.get_many(name, asked, entries=["txt"])
        described = cat.describe_many(name, asked, want=lambda info: info.name in want)
        rounds[name] = len(calls)
        monkeypatch.undo()
        assert _records(batch) == [*keys[::3], None]
        assert [r["txt"].decode() for r in batch.records if r] == [
            sample(k)["txt"] for k in keys[::3]
        ]
        assert all(list(r.entries) == ["txt"] for r in batch.records if r)
        assert described.missing == ["absent"] and not described.errors
        assert sorted(described.records) == sorted(keys[::3])
        for key, record in described.records.items():
            assert sorted(record.entries) == ["json", "txt"]
            assert record["txt"].decode() == sample(key)["txt"]
            assert [e.name for e in described.described[key]] == ["jpg", "json", "txt"]
    assert rounds["h"] == rounds["t"] == 2, rounds


def test_entries_and_descriptions_stay_exact_under_collisions(cat, local_root):
    with colliding_key_hashes(bits=12):
        keyed_dataset(cat, local_root, "h", "hash", shards=2)
        keys = shard_keys(0) + shard_keys(1)
        absent, holder = _absent_colliding_with_a_lone_row(keys)
        cat.get_many("h", keys[:2])  # met
        for asked in ([absent], [absent, *keys[1::9]], [holder, absent]):
            batch = cat.get_many("h", asked, entries=["txt"])
            assert _records(batch) == [None if k == absent else k for k in asked], asked
            assert [r["txt"].decode() for r in batch.records if r] == [
                sample(k)["txt"] for k in asked if k != absent
            ]
            described = cat.describe_many("h", asked, want=lambda info: info.name == "txt")
            assert described.missing == [absent] and not described.errors
            assert sorted(described.records) == sorted(k for k in asked if k != absent)
    with colliding_key_hashes(bits=3):  # every hash asked twice or more: keys read first
        keyed_dataset(cat, local_root, "h3", "hash", shards=1)
        keys = shard_keys(0)
        cat.get_many("h3", keys[:1])
        batch = cat.get_many("h3", [*reversed(keys), "absent"], entries=["txt"])
        assert [r["txt"].decode() if r else None for r in batch.records] == [
            *(sample(k)["txt"] for k in reversed(keys)),
            None,
        ]
