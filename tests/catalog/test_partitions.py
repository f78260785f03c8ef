"""Hash-partitioned ``records`` on PostgreSQL (the ``record_partitions`` setting, docs/SCALE.md §6).

Creation, migration 0017 (up from 0016 with the rows, down, a no-op with 0),
``shardcat catalog partition``, and the catalog's operations on a partitioned
table: writes, lookups, removals, versions, compaction, verify, hash-only
datasets under forced collisions.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import shardcat
import shardcat.config
from shardcat.catalog import check, current, downgrade, head_revision, upgrade
from shardcat.catalog.models import Record
from shardcat.catalog.partitions import PLAIN_INDEX, configured_partitions, partition_name
from shardcat.cli.catalog import catalog_app
from shardcat.errors import CatalogError, RecordsRebuildError, SettingError
from shardcat.reading import Catalog
from shardcat.testing.collisions import colliding_key_hashes

from .helpers import fill_with_history, make_dataset, shard_keys, write_shard
from .test_migrations import _execute, _records_state


def _layout(url: str) -> dict[str, Any]:
    """records' kind, partitions (name: rows), columns in order, primary key, index names."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            kind = conn.execute(
                sa.text("SELECT relkind FROM pg_class WHERE oid = 'records'::regclass")
            ).scalar()
            parts = conn.execute(
                sa.text(
                    "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
                    "JOIN pg_class c ON c.oid = i.inhrelid "
                    "WHERE i.inhparent = 'records'::regclass ORDER BY 1"
                )
            ).all()
            rows = {
                name: conn.execute(sa.text(f"SELECT count(*) FROM {name}")).scalar()
                for name, _ in parts
            }
            inspector = sa.inspect(conn)
            return {
                "kind": kind,
                "partitions": rows,
                "bounds": [bound for _, bound in parts],
                "columns": [c["name"] for c in inspector.get_columns("records")],
                "pk": inspector.get_pk_constraint("records")["constrained_columns"],
                "indexes": sorted(
                    conn.execute(
                        sa.text(
                            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                            "AND tablename = 'records'"
                        )
                    ).scalars()
                ),
            }
    finally:
        engine.dispose()


@pytest.fixture
def partitioned_url(postgres_url: str) -> str:
    """A PostgreSQL catalog created with ``record_partitions=4``."""
    with shardcat.config.set(record_partitions=4):
        Catalog(postgres_url).close()
    return postgres_url


# --- the setting -------------------------------------------------------------------


@pytest.mark.parametrize("value", ["x", "-1", "1025", 2000, -3, True, "1.5"])
def test_a_bad_record_partitions_value_names_the_setting_and_its_variable(value):
    with (
        shardcat.config.set(record_partitions=value),
        pytest.raises(SettingError, match=r"record_partitions \(SHARDCAT_RECORD_PARTITIONS\)"),
    ):
        configured_partitions()


def test_record_partitions_default_and_text_values():
    assert configured_partitions() == 0
    for given, wanted in (("16", 16), (" 3 ", 3), (0, 0), (1024, 1024)):
        with shardcat.config.set(record_partitions=given):
            assert configured_partitions() == wanted


def test_a_bad_value_fails_creation_before_any_table(sqlite_url):
    with (
        shardcat.config.set(record_partitions="many"),
        pytest.raises(SettingError, match="SHARDCAT_RECORD_PARTITIONS"),
    ):
        Catalog(sqlite_url)


def test_sqlite_ignores_the_setting(sqlite_url, local_root):
    with shardcat.config.set(record_partitions=4), Catalog(sqlite_url) as cat:
        make_dataset(cat, local_root, 1)
        assert cat.get("train", shard_keys(0)[3]).key == shard_keys(0)[3]
    assert check(sqlite_url) == []


# --- creation ----------------------------------------------------------------------


