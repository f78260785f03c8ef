"""Models and migrations agree; migrations go up, down and up; old schemas are refused."""

from __future__ import annotations

import importlib.resources
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import shardcat
from shardcat.catalog import check, current, downgrade, head_revision, migrate, upgrade
from shardcat.cli.catalog import catalog_app
from shardcat.errors import SchemaVersionError
from shardcat.reading import Catalog


def _tables(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return set(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_migrations_match_models(catalog_url):
    assert current(catalog_url) is None
    assert upgrade(catalog_url) == (None, head_revision())
    assert check(catalog_url) == []


def test_the_head_an_open_checks_is_the_migration_scripts_head():
    # Opening compares the stamped revision with this constant (no script parsing):
    # a new migration must update it.
    assert head_revision() == migrate.HEAD_REVISION


def test_upgrade_downgrade_upgrade(catalog_url):
    upgrade(catalog_url)
    assert {"datasets", "jobs", "shards", "records", "layouts", "layout_entries"} <= _tables(
        catalog_url
    )
    assert downgrade(catalog_url, "base") == (head_revision(), None)
    assert _tables(catalog_url) <= {"alembic_version"}
    assert upgrade(catalog_url)[1] == head_revision()
    assert current(catalog_url) == head_revision()
    assert check(catalog_url) == []


def test_new_catalog_is_created_at_head_like_the_migrations(catalog_url):
    with Catalog(catalog_url) as cat:
        assert cat.revision == head_revision()
    assert current(catalog_url) == head_revision()
    assert check(catalog_url) == []


def test_check_sees_drift(catalog_url):
    """The agreement test is not vacuous: a missing index is a difference."""
    upgrade(catalog_url)
    engine = sa.create_engine(catalog_url)
    with engine.begin() as conn:
        conn.execute(sa.text("DROP INDEX ix_records_dataset_id_key_hash"))
    engine.dispose()
    diffs = check(catalog_url)
    assert any("ix_records_dataset_id_key_hash" in str(d) for d in diffs)


def test_older_revision_is_refused(catalog_url):
    # This shardcat is newer: its head (0002 or later) is a revision the catalog has not reached.
    upgrade(catalog_url, "0001")
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade") as err:
        Catalog(catalog_url)
    assert "'0001'" in str(err.value) and f"'{head_revision()}'" in str(err.value)


def test_downgraded_catalog_is_refused_not_recreated(catalog_url):
    upgrade(catalog_url)
    downgrade(catalog_url, "base")
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)


def test_newer_unknown_revision_asks_to_upgrade_shardcat(catalog_url):
    upgrade(catalog_url)
    engine = sa.create_engine(catalog_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(SchemaVersionError, match="upgrade shardcat"):
        Catalog(catalog_url)


def test_create_false_refuses_an_empty_catalog(catalog_url):
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url, create=False)


def test_a_schema_named_in_the_url_must_exist(postgres_server):
    """docs/CLUSTER.md §4: shardcat creates tables, never the schema of a search_path URL."""
    schema = f"missing_{uuid.uuid4().hex[:12]}"
    url = f"{postgres_server}?options=-csearch_path%3D{schema}"
    says_create = rf'no schema of its search path \({schema}\) exists.*CREATE SCHEMA "{schema}"'
    with pytest.raises(SchemaVersionError, match=says_create):
        upgrade(url)  # before: "InvalidSchemaName: no schema has been selected to create in"
    with pytest.raises(SchemaVersionError, match=says_create):
        Catalog(url)  # before: created nothing, then called the catalog "empty"
    with pytest.raises(SchemaVersionError, match=says_create):
        Catalog(url, create=False)

    admin = sa.create_engine(postgres_server)
    try:
        with admin.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
        assert upgrade(url) == (None, head_revision())  # what the documentation says to do
        with Catalog(url) as cat:
            cat.create_dataset("train", "/data")
            assert [d.name for d in cat.datasets()] == ["train"]
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        admin.dispose()


def test_missing_table_says_upgrade(catalog_url):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", "/data")
        engine = sa.create_engine(catalog_url)
        with engine.begin() as conn:
            # PostgreSQL keeps a table views read (0008) unless told to drop them too.
            cascade = " CASCADE" if conn.dialect.name == "postgresql" else ""
            conn.execute(sa.text(f"DROP TABLE records{cascade}"))
        engine.dispose()
        with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
            cat.get("train", "k")


def test_migration_scripts_ship_as_a_package():
    folder = migrate.migrations_dir()
    assert (folder / "env.py").is_file()
    assert (folder / "script.py.mako").is_file()
    assert (folder / "versions" / "0001_initial.py").is_file()
    package = importlib.resources.files("shardcat.migrations")
    assert package.joinpath("env.py").is_file()


# --- the CLI ----------------------------------------------------------------


def test_cli_upgrade_and_current(catalog_url):
    runner = CliRunner()
    result = runner.invoke(catalog_app, ["current", "--catalog", catalog_url])
    assert result.exit_code == 0, result.output
    assert "none" in result.output.lower()
    result = runner.invoke(catalog_app, ["upgrade", "--catalog", catalog_url])
    assert result.exit_code == 0, result.output
    assert head_revision() in result.output
    result = runner.invoke(catalog_app, ["current", "--catalog", catalog_url])
    assert result.exit_code == 0, result.output
    assert head_revision() in result.output and "head" in result.output
    # Upgrading a catalog at head is a no-op, not an error.
    result = runner.invoke(catalog_app, ["upgrade", "--catalog", catalog_url])
    assert result.exit_code == 0, result.output
    assert check(catalog_url) == []


def test_cli_takes_the_catalog_from_the_environment(sqlite_url, monkeypatch):
    monkeypatch.setenv("SHARDCAT_CATALOG", sqlite_url)
    result = CliRunner().invoke(catalog_app, ["upgrade"])
    assert result.exit_code == 0, result.output
    assert current(sqlite_url) == head_revision()


def test_cli_default_is_shardcat_db_in_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("SHARDCAT_CATALOG", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(catalog_app, ["current"])
    assert result.exit_code == 0, result.output
    assert not (tmp_path / "shardcat.db").exists()  # looking does not create it
    result = CliRunner().invoke(catalog_app, ["upgrade"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "shardcat.db").is_file()


def test_upgrade_from_0001_keeps_the_data_and_resolves_rows_that_share_a_file(
    catalog_url, local_root
):
    """0002 adds one-live-row-per-file; a catalog written before it may hold such pairs."""
    from .helpers import make_dataset, shard_keys

    with Catalog(catalog_url) as cat:
        infos = make_dataset(cat, local_root, 2)
    downgrade(catalog_url, "0001")
    engine = sa.create_engine(catalog_url)
    with engine.begin() as conn:
        # What 0001 allowed: another job's staged row naming a committed shard's file.
        conn.execute(sa.text("INSERT INTO jobs (dataset_id, state) VALUES (1, 'open')"))
        job = conn.execute(sa.text("SELECT max(id) FROM jobs")).scalar_one()
        columns = [c["name"] for c in sa.inspect(conn).get_columns("shards") if c["name"] != "id"]
        picked = ", ".join(columns).replace("job_id", ":job").replace("state", "'staged'")
        conn.execute(
            sa.text(
                f"INSERT INTO shards ({', '.join(columns)}) SELECT {picked} FROM shards "
                "WHERE url = :url"
            ),
            {"job": job, "url": infos[0].path},
        )
        assert conn.execute(sa.text("SELECT count(*) FROM shards")).scalar_one() == 3
    engine.dispose()

    assert upgrade(catalog_url) == ("0001", head_revision())
    assert check(catalog_url) == []
    engine = sa.create_engine(catalog_url)
    with engine.connect() as conn:
        states = conn.execute(
            sa.text("SELECT state, job_id FROM shards WHERE url = :u ORDER BY id"),
            {"u": infos[0].path},
        ).all()
        assert [s for s, _ in states] == ["committed", "deleted"]  # the committed row survives
        indexes = {i["name"] for i in sa.inspect(conn).get_indexes("shards")}
        assert "uq_shards_live_url" in indexes
    engine.dispose()
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).ok
        # The downgrade rewrote the catalog's history; the folder keeps the one written before.
        assert cat.verify("train", history=False).ok
        with pytest.raises(shardcat.errors.DuplicateKeyError, match="already committed"):
            cat.register_shard("train", infos[0])


def test_upgrade_from_0003_makes_each_dataset_one_version(catalog_url, local_root):
    """0005 (versions): a catalog at 0003 keeps its data; each dataset's state becomes one version.

    The 0003 catalog is written by this shardcat and taken down to 0003 (whose
    downgrade keeps only what 0003 can express: the latest version).
    """
    from .helpers import make_dataset, shard_keys

    with Catalog(catalog_url) as cat:
        infos = make_dataset(cat, local_root, 3)  # versions 1, 2, 3
        cat.remove_shard("train", infos[2].path)  # version 4: its records leave
        cat.create_dataset("empty", local_root)
    assert downgrade(catalog_url, "0003") == (head_revision(), "0003")
    engine = sa.create_engine(catalog_url)
    with engine.connect() as conn:
        assert "dataset_versions" not in sa.inspect(conn).get_table_names()
        states = conn.execute(sa.text("SELECT url, state FROM shards ORDER BY id")).all()
        assert [s for _, s in states] == ["committed", "committed", "deleted"]
    engine.dispose()

    assert upgrade(catalog_url) == ("0003", head_revision())
    assert check(catalog_url) == []
    keys = shard_keys(0) + shard_keys(1)
    with Catalog(catalog_url) as cat:
        log = cat.log("train")
        assert [(v.number, v.operation) for v in log] == [(4, "upgrade")]
        assert (log[0].records_added, log[0].total_records) == (len(keys), len(keys))
        assert cat.log("empty") == []
        assert cat.get_many("train", keys).ok
        assert cat.get_many("train", keys, version=4).ok
        assert cat.get_many("train", shard_keys(2)).missing == shard_keys(2)
        with pytest.raises(shardcat.errors.VersionNotFoundError):
            cat.get("train", keys[0], version=3)  # versions before the upgrade were not kept
        # Life goes on: the next commit is version 5, and version 4 still reads the old record.
        assert cat.delete_keys("train", [keys[0]]) == 5
        assert cat.get("train", keys[0], version=4).key == keys[0]
        assert cat.count("train") == len(keys) - 1


def test_upgrade_from_0008_adds_the_tokens_table_and_keeps_the_data(catalog_url, local_root):
    """0009 (api_tokens): a catalog of the release before opens again after an upgrade."""
    from shardcat.serve.tokens import create_token, lookup_token

    from .helpers import make_dataset, shard_keys

    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
    assert downgrade(catalog_url, "0008") == (head_revision(), "0008")
    assert "api_tokens" not in _tables(catalog_url)
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)
    assert upgrade(catalog_url) == ("0008", head_revision())
    assert check(catalog_url) == []
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).ok
        made = create_token(cat, datasets=["train"], expires="1d")
        row = lookup_token(cat, made.token)
        assert row is not None and row.datasets == ("train",) and row.state() == "active"


