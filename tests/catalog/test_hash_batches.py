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
        hashes = [checksums.signed_key_hash(k.encode()) for k in keys]
        single = {h: k for h, k in zip(hashes, keys) if hashes.count(h) == 1}
        absent = next(
            f"absent/{i}"
            for i in range(100_000)
            if checksums.signed_key_hash(f"absent/{i}".encode()) in single
        )
        holder = single[checksums.signed_key_hash(absent.encode())]
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
    assert _records(cat.get_many("h", keys[:5] + keys[6:9])) == keys[:5] + keys[6:9]


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
