"""Round trips of a registration: an upper bound, so they do not creep back (issue 10).

Each statement costs a round trip (~0.6 ms to a local PostgreSQL); a
job-less ``register_shard`` was 22 of them before, now 13 at most. The
bulk insert of the records (COPY, or executemany on SQLite's raw cursor)
does not pass through SQLAlchemy and is not counted here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event

from shardcat import Catalog
from shardcat.errors import DuplicateKeyError

from .helpers import write_shard

MANIFEST_STATEMENTS = 1
"""The new version's manifest (docs/LIFECYCLE.md §8): one SELECT of the shards it added, in the
commit's transaction (the version row comes back from its INSERT; the column groups it created
or dropped are noted as the transaction makes them)."""
REGISTER_STATEMENTS = 13 + MANIFEST_STATEMENTS
"""Job-less register_shard: reads, inserts, the commit's bookkeeping, the row back (22 before)."""
STAGE_STATEMENTS = 7
"""register_shard(job=): dataset, URL check, job lock, retried rows, layouts, shard, row back (10 before)."""


@contextmanager
def statements(cat: Catalog) -> Iterator[list[str]]:
    """SQL statements sent through the catalog's engine in the block (BEGIN excluded)."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):
            sent.append(statement)

    event.listen(cat.engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(cat.engine, "before_cursor_execute", record)


def test_register_shard_stays_within_its_round_trips(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        first = write_shard(f"{local_root}/a.shard", [f"a/{i}" for i in range(50)])
        second = write_shard(f"{local_root}/b.shard", [f"b/{i}" for i in range(50)])
        with statements(cat) as sent:  # new layouts, empty dataset
            cat.register_shard("train", first)
        assert 0 < len(sent) <= REGISTER_STATEMENTS, sent
        with statements(cat) as sent:  # known layouts, the duplicate check runs
            row = cat.register_shard("train", second)
        assert 0 < len(sent) <= REGISTER_STATEMENTS, sent
        assert row.state == "committed" and row.record_count == 50
        log = cat.log("train")
        assert [v.number for v in log] == [2, 1]
        assert (log[0].total_records, log[0].records_added) == (100, 50)
        assert cat.get("train", "b/7").key == "b/7"


def test_staging_under_a_job_stays_within_its_round_trips(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        cat.register_shard("train", write_shard(f"{local_root}/a.shard", ["a"]))
        job = cat.begin_job("train")
        infos = [
            write_shard(f"{local_root}/j{i}.shard", [f"j{i}/{k}" for k in range(20)])
            for i in range(3)
        ]
        for info in infos:
            with statements(cat) as sent:
                cat.register_shard("train", info, job=job)
            assert 0 < len(sent) <= STAGE_STATEMENTS, sent
        assert cat.commit_job(job).version == 2
        assert cat.log("train")[0].total_records == 61


def test_the_lean_path_still_refuses_a_taken_url_and_a_repeated_key(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        info = write_shard(f"{local_root}/a.shard", ["x", "y"])
        cat.register_shard("train", info)
        with pytest.raises(DuplicateKeyError, match="already committed"):
            cat.register_shard("train", info)
        with pytest.raises(DuplicateKeyError):
            cat.register_shard("train", write_shard(f"{local_root}/b.shard", ["y", "z"]))
        assert [v.number for v in cat.log("train")] == [1]
        assert cat.log("train")[0].total_records == 2