def test_upgrade_from_0009_admits_folder_groups_and_keeps_the_data(
    catalog_url, local_root, tmp_path
):
    """0010 (kind 'files'): the shards table keeps its rows, views and indexes; a group registers."""
    from shardcat.format.folder import FolderSample, folder_info, group_url

    from .helpers import make_dataset, shard_keys

    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
    assert downgrade(catalog_url, "0009") == (head_revision(), "0009")
    group = folder_info(group_url(str(tmp_path), 1, 0), [FolderSample("a", (("txt", 1, 0),))])
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)
    assert upgrade(catalog_url) == ("0009", head_revision())
    assert check(catalog_url) == []
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).ok
        cat.create_dataset("folder", str(tmp_path))
        assert cat.register_shard("folder", group).kind == "files"
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as conn:  # the views read the rebuilt table
            assert conn.execute(sa.text("SELECT count(*) FROM live_shards")).scalar() == 3
        indexes = {i["name"]: i for i in sa.inspect(engine).get_indexes("shards")}
        live_url = indexes["uq_shards_live_url"]  # one live row per URL, as before
        assert live_url["unique"]
        where = live_url.get("dialect_options", {})
        assert "state" in str(where.get("sqlite_where", where.get("postgresql_where", "")))
    finally:
        engine.dispose()