def test_a_catalog_created_with_partitions_has_them(partitioned_url, local_root):
    layout = _layout(partitioned_url)
    assert layout["kind"] == "p"
    assert list(layout["partitions"]) == [partition_name(i) for i in range(4)]
    assert layout["bounds"] == [f"FOR VALUES WITH (modulus 4, remainder {i})" for i in range(4)]
    # The models' columns in their order (storage order), no primary key, the plain index.
    assert layout["columns"] == [c.name for c in Record.__table__.columns]
    assert layout["pk"] == []
    assert layout["indexes"] == [
        "ix_records_dataset_id_key",
        "ix_records_dataset_id_key_hash",
        "ix_records_dataset_id_removed_version",
        PLAIN_INDEX,
    ]
    assert check(partitioned_url) == []  # the models' table, partitioned: no drift
    with Catalog(partitioned_url) as cat:
        make_dataset(cat, local_root, 2)
        assert cat.count("train") == 2 * len(shard_keys(0))
    # Rows spread over every partition; the views read them.
    assert all(n > 0 for n in _layout(partitioned_url)["partitions"].values())
    engine = sa.create_engine(partitioned_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM live_records")).scalar() == 80
        # One row per kept version and record: 40 at the first version, 80 at the second.
        assert conn.execute(sa.text("SELECT count(*) FROM records_at")).scalar() == 120
    engine.dispose()
    # Its bytes are its partitions' (the parent stores none).
    from shardcat.catalog.footprint import records_footprint

    with Catalog(partitioned_url) as cat:
        fp = records_footprint(cat.engine)
    assert fp.rows == 80 and fp.table >= 4 * 8192
    assert sorted(fp.indexes) == layout["indexes"]
    assert all(size >= 4 * 8192 for size in fp.indexes.values())


def test_catalog_operations_on_a_partitioned_catalog(partitioned_url, local_root):
    from .test_version_model import _client

    with Catalog(partitioned_url) as cat:
        make_dataset(cat, local_root, 3)
        keys = shard_keys(0) + shard_keys(1) + shard_keys(2)
        assert cat.get("train", keys[5]).key == keys[5]
        got = cat.get_many("train", [*keys, "no/such"])
        assert [r.key for r in got.records if r is not None] == keys
        assert got.missing == ["no/such"]
        kept = cat.info("train").version
        cat.delete_keys("train", keys[:30])
        with pytest.raises(KeyError):
            cat.get("train", keys[0])
        assert cat.get("train", keys[0], version=kept).key == keys[0]
        assert cat.get_many("train", keys[:30]).missing == keys[:30]
        # Replace a shard's worth of keys: the old rows are removed, the new ones served.
        info = write_shard(f"{local_root}/again.shard", shard_keys(2)[:10], make=lambda k: {"x": k})
        job = cat.begin_job("train")
        cat.register_shard("train", info, job=job)
        cat.commit_job(job, on_duplicate="replace")
        assert cat.get("train", shard_keys(2)[3])["x"].decode() == shard_keys(2)[3]
        summary = shardcat.compact(cat, "train", min_live=1.0, client=_client())
        assert summary.version is not None
        assert cat.count("train") == len(keys) - 30
        assert cat.get("train", keys[40]).key == keys[40]
        assert cat.expire("train", keep_last=1).expired
        report = cat.verify("train")
        assert report.problems == []
        assert report.records_checked == len(keys) - 30
        assert list(cat.keys("train", prefix="img/001/")) == shard_keys(1)
        cat.analyze()
        cat.delete_dataset("train")
    engine = sa.create_engine(partitioned_url)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM records")).scalar() == 0
        # ANALYZE reached the parent: the planner has its statistics (autovacuum never does).
        assert conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() "
                "AND tablename = 'records' AND inherited"
            )
        ).scalar()
    engine.dispose()


@pytest.mark.parametrize("bits", [2, 12])  # every hash shared; nearly every one a key's own
def test_hash_only_lookups_stay_exact_under_collisions_when_partitioned(
    partitioned_url, local_root, bits
):
    with Catalog(partitioned_url) as cat, colliding_key_hashes(bits=bits):
        cat.create_dataset("h", local_root, keys="hash")
        for i in range(3):
            cat.register_shard("h", write_shard(f"{local_root}/h-{i}.shard", shard_keys(i)))
        keys = [k for i in range(3) for k in shard_keys(i)]
        for key in keys[::7]:
            assert cat.get("h", key).key == key
        got = cat.get_many("h", [*keys, "img/009/00000"])
        assert [r.key for r in got.records if r is not None] == keys
        assert got.missing == ["img/009/00000"]
        assert cat.verify("h").problems == []


