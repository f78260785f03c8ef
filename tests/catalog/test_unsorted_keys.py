"""Unsorted datasets (``keys="unsorted"``): key text kept, the key-order index left out.

Each test runs on SQLite and PostgreSQL (``catalog_url``): the rows keep their key
text with ``key_sorted`` false, the key index gains nothing from them (measured in
bytes), everything that reads keys by name or by SQL works, and what reads keys in
key order says it cannot. Revision 0018 upgrades a catalog with its rows and back.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from shardcat import KeyOrderUnavailableError, KeyTextUnavailableError
from shardcat.catalog.footprint import records_footprint
from shardcat.catalog.migrate import downgrade, head_revision, upgrade
from shardcat.errors import DatasetExistsError
from shardcat.reading import Catalog

from .helpers import keyed_dataset, sample, shard_keys, write_shard

_KEY_INDEX = "ix_records_dataset_id_key"


def _rows(cat: Catalog, dataset: str) -> list[tuple[Any, ...]]:
    """(key, key_sorted) of the dataset's rows."""
    with cat.engine.connect() as conn:
        return [
            (key, bool(flag))
            for key, flag in conn.execute(
                sa.text(
                    "SELECT r.key, r.key_sorted FROM records r JOIN datasets d "
                    "ON d.id = r.dataset_id WHERE d.name = :n ORDER BY r.shard_id, r.byte_offset"
                ),
                {"n": dataset},
            )
        ]


def test_rows_keep_their_key_text_out_of_the_key_index(cat, local_root):
    keyed_dataset(cat, local_root, "u", "unsorted")
    assert cat.info("u").keys == "unsorted"
    assert _rows(cat, "u") == [(k, False) for k in shard_keys(0) + shard_keys(1)]
    # A text dataset's rows take the column's default.
    keyed_dataset(cat, local_root, "t", "text", shards=1)
    assert _rows(cat, "t") == [(k, True) for k in shard_keys(0)]


def test_the_key_index_gains_no_bytes_from_an_unsorted_dataset(cat, local_root):
    """5,000 keys a dataset: the text one grows the key index by pages, the unsorted one not."""

    def index_bytes() -> int:
        if cat.engine.dialect.name == "postgresql":
            with cat.engine.begin() as conn:
                conn.execute(sa.text("CHECKPOINT"))
        return records_footprint(cat.engine).indexes[_KEY_INDEX]

    keys = [f"sample/{i:07d}" for i in range(5000)]
    for name in ("u", "t"):
        cat.create_dataset(name, local_root, keys="unsorted" if name == "u" else "text")
    empty = index_bytes()
    cat.register_shard("u", write_shard(f"{local_root}/u.shard", keys, make=_tiny))
    after_unsorted = index_bytes()
    cat.register_shard("t", write_shard(f"{local_root}/t.shard", keys, make=_tiny))
    after_text = index_bytes()
    assert after_unsorted == empty
    # 5,000 keys of 14 characters: at least 14 bytes each in the index's pages.
    assert after_text - after_unsorted >= 5000 * 14
    footprint = records_footprint(cat.engine)
    assert footprint.rows == 10_000


def _tiny(key: str) -> dict[str, Any]:
    return {"txt": key}


def test_lookups_sql_and_version_operations_work(cat, local_root):
    infos = keyed_dataset(cat, local_root, "u", "unsorted")
    for key in shard_keys(0)[:3] + shard_keys(1)[-3:]:
        record = cat.get("u", key)
        assert record.key == key
        assert record.entries["txt"].data == sample(key)["txt"].encode()
        assert cat.locate("u", key).url == infos[int(key[4:7])].path
    batch = cat.get_many("u", [*shard_keys(1)[:10], "absent"])
    assert [r.key for r in batch.records if r is not None] == shard_keys(1)[:10]
    assert batch.missing == ["absent"]
    # where= reads key text (a scan of the dataset's rows, not a range of the key index).
    chosen = cat.select("u", "key LIKE 'img/001/0001%'")
    assert sorted(k for ks in chosen.keys.values() for k in ks) == [
        k for k in shard_keys(1) if k.startswith("img/001/0001")
    ]
    assert cat.count("u") == len(shard_keys(0)) * 2  # a count needs no order
    removed = shard_keys(0)[:4]
    cat.delete_keys("u", removed)
    assert cat.get_many("u", removed).missing == removed
    version = cat.info("u").version
    assert cat.diff("u", version - 1, version, keys=True).removed_keys == removed
    # A column group matches entries to samples by key text.
    from shardcat.catalog.groups import GroupWrite

    job = cat.begin_job("u")
    info = write_shard(f"{local_root}/g.shard", shard_keys(1)[:2], make=lambda k: {"g": k})
    cat.register_shard("u", info, job=job)
    cat.commit_job(job, group=GroupWrite("captions"))
    assert cat.get("u", shard_keys(1)[1])["g"].decode() == shard_keys(1)[1]
    # The group's rows are the dataset's: out of the key index too.
    assert {flag for _, flag in _rows(cat, "u")} == {False}