def test_upgrade_from_0010_admits_mds_and_litdata_shards_and_keeps_the_data(
    catalog_url, local_root, tmp_path
):
    """0011 (kinds 'mds', 'litdata'): every row stays, a folder group's too; both kinds register."""
    import shutil
    from pathlib import Path

    from shardcat.format.folder import FolderSample, folder_info, group_url
    from shardcat.reading.columnar import directory_files, scan_file

    from .helpers import make_dataset, shard_keys

    data = tmp_path / "inplace"  # a copy: registering writes the datasets' history beside it
    shutil.copytree(Path(__file__).parents[1] / "data" / "inplace", data)
    scanned = {}
    for kind in ("mds", "litdata"):
        layout, files = directory_files(kind, str(data / kind), {})
        scanned[kind] = scan_file(files[0], layout, {})
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        cat.create_dataset("folder", str(tmp_path / "folder"))
        folder = group_url(str(tmp_path / "folder"), 1, 0)
        group = folder_info(folder, [FolderSample("a", (("txt", 1, 0),))])
        cat.register_shard("folder", group)
    assert downgrade(catalog_url, "0010") == (head_revision(), "0010")
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)
    engine = sa.create_engine(catalog_url)
    try:
        # The 0010 check refuses the new kinds.
        with engine.connect() as conn, pytest.raises(sa.exc.IntegrityError):
            conn.execute(sa.text("UPDATE shards SET kind = 'mds' WHERE url LIKE '%#files-%'"))
    finally:
        engine.dispose()
    assert upgrade(catalog_url) == ("0010", head_revision())
    assert check(catalog_url) == []
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).ok
        assert [s.kind for s in cat.shards("folder", state=None)] == ["files"]
        for kind, info in scanned.items():
            cat.create_dataset(kind, str(data / kind))
            assert cat.register_shard(kind, info).kind == kind
    assert downgrade(catalog_url, "0010") == (head_revision(), "0010")  # the new kinds' rows go
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as conn:
            kinds = conn.execute(sa.text("SELECT DISTINCT kind FROM shards ORDER BY kind")).all()
            assert [k for (k,) in kinds] == ["files", "native"]
    finally:
        engine.dispose()
    assert upgrade(catalog_url) == ("0010", head_revision())


