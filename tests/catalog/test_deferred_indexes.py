"""SQLite: a bulk registration builds ``records``' key indexes after its rows (issue 33).

``key_indexes_deferred`` drops every index of ``records`` over ``key_hash`` or
``key`` when a transaction brings enough rows, and creates them again from
their own text, with their statistics, before the duplicate-key check and the
commit. These tests lower the threshold to one row so that small catalogs take
the bulk path, and check that what the catalog holds and answers afterwards is
what the incremental path leaves: the same index definitions and statistics,
the same lookups, listings, duplicate checks and rollbacks.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from shardcat import Catalog
from shardcat.catalog import deferred_indexes, shards
from shardcat.catalog.deferred_indexes import key_indexes_deferred
from shardcat.errors import DuplicateKeyError

from .helpers import write_shard

HASH_INDEX = "ix_records_dataset_id_key_hash"
KEY_INDEX = "ix_records_dataset_id_key"
ODD_INDEX = 'a user\'s "odd" index'


@pytest.fixture
def dropped(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The names of the indexes each deferral dropped (the threshold left as it is)."""
    seen: list[list[str]] = []
    real = deferred_indexes._key_indexes

    def spy(*args: Any) -> list[tuple[str, str]]:
        found = real(*args)
        seen.append([name for name, _ in found])
        return found

    monkeypatch.setattr(deferred_indexes, "_key_indexes", spy)
    return seen


@pytest.fixture
def deferring(monkeypatch: pytest.MonkeyPatch, dropped: list[list[str]]) -> list[list[str]]:
    """As ``dropped``, with every transaction of one row or more large enough."""
    monkeypatch.setattr(deferred_indexes, "DEFER_MIN_ROWS", 1)
    return dropped


def _path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def _schema(url: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``records``' indexes (name, text) and their statistics, as SQLite holds them."""
    con = sqlite3.connect(_path(url))
    try:
        indexes = con.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' "
            "ORDER BY name"
        ).fetchall()
        stats = con.execute(
            "SELECT idx, stat FROM sqlite_stat1 WHERE tbl = 'records' ORDER BY idx"
        ).fetchall()
        return indexes, stats
    finally:
        con.close()


def _sql(url: str, *statements: str) -> None:
    con = sqlite3.connect(_path(url), isolation_level=None)
    try:
        for s in statements:
            con.execute(s)
    finally:
        con.close()


def _plan(url: str) -> str:
    con = sqlite3.connect(_path(url))
    try:
        rows = con.execute(
            "EXPLAIN QUERY PLAN SELECT shard_id, byte_offset FROM records "
            "WHERE dataset_id = 2 AND key_hash = 5"
        ).fetchall()
        return " ".join(str(r[-1]) for r in rows)
    finally:
        con.close()


@pytest.fixture
def catalog(sqlite_url: str, local_root: str) -> Iterator[Catalog]:
    """A catalog with a dataset ``old`` of 60 keys, a user's index on records and statistics."""
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("old", local_root)
        cat.register_shards(
            "old",
            [
                write_shard(f"{local_root}/old{i}.shard", [f"old/{i}/{k:02d}" for k in range(30)])
                for i in range(2)
            ],
        )
        _sql(
            sqlite_url,
            f'CREATE INDEX "{ODD_INDEX.replace(chr(34), 2 * chr(34))}" '
            "ON records (byte_length, key)",
            "ANALYZE",
        )
        yield cat


def _infos(root: str, name: str, shards_: int, keys: int = 30) -> list[Any]:
    return [
        write_shard(f"{root}/{name}{i}.shard", [f"{name}/{i}/{k:02d}" for k in range(keys)])
        for i in range(shards_)
    ]


@pytest.mark.parametrize("keys", ["text", "hash", "unsorted"])
def test_a_bulk_registration_builds_the_same_indexes_after_its_rows(
    catalog: Catalog, sqlite_url: str, local_root: str, deferring: list[list[str]], keys: str
) -> None:
    before = _schema(sqlite_url)
    assert {HASH_INDEX, KEY_INDEX, ODD_INDEX} <= {name for name, _ in before[0]}
    assert {HASH_INDEX, KEY_INDEX, ODD_INDEX} <= {idx for idx, _ in before[1]}
    catalog.create_dataset("train", local_root, keys=keys)
    rows = catalog.register_shards("train", _infos(local_root, "train", 3))
    assert [r.record_count for r in rows] == [30, 30, 30]
    # Dropped: every index over key_hash or key, a user's too; kept: the removed-rows index.
    assert [sorted(d) for d in deferring] == [sorted([HASH_INDEX, KEY_INDEX, ODD_INDEX])]
    assert _schema(sqlite_url) == before
    assert HASH_INDEX in _plan(sqlite_url)
    # Both datasets answer as before: points, batches, listings where the dataset keeps them.
    assert catalog.get("train", "train/2/29").key == "train/2/29"
    assert catalog.get("old", "old/1/00").key == "old/1/00"
    wanted = [f"train/{i}/{k:02d}" for i in range(3) for k in range(0, 30, 7)] + ["nope"]
    assert catalog.get_many("train", wanted).missing == ["nope"]
    if keys == "text":
        assert len(list(catalog.keys("train", prefix="train/1/"))) == 30
    assert len(list(catalog.keys("old", prefix="old/0/"))) == 30
    report = catalog.verify("train")
    assert report.ok, [str(p) for p in report.problems]