# --- migration 0017 ----------------------------------------------------------------


def _populate(url: str, root: str) -> dict[str, Any]:
    """Two datasets (one hash-only), removed records, a column group, field values, a view
    of one's own over a shardcat view, grants and comments; what lookups return."""
    with Catalog(url) as cat:
        kept = fill_with_history(cat, root)
        seen = {
            "train": cat.get_many("train", shard_keys(0) + shard_keys(1)).records,
            "h": cat.get_many("h", shard_keys(7)).records,
            "kept": cat.get("train", shard_keys(1)[5], version=kept).key,
            "labelled": sorted(
                k for ks in cat.select("train", "label = 1").keys.values() for k in ks
            ),
            "group": cat.get("train", shard_keys(0)[1])["g"].decode(),
        }
    _execute(
        url,
        "CREATE VIEW my_keys AS SELECT key FROM live_records "
        "WHERE group_id = 0 AND key LIKE 'img/000/%'; "
        "GRANT SELECT ON records, live_records, my_keys TO PUBLIC; "
        "GRANT SELECT ON records TO pg_monitor WITH GRANT OPTION; "
        "GRANT SELECT (key, key_hash) ON records TO pg_read_all_stats; "
        "COMMENT ON TABLE records IS 'one row per record'; "
        "COMMENT ON COLUMN records.key IS 'its key''s text'; "
        "COMMENT ON INDEX pk_records IS 'the key index'; "
        "COMMENT ON INDEX ix_records_dataset_id_key_hash IS 'lookups'; "
        "COMMENT ON VIEW my_keys IS 'mine'; "
        "ALTER TABLE records ALTER COLUMN spans SET STORAGE MAIN; "
        "ALTER TABLE records ALTER COLUMN key_hash SET (n_distinct = -1); "
        "ALTER TABLE records ALTER COLUMN key SET COMPRESSION pglz; "
        "ALTER TABLE records ALTER COLUMN dataset_id SET STATISTICS 500; "
        "ALTER TABLE records SET (fillfactor = 90, autovacuum_analyze_scale_factor = 0.02)",
    )
    return seen


def _seen(url: str) -> dict[str, Any]:
    with Catalog(url) as cat:
        info = cat.info("train")
        return {
            "train": cat.get_many("train", shard_keys(0) + shard_keys(1)).records,
            "h": cat.get_many("h", shard_keys(7)).records,
            "kept": cat.get("train", shard_keys(1)[5], version=info.version - 2).key,
            "labelled": sorted(
                k for ks in cat.select("train", "label = 1").keys.values() for k in ks
            ),
            "group": cat.get("train", shard_keys(0)[1])["g"].decode(),
        }


_EXTRA = {
    # Storage options: the plain table's, or each partition's; statistics targets.
    "options": "SELECT c.relname, c.reloptions FROM pg_class c WHERE c.oid IN (SELECT "
    "'records'::regclass UNION SELECT inhrelid FROM pg_inherits WHERE inhparent = "
    "'records'::regclass) ORDER BY 1",
    "targets": "SELECT c.relname, a.attname, a.attstattarget FROM pg_attribute a JOIN pg_class c "
    "ON c.oid = a.attrelid WHERE a.attrelid IN (SELECT 'records'::regclass UNION SELECT inhrelid "
    "FROM pg_inherits WHERE inhparent = 'records'::regclass) AND a.attstattarget > 0 ORDER BY 1, 2",
    "storage": "SELECT c.relname, a.attname, a.attstorage, a.attcompression, ARRAY(SELECT o FROM "
    "unnest(a.attoptions) o WHERE o LIKE 'n\\_distinct%') FROM pg_attribute a JOIN pg_class c "
    "ON c.oid = a.attrelid WHERE a.attrelid IN (SELECT inhrelid FROM pg_inherits WHERE "
    "inhparent = 'records'::regclass) AND a.attnum > 0 ORDER BY 1, 2",
}