def test_upgrade_from_0011_adds_groups_and_keeps_the_data(catalog_url, local_root):
    """0012 (column groups): existing records become the base (group 0); a group commits after."""
    from shardcat.catalog.groups import GroupWrite

    from .helpers import make_dataset, shard_keys, write_shard

    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        before = cat.get_many("train", shard_keys(0) + shard_keys(1)).records
    assert downgrade(catalog_url, "0011") == (head_revision(), "0011")
    assert "groups" not in _tables(catalog_url)
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)
    assert upgrade(catalog_url) == ("0011", head_revision())
    assert check(catalog_url) == []
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as conn:
            groups = conn.execute(sa.text("SELECT DISTINCT group_id FROM records")).scalars()
            assert list(groups) == [0]
    finally:
        engine.dispose()
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).records == before
        job = cat.begin_job("train")
        info = write_shard(f"{local_root}/g.shard", shard_keys(0)[:3], make=lambda k: {"g": k})
        cat.register_shard("train", info, job=job)
        cat.commit_job(job, group=GroupWrite("g"))
        assert cat.get("train", shard_keys(0)[1])["g"].decode() == shard_keys(0)[1]
    # Down again: the group's records and shard go, the base reads as before.
    assert downgrade(catalog_url, "0011") == (head_revision(), "0011")
    assert upgrade(catalog_url) == ("0011", head_revision())
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).records == before
        assert [s.url for s in cat.shards("train")] == [
            f"{local_root}/train-000000.shard",
            f"{local_root}/train-000001.shard",
        ]