def test_listing_in_key_order_says_what_to_do(cat, local_root):
    keyed_dataset(cat, local_root, "u", "unsorted", shards=1)
    for call in (
        lambda: list(cat.keys("u")),
        lambda: list(cat.keys("u", prefix="img/")),
        lambda: cat.count("u", prefix="img/"),
    ):
        with pytest.raises(KeyOrderUnavailableError, match='created with keys="unsorted"') as e:
            call()
        assert not isinstance(e.value, KeyTextUnavailableError)
        assert "where=" in str(e.value) and "copy" in str(e.value)  # what to do
    # A hash-only dataset's refusal is the subclass: one except clause catches both.
    cat.create_dataset("h", local_root, keys="hash")
    with pytest.raises(KeyOrderUnavailableError):
        list(cat.keys("h"))


def test_the_mode_is_the_datasets_own(cat, local_root):
    cat.create_dataset("u", local_root, keys="unsorted")
    assert cat.create_dataset("u", local_root, keys="unsorted", exist_ok=True).keys == "unsorted"
    with pytest.raises(DatasetExistsError, match="keys='unsorted'"):
        cat.create_dataset("u", local_root, exist_ok=True)


def test_0018_upgrades_a_catalog_with_its_rows_and_back(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        keyed_dataset(cat, local_root, "t", "text")
        keyed_dataset(cat, local_root, "u", "unsorted", shards=1)
        before = {name: cat.get_many(name, shard_keys(0)).records for name in ("t", "u")}
    # Down: the column is gone, the unsorted dataset is a text one, its rows in the index.
    assert downgrade(catalog_url, "0017") == (head_revision(), "0017")
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("records")}
            assert "key_sorted" not in columns
            modes = dict(conn.execute(sa.text("SELECT name, key_mode FROM datasets")).all())
            assert modes == {"t": "text", "u": "text"}
    finally:
        engine.dispose()
    # Up again, with every row: they were all sorted at 0017, and are listed in key order.
    assert upgrade(catalog_url) == ("0017", head_revision())
    with Catalog(catalog_url) as cat:
        assert {flag for _, flag in _rows(cat, "t") + _rows(cat, "u")} == {True}
        assert list(cat.keys("u")) == shard_keys(0)
        assert list(cat.keys("t", prefix="img/001/")) == shard_keys(1)
        assert {name: cat.get_many(name, shard_keys(0)).records for name in ("t", "u")} == before
        # A new unsorted dataset after the upgrade keeps its rows out again.
        keyed_dataset(cat, local_root, "v", "unsorted", shards=1)
        assert {flag for _, flag in _rows(cat, "v")} == {False}
        assert cat.get("v", shard_keys(0)[9]).key == shard_keys(0)[9]


def test_a_key_range_in_where_reads_the_key_index_of_a_text_dataset(sqlite_url, local_root):
    """where= on a text dataset says the index's condition (key_sorted), so SQLite ranges it."""
    from shardcat.catalog.selection import SelectionTarget

    with Catalog(sqlite_url) as cat:
        keyed_dataset(cat, local_root, "t", "text")
        keyed_dataset(cat, local_root, "u", "unsorted")
        ids = {name: cat.info(name).id for name in ("t", "u")}
        key_range = "key >= 'img/001/' AND key < 'img/0010'"
        for name in ("t", "u"):
            chosen = cat.select(name, key_range)
            assert sorted(k for ks in chosen.keys.values() for k in ks) == shard_keys(1)
        with cat.engine.connect() as conn:
            for name, indexed in (("t", True), ("u", False)):
                target = SelectionTarget(name, ids[name], {}, None, key_sorted=indexed)
                statement = target.template("sqlite").replace("{where}", key_range)
                plan = " ".join(
                    str(row[-1]) for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement)
                )
                assert (f"INDEX {_KEY_INDEX} (" in plan) is indexed, plan


def test_one_where_clause_reads_the_key_index_on_both_databases(cat, local_root):
    """What CATALOG.md tells people to write: a bare key_sorted, the same on both databases."""
    keyed_dataset(cat, local_root, "t", "text")
    dataset_id = cat.info("t").id
    asked = {
        "a key": f"dataset_id = {dataset_id} AND key_sorted AND key = 'img/001/00003'",
        "a range": f"dataset_id = {dataset_id} AND key_sorted AND key >= 'img/001/' "
        "AND key < 'img/0010'",
    }
    with cat.engine.connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:  # a table this small is read whole unless the planner is told not to
            conn.exec_driver_sql("SET enable_seqscan = off")
        for what, where in asked.items():
            sql = f"SELECT key FROM records WHERE {where}"
            rows = [r[0] for r in conn.exec_driver_sql(sql)]
            assert rows == (["img/001/00003"] if what == "a key" else shard_keys(1)), what
            explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(explain + sql))
            assert f"{_KEY_INDEX} " in plan + " " and "key_hash" not in plan, (what, plan)


