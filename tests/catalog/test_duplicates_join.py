"""The append's duplicate check: a probe per record, or one hash join for a large job (issue 33).

On PostgreSQL a job of 100,000 records or more and a quarter or more of the table's
rows is checked by a hash join over ``records`` (10M keys appended to 10M: 22.6 s
against 88.4 s of probes).
Both ways must find exactly the same keys: forced hash collisions make every key
share its hash with others, a removed record's key is no duplicate, and a key
twice is named. Each test runs on SQLite (one statement) and PostgreSQL (both).
(Hash-only datasets compare keys from the shards, not with these statements.)
"""

from __future__ import annotations

import pytest
from sqlalchemy import text

from shardcat.catalog import duplicates
from shardcat.errors import DuplicateKeyError
from shardcat.reading import Catalog
from shardcat.testing.collisions import colliding_key_hashes

from .helpers import write_shard

# _SCAN_PER_PROBE: 0 never joins (any table is larger), 10**9 always does (with no minimum).
_WAYS = {"probe": 0, "join": 10**9}


def _joined(monkeypatch: pytest.MonkeyPatch, way: str) -> list[int]:
    monkeypatch.setattr(duplicates, "_SCAN_PER_PROBE", _WAYS[way])
    monkeypatch.setattr(duplicates, "_JOIN_MIN_ROWS", 0)
    calls: list[int] = []
    real = duplicates._set_local

    def counted(session, settings):  # type: ignore[no-untyped-def]
        calls.append(1)
        real(session, settings)

    monkeypatch.setattr(duplicates, "_set_local", counted)
    return calls


@pytest.mark.parametrize("way", sorted(_WAYS))
def test_both_ways_name_the_same_live_keys(catalog_url, local_root, monkeypatch, way):
    calls = _joined(monkeypatch, way)
    with colliding_key_hashes(bits=2), Catalog(catalog_url) as cat:
        cat.create_dataset("d", local_root)
        cat.register_shard(
            "d", write_shard(f"{local_root}/old.shard", [f"old/{i}" for i in range(20)])
        )
        cat.delete_keys("d", ["old/3"])  # removed: writing it again is no duplicate
        job = cat.begin_job("d")
        new = [f"new/{i}" for i in range(15)] + ["old/1", "old/3", "old/2"]
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", new), job=job)
        with pytest.raises(DuplicateKeyError) as err:
            cat.commit_job(job)
        assert err.value.keys == ["old/1", "old/2"]
        pg = cat.engine.dialect.name == "postgresql"
        assert len(calls) == (2 if pg and way == "join" else 0)  # set, then put back
        cat.commit_job(job, on_duplicate="replace")
        assert cat.count("d") == 19 + 16
        assert cat.verify("d").ok


@pytest.mark.parametrize("way", sorted(_WAYS))
def test_a_key_twice_in_the_job_and_live_is_named_once(catalog_url, local_root, monkeypatch, way):
    _joined(monkeypatch, way)
    with colliding_key_hashes(bits=3), Catalog(catalog_url) as cat:
        cat.create_dataset("d", local_root)
        cat.register_shard("d", write_shard(f"{local_root}/old.shard", ["k/1", "k/2"]))
        job = cat.begin_job("d")
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", ["k/2", "x/1"]), job=job)
        cat.register_shard("d", write_shard(f"{local_root}/b.shard", ["x/2", "x/1"]), job=job)
        with pytest.raises(DuplicateKeyError) as err:
            cat.commit_job(job, on_duplicate="skip")  # a repeat within the job: no policy helps
        assert err.value.keys == ["x/1"]
        assert cat.count("d") == 2


def test_the_join_leaves_the_transactions_planner_settings_as_they_were(
    postgres_url, local_root, monkeypatch
):
    _joined(monkeypatch, "join")
    with Catalog(postgres_url) as cat:
        cat.create_dataset("d", local_root)
        cat.register_shard("d", write_shard(f"{local_root}/old.shard", ["k/1"]))
        job = cat.begin_job("d")
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", ["k/1", "k/2"]), job=job)
        with cat._uow(write=True) as s:
            s.execute(text("SET LOCAL work_mem = '5MB'"))
            sizes = duplicates._sizes(s, cat.info("d").id, job.id)
            assert sizes.join and (sizes.job_rows, sizes.table_rows) == (2, 3)
            assert duplicates.duplicate_keys(s, job.id, sizes) == ["k/1"]
            got = s.execute(
                text("SELECT current_setting('enable_nestloop'), current_setting('work_mem')")
            ).one()
            assert tuple(got) == ("on", "5MB")


def test_a_small_job_keeps_its_probes_and_its_round_trips(postgres_url, local_root):
    """Under 100,000 records the probes take well under a second: no join, no statement more,
    and the table's rows are not even counted (0)."""
    with Catalog(postgres_url) as cat:
        cat.create_dataset("d", local_root)
        cat.register_shard("d", write_shard(f"{local_root}/old.shard", ["k/1"]))
        job = cat.begin_job("d")
        cat.register_shard("d", write_shard(f"{local_root}/a.shard", ["k/2", "k/3"]), job=job)
        with cat._uow() as s:
            sizes = duplicates._sizes(s, cat.info("d").id, job.id)
        assert sizes.committed and (sizes.job_rows, sizes.table_rows) == (2, 0)
        assert not sizes.join