def test_upgrade_from_0012_names_the_group_of_each_record_in_the_views(catalog_url, local_root):
    """0013: live_records and records_at gain group_id and group_name; the rows stay."""
    from shardcat.catalog.groups import GroupWrite

    from .helpers import make_dataset, shard_keys, write_shard

    key = shard_keys(0)[1]
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        job = cat.begin_job("train")
        info = write_shard(f"{local_root}/g.shard", shard_keys(0)[:3], make=lambda k: {"g": k})
        cat.register_shard("train", info, job=job)
        cat.commit_job(job, group=GroupWrite("captions"))
        merged = cat.get("train", key)
        version = cat.info("train").version
    query = sa.text(
        "SELECT group_id, group_name FROM live_records WHERE key = :k ORDER BY group_id"
    )
    at = sa.text(
        "SELECT version, group_name FROM records_at WHERE key = :k AND group_id <> 0 "
        "ORDER BY version"
    )

    def columns(view: str) -> list[str]:
        engine = sa.create_engine(catalog_url)
        try:
            with engine.connect() as conn:
                return [c["name"] for c in sa.inspect(conn).get_columns(view)]
        finally:
            engine.dispose()

    assert downgrade(catalog_url, "0012") == (head_revision(), "0012")
    assert "group_id" not in columns("live_records")
    assert "group_name" not in columns("records_at")
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)
    assert upgrade(catalog_url) == ("0012", head_revision())
    assert check(catalog_url) == []
    # 0019 adds key_sorted after them.
    assert columns("live_records")[-3:] == ["group_id", "group_name", "key_sorted"]
    assert columns("records_at")[-3:] == ["group_id", "group_name", "key_sorted"]
    engine = sa.create_engine(catalog_url)
    try:
        with engine.connect() as conn:
            gid = conn.execute(sa.text("SELECT id FROM groups WHERE name = 'captions'")).scalar()
            assert conn.execute(query, {"k": key}).all() == [(0, None), (gid, "captions")]
            assert conn.execute(at, {"k": key}).all() == [(version, "captions")]
    finally:
        engine.dispose()
    with Catalog(catalog_url) as cat:
        assert cat.get("train", key) == merged


def _key_index_sql(url: str) -> str:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                sql = "SELECT sql FROM sqlite_master WHERE name = 'ix_records_dataset_id_key'"
            else:
                sql = (
                    "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_records_dataset_id_key'"
                    " AND schemaname = current_schema()"
                )
            return str(conn.execute(sa.text(sql)).scalar_one())
    finally:
        engine.dispose()


def test_upgrade_from_0013_admits_hash_only_datasets_and_keeps_the_data(catalog_url, local_root):
    """0014: datasets.key_mode, records.key nullable, a partial key index; the rows stay."""
    from .helpers import make_dataset, shard_keys, write_shard

    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        before = cat.get_many("train", shard_keys(0) + shard_keys(1)).records
        version = cat.info("train").version
    assert downgrade(catalog_url, "0013") == (head_revision(), "0013")
    assert "IS NOT NULL" not in _key_index_sql(catalog_url)
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)
    assert upgrade(catalog_url) == ("0013", head_revision())
    assert check(catalog_url) == []
    assert "key IS NOT NULL" in _key_index_sql(catalog_url)
    with Catalog(catalog_url) as cat:
        # Every record, its key text, the views and the versions are as they were.
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).records == before
        assert list(cat.keys("train")) == sorted(shard_keys(0) + shard_keys(1))
        assert cat.info("train").keys == "text"
        assert cat.info("train").version == version
        assert cat.get("train", shard_keys(0)[0], version=1).key == shard_keys(0)[0]
        with cat.engine.connect() as conn:
            live = conn.execute(sa.text("SELECT count(*) FROM live_records")).scalar()
            assert live == 2 * len(shard_keys(0))
        # A hash-only dataset beside it, after the upgrade.
        cat.create_dataset("h", local_root, keys="hash")
        cat.register_shard("h", write_shard(f"{local_root}/h.shard", shard_keys(7)))
        assert cat.get("h", shard_keys(7)[3]).key == shard_keys(7)[3]
    # Down again is refused while records without key text exist, and works once they are gone.
    with pytest.raises(RuntimeError, match="delete those datasets"):
        downgrade(catalog_url, "0013")
    with Catalog(catalog_url) as cat:
        cat.delete_dataset("h")
    assert downgrade(catalog_url, "0013") == (head_revision(), "0013")
    assert upgrade(catalog_url) == ("0013", head_revision())
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).records == before