def _extra(url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            raw = conn.execution_options(no_parameters=True)
            return {k: [tuple(r) for r in raw.exec_driver_sql(sql)] for k, sql in _EXTRA.items()}
    finally:
        engine.dispose()


def _without_layout(state: dict[str, Any]) -> dict[str, Any]:
    """A records state but what the layout decides: indexes (ON ONLY, the key's), the pk,
    the key index's comment's name."""
    rest = {k: v for k, v in state.items() if k not in ("indexes", "pk", "comments")}
    rest["comments"] = sorted(
        (
            ("<key>" if name in ("pk_records", PLAIN_INDEX) else name, column, text)
            for name, column, text in state["comments"]
        ),
        key=repr,
    )
    return rest


def _without_0018(state: dict[str, Any]) -> dict[str, Any]:
    """A records state as 0016 and 0017 see it: revision 0018's column ``key_sorted`` and the
    key index's predicate (``key_sorted`` added to it) aside."""
    out = dict(state)
    out["order"] = [c for c in state["order"] if c != "key_sorted"]
    out["rows"] = [{k: v for k, v in r.items() if k != "key_sorted"} for r in state["rows"]]
    out["column_storage"] = [r for r in state["column_storage"] if r[0] != "key_sorted"]
    out["indexes"] = [
        (name, sql.replace("WHERE ((key IS NOT NULL) AND key_sorted)", "WHERE (key IS NOT NULL)"))
        for name, sql in state["indexes"]
    ]
    return out


def test_0017_partitions_a_catalog_with_data_and_back(postgres_url, local_root):
    seen = _populate(postgres_url, local_root)
    assert downgrade(postgres_url, "0016") == (head_revision(), "0016")
    plain = _records_state(postgres_url)
    plain.pop("analyzed")
    plain_extra = _extra(postgres_url)
    assert _layout(postgres_url)["kind"] == "r"  # 0017's downgrade left a plain table alone
    assert any(r["removed_version"] is not None for r in plain["rows"])
    assert any(r["key"] is None for r in plain["rows"])
    assert any(r["group_id"] != 0 for r in plain["rows"])

    with shardcat.config.set(record_partitions=3):
        assert upgrade(postgres_url) == ("0016", head_revision())
    layout = _layout(postgres_url)
    assert layout["kind"] == "p"
    assert list(layout["partitions"]) == [partition_name(i) for i in range(3)]
    assert sum(layout["partitions"].values()) == len(plain["rows"])
    assert layout["pk"] == []
    up = _records_state(postgres_url)
    assert up.pop("analyzed") is True  # the rebuilt table's statistics, the parent's too
    # Every row, field value, grant, comment, setting and view; the layout's own changes only.
    assert _without_layout(_without_0018(up)) == _without_layout(plain)
    assert {name for name, _ in up["indexes"]} == (
        {name for name, _ in plain["indexes"]} - {"pk_records"} | {PLAIN_INDEX}
    )
    assert (PLAIN_INDEX, None, "the key index") in up["comments"]
    extra = _extra(postgres_url)
    # A partitioned table stores no rows: its partitions have the options.
    assert extra["options"] == [("records", None)] + [
        (name, ["fillfactor=90", "autovacuum_analyze_scale_factor=0.02"])
        for name in layout["partitions"]
    ]
    assert {(c, t) for _, c, t in extra["targets"]} == {("dataset_id", 500)}
    assert {r[0] for r in extra["targets"]} == {"records", *layout["partitions"]}
    by_partition = {
        r[0]: {x[1]: x[2:] for x in extra["storage"] if x[0] == r[0]} for r in extra["storage"]
    }
    for columns in by_partition.values():
        assert columns["spans"][0] == "m"
        assert columns["key"][1] == "p"
        assert columns["key_hash"][2] == ["n_distinct=-1"]
    assert check(postgres_url) == [] or all("comment" in str(d) for d in check(postgres_url))
    assert _seen(postgres_url) == seen
    with Catalog(postgres_url) as cat:  # new records go into the partitions
        cat.register_shard("h", write_shard(f"{local_root}/h/b.shard", shard_keys(8)))
        assert cat.get("h", shard_keys(8)[2]).key == shard_keys(8)[2]

    assert downgrade(postgres_url, "0016") == (head_revision(), "0016")
    down = _records_state(postgres_url)
    assert down.pop("analyzed") is True
    assert _layout(postgres_url)["kind"] == "r"
    assert down["pk"] == ["shard_id", "byte_offset"]
    assert down["indexes"] == plain["indexes"]
    assert {k: v for k, v in down.items() if k != "rows"} == {
        k: v for k, v in plain.items() if k != "rows"
    }
    assert len(down["rows"]) == len(plain["rows"]) + len(shard_keys(8))
    assert _extra(postgres_url) == plain_extra

    # With 0 (the default) the upgrade changes nothing.
    assert upgrade(postgres_url) == ("0016", head_revision())
    again = _records_state(postgres_url)
    again.pop("analyzed")
    assert _layout(postgres_url)["kind"] == "r"
    assert _without_0018(again) == down
    assert _seen(postgres_url) == seen


def test_0017_upgrade_on_sqlite_changes_nothing(sqlite_url, local_root):
    with Catalog(sqlite_url) as cat:
        make_dataset(cat, local_root, 1)
    before = _records_state(sqlite_url, mine=False)
    assert downgrade(sqlite_url, "0016") == (head_revision(), "0016")
    with shardcat.config.set(record_partitions=3):
        assert upgrade(sqlite_url) == ("0016", head_revision())
    assert _records_state(sqlite_url, mine=False) == before


def test_partitioning_refuses_what_needs_the_primary_key(postgres_url, local_root):
    with Catalog(postgres_url) as cat:
        make_dataset(cat, local_root, 1)
    assert downgrade(postgres_url, "0016") == (head_revision(), "0016")
    before = _records_state(postgres_url, mine=False)
    for make, undo in (
        (
            "ALTER TABLE records REPLICA IDENTITY USING INDEX pk_records",
            "ALTER TABLE records REPLICA IDENTITY DEFAULT",
        ),
        (
            "COMMENT ON CONSTRAINT pk_records ON records IS 'the key'",
            "COMMENT ON CONSTRAINT pk_records ON records IS NULL",
        ),
    ):
        _execute(postgres_url, make)
        try:
            with (
                shardcat.config.set(record_partitions=2),
                pytest.raises(RecordsRebuildError, match="partitioned records has no primary key"),
            ):
                upgrade(postgres_url)
            assert current(postgres_url) == "0016"
        finally:
            _execute(postgres_url, undo)
        assert _records_state(postgres_url, mine=False) == before


# --- shardcat catalog partition ----------------------------------------------------


def test_cli_partition_converts_a_catalog_at_head_and_back(postgres_url, local_root):
    with Catalog(postgres_url) as cat:
        make_dataset(cat, local_root, 2)
        before = cat.get_many("train", shard_keys(0) + shard_keys(1)).records
    runner = CliRunner()
    result = runner.invoke(
        catalog_app, ["partition", "--partitions", "5", "--catalog", postgres_url]
    )
    assert result.exit_code == 0, result.output
    assert "rebuilt from one plain table to 5 hash partitions" in result.output
    layout = _layout(postgres_url)
    assert len(layout["partitions"]) == 5 and sum(layout["partitions"].values()) == 80
    assert check(postgres_url) == []
    with Catalog(postgres_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).records == before
    # Again: nothing to do; another count: rebuilt; 0: the plain table with its primary key.
    result = runner.invoke(
        catalog_app, ["partition", "--partitions", "5", "--catalog", postgres_url, "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "catalog": json.loads(result.output)["catalog"],
        "partitions_before": 5,
        "partitions": 5,
    }
    assert (
        runner.invoke(
            catalog_app, ["partition", "--partitions", "2", "--catalog", postgres_url]
        ).exit_code
        == 0
    )
    assert list(_layout(postgres_url)["partitions"]) == [partition_name(i) for i in range(2)]
    assert (
        runner.invoke(
            catalog_app, ["partition", "--partitions", "0", "--catalog", postgres_url]
        ).exit_code
        == 0
    )
    layout = _layout(postgres_url)
    assert layout["kind"] == "r" and layout["pk"] == ["shard_id", "byte_offset"]
    assert check(postgres_url) == []
    with Catalog(postgres_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).records == before
    result = runner.invoke(
        catalog_app, ["partition", "--partitions", "2000", "--catalog", postgres_url]
    )
    assert result.exit_code != 0
    assert "1024" in result.output


def test_cli_partition_refuses_sqlite_and_an_old_catalog(sqlite_url, postgres_url):
    from shardcat.catalog import partition_records

    Catalog(sqlite_url).close()
    with pytest.raises(CatalogError, match="PostgreSQL only"):
        partition_records(sqlite_url, 4)
    upgrade(postgres_url, "0016")
    with pytest.raises(CatalogError, match="shardcat catalog upgrade"):
        partition_records(postgres_url, 4)
    assert _layout(postgres_url)["kind"] == "r"


def test_verify_reports_a_record_with_two_rows_which_no_primary_key_refuses(
    partitioned_url, local_root
):
    """Uniqueness of (shard_id, byte_offset) holds by construction; verify checks it."""
    with Catalog(partitioned_url) as cat:
        infos = make_dataset(cat, local_root, 2)
        assert cat.verify("train").problems == []
        with cat.engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO records SELECT * FROM records WHERE byte_offset = "
                    "(SELECT min(byte_offset) FROM records)"
                )
            )
        problems = cat.verify("train").problems
        assert {p.kind for p in problems} == {"duplicate-row"}
        assert sorted(k for p in problems for k in p.keys) == [shard_keys(0)[0], shard_keys(1)[0]]
        cat.reindex("train", [info.path for info in infos])
        assert cat.verify("train").problems == []
        assert cat.get("train", shard_keys(0)[0]).key == shard_keys(0)[0]