def test_a_small_registration_keeps_the_indexes(
    catalog: Catalog,
    sqlite_url: str,
    local_root: str,
    dropped: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    catalog.create_dataset("train", local_root)
    # The default threshold: 90 rows are far from a bulk load.
    catalog.register_shards("train", _infos(local_root, "a", 3))
    # One row is enough, but 10 rows are under a quarter of the 150 records holds.
    monkeypatch.setattr(deferred_indexes, "DEFER_MIN_ROWS", 1)
    catalog.register_shards("train", _infos(local_root, "b", 1, keys=10))
    assert dropped == []
    # 40 rows are over a quarter of 160.
    catalog.register_shards("train", _infos(local_root, "c", 1, keys=40))
    assert len(dropped) == 1


def test_a_duplicate_found_by_the_rebuilt_index_registers_nothing(
    catalog: Catalog, sqlite_url: str, local_root: str, deferring: list[list[str]]
) -> None:
    before = _schema(sqlite_url)
    catalog.create_dataset("train", local_root, keys="hash")
    catalog.register_shard("train", write_shard(f"{local_root}/x.shard", ["x", "y"]))
    # The commit's duplicate-key query reads the hash index built again after the rows.
    infos = [*_infos(local_root, "n", 3), write_shard(f"{local_root}/z.shard", ["z", "x"])]
    with pytest.raises(DuplicateKeyError) as e:
        catalog.register_shards("train", infos)
    assert e.value.keys == ["x"]
    assert len(deferring) == 1
    assert _schema(sqlite_url) == before
    assert [r.url for r in catalog.shards("train")] == [f"{local_root}/x.shard"]
    assert catalog.get_many("train", ["n/0/00", "z", "x"]).missing == ["n/0/00", "z"]


def test_a_failure_among_the_rows_leaves_the_indexes_and_registers_nothing(
    catalog: Catalog,
    sqlite_url: str,
    local_root: str,
    deferring: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _schema(sqlite_url)
    catalog.create_dataset("train", local_root)
    calls: list[int] = []
    real = shards.insert_records

    def failing(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError("the disk is full")
        real(*args, **kwargs)

    monkeypatch.setattr(shards, "insert_records", failing)
    infos = _infos(local_root, "train", 3)
    with pytest.raises(OSError, match="disk is full"):
        catalog.register_shards("train", infos)
    assert len(deferring) == 1 and len(calls) == 2
    assert _schema(sqlite_url) == before
    assert catalog.shards("train", state=None) == []
    assert HASH_INDEX in _plan(sqlite_url)
    # The catalog goes on: the same shards register on the next try.
    monkeypatch.setattr(shards, "insert_records", real)
    assert len(catalog.register_shards("train", infos)) == 3
    assert catalog.get("train", "train/1/05").key == "train/1/05"
    assert _schema(sqlite_url) == before


def test_a_reindex_of_a_whole_dataset_defers_its_indexes(
    catalog: Catalog,
    sqlite_url: str,
    local_root: str,
    dropped: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = _schema(sqlite_url)
    catalog.create_dataset("train", local_root)
    infos = _infos(local_root, "train", 3)
    catalog.register_shards("train", infos)
    assert dropped == []
    monkeypatch.setattr(deferred_indexes, "DEFER_MIN_ROWS", 1)
    rows = catalog.reindex("train", [i.path for i in infos], workers=2)
    assert len(rows) == 3 and len(dropped) == 1
    assert _schema(sqlite_url) == before
    assert catalog.get("train", "train/0/03").key == "train/0/03"
    assert len(list(catalog.keys("train", prefix="train/2/"))) == 30
    assert catalog.verify("train").ok


def test_only_sqlite_defers(catalog_url: str, local_root: str) -> None:
    with Catalog(catalog_url) as cat, cat._uow(write=True) as s:
        with key_indexes_deferred(s, 10**12) as deferred:
            assert deferred is (cat.engine.dialect.name == "sqlite")
        with key_indexes_deferred(s, 10) as deferred:
            assert deferred is False


def test_readers_see_the_indexes_while_a_bulk_registration_runs(
    catalog: Catalog,
    sqlite_url: str,
    local_root: str,
    deferring: list[list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SQLite's readers read the last commit: the dropped indexes are there for them."""
    catalog.create_dataset("train", local_root)
    seen: list[Any] = []
    real = shards.insert_records

    def reading(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        if not seen:  # mid-registration: the indexes are dropped in the writer's transaction
            with Catalog(sqlite_url) as reader:
                seen.append(reader.get("old", "old/0/07").key)
                seen.append(reader.get_many("old", ["old/1/29", "train/0/00"]).missing)
                seen.append(reader.shards("train", state=None))
            seen.append(_plan(sqlite_url))

    monkeypatch.setattr(shards, "insert_records", reading)
    catalog.register_shards("train", _infos(local_root, "train", 3))
    assert len(deferring) == 1
    assert seen[:3] == ["old/0/07", ["train/0/00"], []]
    assert HASH_INDEX in seen[3]
    assert catalog.get("train", "train/0/00").key == "train/0/00"