def _records_state(url: str, *, mine: bool = True) -> dict[str, Any]:
    """Everything about ``records`` a rebuild must keep: rows, indexes, views, grants, order.

    ``mine``: also what the test's own view ``my_keys`` lists.
    """
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            inspector = sa.inspect(conn)
            names = sorted(c["name"] for c in inspector.get_columns("records"))
            rows = conn.execute(
                sa.text(f"SELECT {', '.join(names)} FROM records ORDER BY shard_id, byte_offset")
            )
            state: dict[str, Any] = {
                "order": [c["name"] for c in inspector.get_columns("records")],
                "rows": [r._asdict() for r in rows],
                "fields": conn.execute(
                    sa.text("SELECT * FROM record_fields ORDER BY shard_id, byte_offset, name")
                ).all(),
                "pk": inspector.get_pk_constraint("records")["constrained_columns"],
                "indexes": sorted(
                    (
                        i["name"],
                        i["column_names"],
                        i.get("dialect_options", {}).get(f"{conn.dialect.name}_where") is not None,
                    )
                    for i in inspector.get_indexes("records")
                ),
            }
            if mine:
                state["mine"] = conn.execute(sa.text("SELECT key FROM my_keys ORDER BY key")).all()
            if conn.dialect.name == "postgresql":
                state["indexes"] = sorted(
                    conn.execute(
                        sa.text(
                            "SELECT indexname, indexdef FROM pg_indexes WHERE "
                            "schemaname = current_schema() AND tablename = 'records'"
                        )
                    ).all()
                )
                state["grants"] = conn.execute(
                    sa.text(
                        "SELECT table_name, grantee, privilege_type, is_grantable FROM "
                        "information_schema.role_table_grants WHERE grantee IN ('PUBLIC', "
                        "'pg_monitor') AND "
                        "table_schema = current_schema() ORDER BY 1, 2, 3"
                    )
                ).all()
                state.update(_records_settings(conn))
                state["analyzed"] = (
                    conn.execute(
                        sa.text(
                            "SELECT count(*) FROM pg_stats WHERE schemaname = current_schema() "
                            "AND tablename = 'records'"
                        )
                    ).scalar()
                    > 0
                )
            return state
    finally:
        engine.dispose()


# Column grants and comments of every relation in the catalog's schema (records, its indexes
# and constraints, the views); records' per-column storage, options and compression, and its
# replica identity: what a rebuild must set again by itself.
_RECORDS_SETTINGS = {
    "column_grants": "SELECT c.relname, a.attname, a.attacl::text FROM pg_attribute a "
    "JOIN pg_class c ON c.oid = a.attrelid WHERE a.attacl IS NOT NULL "
    "AND c.relnamespace = current_schema()::regnamespace ORDER BY 1, 2",
    "comments": "SELECT c.relname, a.attname, d.description FROM pg_description d "
    "JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid "
    "LEFT JOIN pg_attribute a ON a.attrelid = d.objoid AND a.attnum = d.objsubid "
    "WHERE c.relnamespace = current_schema()::regnamespace "
    "UNION ALL SELECT k.conname, NULL, d.description FROM pg_description d "
    "JOIN pg_constraint k ON d.classoid = 'pg_constraint'::regclass AND k.oid = d.objoid "
    "WHERE k.connamespace = current_schema()::regnamespace ORDER BY 1, 2 NULLS FIRST, 3",
    # The attribute options one can set (some builds add a stamp of their own, new each table).
    "column_storage": "SELECT attname, attstorage, attcompression, ARRAY(SELECT o FROM "
    "unnest(attoptions) o WHERE o LIKE 'n\\_distinct%') FROM pg_attribute "
    "WHERE attrelid = 'records'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY 1",
    "replica_identity": "SELECT c.relreplident, (SELECT x.relname FROM pg_index i "
    "JOIN pg_class x ON x.oid = i.indexrelid WHERE i.indrelid = c.oid AND i.indisreplident) "
    "FROM pg_class c WHERE c.oid = 'records'::regclass",
}


def _records_settings(conn: sa.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: [
            tuple(row) for row in conn.execution_options(no_parameters=True).exec_driver_sql(sql)
        ]
        for name, sql in _RECORDS_SETTINGS.items()
    }