def test_a_key_range_over_the_views_reads_the_key_index(cat, local_root):
    """Revision 0019: the record views have key_sorted, so the same clause ranges the index."""
    keyed_dataset(cat, local_root, "t", "text")
    keyed_dataset(cat, local_root, "u", "unsorted")
    version = cat.info("t").version
    key_range = "key_sorted AND key >= 'img/001/' AND key < 'img/0010'"
    with cat.engine.connect() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:
            conn.exec_driver_sql("SET enable_seqscan = off")
        explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
        for sql in (
            f"SELECT key FROM live_records WHERE dataset = 't' AND {key_range} ORDER BY key",
            f"SELECT key FROM records_at WHERE dataset = 't' AND version = {version} "
            f"AND {key_range} "
            "ORDER BY key",
        ):
            assert [r[0] for r in conn.exec_driver_sql(sql)] == shard_keys(1)
            plan = " ".join(str(r[-1]) for r in conn.exec_driver_sql(explain + sql))
            assert f"{_KEY_INDEX} " in plan + " ", plan
        # An unsorted dataset's rows are not in the index: the clause finds none of them,
        # and without key_sorted the view lists them as any other.
        unsorted = "SELECT count(*) FROM live_records WHERE dataset = 'u' AND {}"
        assert conn.exec_driver_sql(unsorted.format(key_range)).scalar() == 0
        assert conn.exec_driver_sql(unsorted.format("NOT key_sorted")).scalar() == 2 * len(
            shard_keys(0)
        )


def test_0019_adds_key_sorted_to_the_views_and_keeps_what_users_built_on_them(
    catalog_url, local_root
):
    """A view built on live_records and a trigger on it stay through the upgrade and back."""
    with Catalog(catalog_url) as cat:
        keyed_dataset(cat, local_root, "t", "text")
        keyed_dataset(cat, local_root, "u", "unsorted", shards=1)
    assert downgrade(catalog_url, "0018") == (head_revision(), "0018")
    mine = sa.text("SELECT dataset, key FROM my_keys ORDER BY dataset, key")
    engine = sa.create_engine(catalog_url)

    def columns(view: str) -> list[str]:
        with engine.connect() as conn:
            return [c["name"] for c in sa.inspect(conn).get_columns(view)]

    def triggers() -> list[str]:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                sql = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
            else:
                sql = "SELECT tgname FROM pg_trigger WHERE tgrelid = 'live_records'::regclass"
            return [r[0] for r in conn.exec_driver_sql(sql)]

    try:
        # At 0018 the views are 0013's, without key_sorted.
        assert "key_sorted" not in columns("live_records")
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE VIEW my_keys AS SELECT dataset, key FROM live_records")
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql(
                    "CREATE TRIGGER no_insert INSTEAD OF INSERT ON live_records BEGIN SELECT 1; END"
                )
            else:
                conn.exec_driver_sql(
                    "CREATE FUNCTION no_insert() RETURNS trigger LANGUAGE plpgsql AS "
                    "$$BEGIN RETURN NULL; END$$"
                )
                conn.exec_driver_sql(
                    "CREATE TRIGGER no_insert INSTEAD OF INSERT ON live_records "
                    "FOR EACH ROW EXECUTE FUNCTION no_insert()"
                )
            before = conn.execute(mine).all()
        assert upgrade(catalog_url) == ("0018", head_revision())
        for view in ("live_records", "records_at"):
            assert columns(view)[-1] == "key_sorted"
        assert triggers() == ["no_insert"]
        with engine.connect() as conn:
            assert conn.execute(mine).all() == before
            flags = conn.execute(
                sa.text("SELECT dataset, key_sorted FROM live_records GROUP BY dataset, key_sorted")
            ).all()
            assert sorted((d, bool(f)) for d, f in flags) == [("t", True), ("u", False)]
        # Down: 0013's views again. On PostgreSQL the user's view is made again around them
        # (a trigger on them stops the downgrade, which says what to do); on SQLite the
        # trigger is made again and the user's view resolved when read.
        postgres = engine.dialect.name == "postgresql"
        if postgres:
            with pytest.raises(RuntimeError, match="has triggers, rules or column defaults"):
                downgrade(catalog_url, "0018")
            with engine.begin() as conn:
                conn.exec_driver_sql("DROP TRIGGER no_insert ON live_records")
        assert downgrade(catalog_url, "0018") == (head_revision(), "0018")
        assert "key_sorted" not in columns("live_records")
        assert triggers() == ([] if postgres else ["no_insert"])
        with engine.connect() as conn:
            assert conn.execute(mine).all() == before
        assert upgrade(catalog_url) == ("0018", head_revision())
        with engine.connect() as conn:
            assert conn.execute(mine).all() == before
            # Below 0018 the column goes from records too: nothing reads it any more.
        assert downgrade(catalog_url, "0017") == (head_revision(), "0017")
        with engine.connect() as conn:
            assert conn.execute(mine).all() == before
        assert upgrade(catalog_url) == ("0017", head_revision())
    finally:
        engine.dispose()
    with Catalog(catalog_url) as cat:
        assert list(cat.keys("t", prefix="img/001/")) == shard_keys(1)