def test_the_batch_statement_probes_one_partition_per_key(partitioned_url, local_root):
    """get_many's statement on a partitioned records: a nested loop whose index probes are
    pruned at run time, one partition per hash (loops sum to the hashes), not the whole
    array in every partition. The nested loop forced: the tables are tiny here."""
    import re

    from shardcat.format.checksums import signed_key_hash
    from shardcat.reading import statements

    with Catalog(partitioned_url) as cat:
        make_dataset(cat, local_root, 3)
        cat.analyze()
        assert cat._lookup().raw.partitioned
        assert cat._lookup()._batch == statements.batch_sql("postgresql", partitioned=True)
        keys = shard_keys(0)[:10] + shard_keys(2)[:15]
        hashes = [signed_key_hash(k.encode()) for k in keys]
        raw = cat.engine.raw_connection()
        try:
            cur = raw.cursor()
            # The plan a large catalog gets (docs/SCALE.md §6); a tiny one would hash them.
            for setting in ("enable_seqscan", "enable_hashjoin", "enable_mergejoin"):
                cur.execute(f"SET {setting} = off")
            cur.execute("SET plan_cache_mode = force_generic_plan")
            sql = statements.batch_sql("postgresql", partitioned=True)
            cur.execute(sql, ("train", hashes))
            assert sorted(row[4] for row in cur.fetchall()) == sorted(keys)
            cur.execute("EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) " + sql, ("train", hashes))
            plan = "\n".join(row[0] for row in cur.fetchall())
        finally:
            raw.close()
    scans = re.findall(r"Index (?:Only )?Scan using \S+ on (records_p\d+) .*loops=(\d+)\)", plan)
    assert {name for name, _ in scans} <= {partition_name(i) for i in range(4)}, plan
    assert sum(int(n) for _, n in scans) == len(keys), plan