def test_upgrade_from_0015_reorders_records_on_postgresql_and_keeps_everything(
    catalog_url, local_root
):
    """0016: PostgreSQL's records rebuilt in the lean column order; rows and lookups the same."""
    from .helpers import fill_with_history, shard_keys, write_shard

    with Catalog(catalog_url) as cat:
        kept = fill_with_history(cat, local_root)
        keys = shard_keys(0) + shard_keys(1)
        before = cat.get_many("train", keys).records
        hashed = cat.get_many("h", shard_keys(7)).records
        labelled = sorted(k for ks in cat.select("train", "label = 1").keys.values() for k in ks)
        assert len(labelled) == len(shard_keys(0)) // 3
        version = cat.info("train").version
    # 0016's own schema: the later revisions' columns and indexes are theirs to test.
    assert downgrade(catalog_url, "0016") == (head_revision(), "0016")
    engine = sa.create_engine(catalog_url)
    try:
        with engine.begin() as conn:
            # A view of your own over a shardcat view (rebuilt after it), with a '%' in its
            # text, and a grant: both must survive the rebuild.
            conn.execute(
                sa.text(
                    "CREATE VIEW my_keys AS SELECT key FROM live_records "
                    "WHERE group_id = 0 AND key LIKE 'img/000/%'"
                )
            )
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("GRANT SELECT ON records, live_records, my_keys TO PUBLIC"))
                # A role that exists in every cluster (no role to create and drop).
                conn.execute(sa.text("GRANT SELECT ON records TO pg_monitor WITH GRANT OPTION"))
                for statement in (
                    "GRANT SELECT (key, key_hash) ON records TO pg_read_all_stats "
                    "WITH GRANT OPTION",
                    "GRANT UPDATE (group_id) ON records TO PUBLIC",
                    "GRANT SELECT (key) ON live_records TO pg_read_all_stats",
                    "COMMENT ON TABLE records IS 'one row per record'",
                    "COMMENT ON COLUMN records.key IS 'its key''s text'",
                    "COMMENT ON INDEX pk_records IS 'the key index'",
                    "COMMENT ON CONSTRAINT pk_records ON records IS 'the key'",
                    "COMMENT ON VIEW live_records IS 'live rows'",
                    "COMMENT ON COLUMN live_records.key IS 'a live key'",
                    "COMMENT ON VIEW my_keys IS 'mine'",
                    "ALTER TABLE records ALTER COLUMN spans SET STORAGE MAIN",
                    "ALTER TABLE records ALTER COLUMN key_hash SET (n_distinct = -1)",
                    "ALTER TABLE records ALTER COLUMN key SET COMPRESSION pglz",
                    "ALTER TABLE records REPLICA IDENTITY USING INDEX pk_records",
                ):
                    conn.exec_driver_sql(statement)
    finally:
        engine.dispose()
    state = _records_state(catalog_url)
    lean = list(migrate_0016().LEAN)
    assert state["order"] == lean
    assert any(r["removed_version"] is not None for r in state["rows"])
    assert any(r["key"] is None for r in state["rows"])  # the hash-only dataset's
    assert any(r["group_id"] != 0 for r in state["rows"])
    assert len(state["mine"]) == len(shard_keys(0))

    assert downgrade(catalog_url, "0015") == ("0016", "0015")
    down = _records_state(catalog_url)
    pg = catalog_url.startswith("postgresql")
    # PostgreSQL rebuilds 0015's order; SQLite, where the order costs nothing, is left alone.
    assert down["order"] == (list(migrate_0016().PREVIOUS) if pg else lean)
    # The rebuilt table was analyzed (lookups are planned from statistics).
    state.pop("analyzed", None)
    assert down.pop("analyzed", pg) is pg
    assert {k: v for k, v in down.items() if k != "order"} == {
        k: v for k, v in state.items() if k != "order"
    }
    with pytest.raises(SchemaVersionError, match="shardcat catalog upgrade"):
        Catalog(catalog_url)

    assert upgrade(catalog_url, "0016") == ("0015", "0016")
    up = _records_state(catalog_url)
    assert up.pop("analyzed", pg) is pg
    assert up == state
    assert upgrade(catalog_url) == ("0016", head_revision())
    # The models declare no comments: the test's own on records are all the check sees.
    drift = [d[0] if isinstance(d, list) else d for d in check(catalog_url)]
    assert sorted((d[0], d[1].name if d[0] == "remove_table_comment" else d[3]) for d in drift) == (
        [("modify_comment", "key"), ("remove_table_comment", "records")] if pg else []
    )
    if pg:
        assert [tuple(g) for g in state["grants"]] == [
            ("live_records", "PUBLIC", "SELECT", "NO"),
            ("my_keys", "PUBLIC", "SELECT", "NO"),
            ("records", "PUBLIC", "SELECT", "NO"),
            ("records", "pg_monitor", "SELECT", "YES"),
        ]
        grants = {(t, c): acl for t, c, acl in state["column_grants"]}
        assert grants.keys() == {
            ("live_records", "key"),
            ("records", "group_id"),
            ("records", "key"),
            ("records", "key_hash"),
        }
        assert "pg_read_all_stats=r*/" in grants["records", "key"]
        assert grants["records", "group_id"].startswith("{=w/")
        assert state["comments"] == [
            ("live_records", None, "live rows"),
            ("live_records", "key", "a live key"),
            ("my_keys", None, "mine"),
            ("pk_records", None, "the key"),  # the constraint's
            ("pk_records", None, "the key index"),
            ("records", None, "one row per record"),
            ("records", "key", "its key's text"),
        ]
        storage = {row[0]: row[1:] for row in state["column_storage"]}
        assert storage["spans"][0] == "m"
        assert storage["key"][1] == "p"
        assert storage["key_hash"][2] == ["n_distinct=-1"]
        assert state["replica_identity"] == [("i", "pk_records")]
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", keys).records == before
        assert cat.get_many("h", shard_keys(7)).records == hashed
        assert cat.get("h", shard_keys(7)[3]).key == shard_keys(7)[3]
        assert cat.get("train", shard_keys(0)[1])["g"].decode() == shard_keys(0)[1]
        assert cat.get("train", shard_keys(1)[5], version=kept).key == shard_keys(1)[5]
        with pytest.raises(KeyError):
            cat.get("train", shard_keys(1)[5])
        assert sorted(k for ks in cat.select("train", "label = 1").keys.values() for k in ks) == (
            labelled
        )
        assert [k for ks in cat.select("train", "split = 'val'").keys.values() for k in ks] == [
            shard_keys(0)[0]
        ]
        assert list(cat.keys("train", prefix="img/001/")) == [
            k for k in shard_keys(1) if k != shard_keys(1)[5]
        ]
        assert cat.info("train").version == version
        # New records go into the rebuilt table as before.
        cat.register_shard("h", write_shard(f"{local_root}/h/b.shard", shard_keys(8)))
        assert cat.get("h", shard_keys(8)[2]).key == shard_keys(8)[2]


