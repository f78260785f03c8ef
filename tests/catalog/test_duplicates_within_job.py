"""A key twice within one job, found from the hashes that repeat in it (issue 33).

The commit groups the job's key hashes alone, then compares key text only for the
hashes that repeat. Forced collisions (every key hash narrowed to a few bits) make
most hashes repeat, so these tests fail if the second step flagged two keys that
merely share a hash, or if either step missed a key written twice. Each test runs
on SQLite and PostgreSQL (``catalog_url``).
"""

from __future__ import annotations

import pytest

from shardcat.catalog import duplicates
from shardcat.errors import DuplicateKeyError
from shardcat.reading import Catalog
from shardcat.testing.collisions import colliding_key_hashes

from .helpers import write_shard


@pytest.mark.parametrize("keys", ["text", "hash"])
def test_colliding_distinct_keys_of_two_workers_commit(catalog_url, local_root, keys):
    with colliding_key_hashes(bits=2), Catalog(catalog_url) as one, Catalog(catalog_url) as two:
        one.create_dataset("d", local_root, keys=keys)
        job = one.begin_job("d")
        # 40 keys on 4 hashes: every hash repeats, no key does (a first commit: nothing to probe).
        one.register_shard(
            "d", write_shard(f"{local_root}/a.shard", [f"a/{i}" for i in range(20)]), job=job
        )
        two.register_shard(
            "d", write_shard(f"{local_root}/b.shard", [f"b/{i}" for i in range(20)]), job=job
        )
        assert one.commit_job(job).record_count == 40
        assert one.count("d") == 40


@pytest.mark.parametrize("keys", ["text", "hash"])
@pytest.mark.parametrize("committed_first", [False, True])
def test_a_key_twice_in_shards_of_two_workers_is_named_exactly(
    catalog_url, local_root, keys, committed_first
):
    with colliding_key_hashes(bits=2), Catalog(catalog_url) as one, Catalog(catalog_url) as two:
        one.create_dataset("d", local_root, keys=keys)
        if committed_first:  # the job is then also probed against committed records
            one.register_shard("d", write_shard(f"{local_root}/old.shard", ["old/1", "old/2"]))
        job = one.begin_job("d")
        first = [f"a/{i}" for i in range(10)] + ["twice/1", "twice/2"]
        second = [f"b/{i}" for i in range(10)] + ["twice/2", "twice/1"]
        one.register_shard("d", write_shard(f"{local_root}/a.shard", first), job=job)
        two.register_shard("d", write_shard(f"{local_root}/b.shard", second), job=job)
        with pytest.raises(DuplicateKeyError, match="within the job") as err:
            one.commit_job(job, on_duplicate="replace")  # no policy resolves a repeat in a job
        assert err.value.keys == ["twice/1", "twice/2"]
        assert one.job(job).state == "open"
        assert one.count("d") == (2 if committed_first else 0)


def test_repeated_hashes_are_compared_in_chunks(catalog_url, local_root, monkeypatch):
    # One hash per statement: a chunk not asked would miss the repeats of its hashes.
    monkeypatch.setattr(duplicates, "_AT_ONCE", 1)
    with colliding_key_hashes(bits=3), Catalog(catalog_url) as cat:
        cat.create_dataset("d", local_root)
        job = cat.begin_job("d")
        keys = [f"k/{i}" for i in range(30)]
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", keys), job=job)
        cat.register_shard("d", write_shard(f"{local_root}/b.shard", ["x", *keys[::7]]), job=job)
        with pytest.raises(DuplicateKeyError) as err:
            cat.commit_job(job)
        assert err.value.keys == sorted(keys[::7])


def test_a_job_written_twice_stops_at_the_keys_it_reports(catalog_url, local_root, monkeypatch):
    # The same shard's keys twice: the check stops asking once it has enough keys to report.
    monkeypatch.setattr(duplicates, "_AT_ONCE", 1)
    monkeypatch.setattr(duplicates, "_REPORTED", 3)
    asked: list[str] = []
    real = duplicates.text

    def counting(sql: str):  # the statements of repeated hashes, one hash each
        if "HAVING count(*) > 1" in sql and "n.key_hash IN" in sql:
            asked.append(sql)
        return real(sql)

    monkeypatch.setattr(duplicates, "text", counting)
    with Catalog(catalog_url) as cat:
        cat.create_dataset("d", local_root)
        job = cat.begin_job("d")
        keys = [f"k/{i}" for i in range(20)]
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", keys), job=job)
        cat.register_shard("d", write_shard(f"{local_root}/b.shard", keys), job=job)
        with pytest.raises(DuplicateKeyError, match=r"3 duplicate key") as err:
            cat.commit_job(job)
    assert len(err.value.keys) == 3 and set(err.value.keys) <= set(keys)
    assert len(asked) == 3  # not 20: one statement per hash until three keys were found