def migrate_0016() -> Any:
    """The 0016 migration module (its column orders: one definition)."""
    import importlib

    return importlib.import_module("shardcat.migrations.versions.0016_lean_record_columns")


def test_0016_refuses_what_it_would_not_rebuild_and_changes_nothing(postgres_url, local_root):
    """What the rebuild would lose: refused, the catalog as it was.

    A column of your own, a materialized view over records, a publication of
    it (a database-wide name: made unique), an INSTEAD OF trigger on a view
    that reads it.
    """
    from .helpers import make_dataset

    with Catalog(postgres_url) as cat:
        make_dataset(cat, local_root, 1)
    before = _records_state(postgres_url, mine=False)
    publication = f"shardcat_test_{uuid.uuid4().hex[:12]}"
    for make, undo, says in (
        (
            "ALTER TABLE records ADD COLUMN note text",
            "ALTER TABLE records DROP COLUMN note",
            "drop the columns added outside",
        ),
        (
            "CREATE MATERIALIZED VIEW counts AS SELECT dataset_id, count(*) FROM records "
            "GROUP BY dataset_id",
            "DROP MATERIALIZED VIEW counts",
            "counts .relkind 'm'. depends on records",
        ),
        (
            f"CREATE PUBLICATION {publication} FOR TABLE records",
            f"DROP PUBLICATION {publication}",
            f"ALTER PUBLICATION {publication} DROP TABLE records",
        ),
        (
            "CREATE FUNCTION no_insert() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RETURN NULL; END$$; CREATE TRIGGER no_insert INSTEAD OF INSERT ON "
            "live_records FOR EACH ROW EXECUTE FUNCTION no_insert()",
            "DROP TRIGGER no_insert ON live_records; DROP FUNCTION no_insert()",
            "the view live_records, which reads records, has triggers",
        ),
    ):
        _execute(postgres_url, make)
        try:
            with pytest.raises(RuntimeError, match=says):
                downgrade(postgres_url, "0015")
            assert current(postgres_url) == head_revision()
        finally:
            _execute(postgres_url, undo)
        assert _records_state(postgres_url, mine=False) == before


def _execute(url: str, sql: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            # As written, no parameters: it may hold several statements.
            conn.execution_options(no_parameters=True).exec_driver_sql(sql)
    finally:
        engine.dispose()
