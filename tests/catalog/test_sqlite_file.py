"""A SQLite catalog opened without SQLAlchemy: the same file, settings and revision as through it."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import make_url

import shardcat
from shardcat.catalog import session, sqlite_file
from shardcat.catalog.migrate import HEAD_REVISION

# Path text as people write it: letters, digits, separators, dots, spaces, '@', unicode.
_PATHS = st.text(
    alphabet=st.characters(whitelist_categories=("L", "N"), whitelist_characters="/._- @+~,=()[]é"),
    min_size=1,
    max_size=40,
).filter(lambda p: p not in (":memory:",) and not p.startswith("file:"))


@given(path=_PATHS, driver=st.sampled_from(["sqlite", "sqlite+pysqlite"]))
def test_a_plain_url_names_the_file_sqlalchemy_would_open(path, driver):
    url = f"{driver}:///{path}"
    assert sqlite_file.file_path(url) == make_url(url).database


@given(path=_PATHS)
def test_relative_files_become_absolute_naming_the_file_sqlalchemy_would(path):
    url = f"sqlite:///{path}"
    light = sqlite_file.absolute(url)
    assert light == session.absolute_sqlite_url(url)
    parsed = make_url(url)
    # SQLAlchemy would render it percent-escaped; both name the same file.
    rendered = parsed.set(database=os.path.abspath(parsed.database)).render_as_string(
        hide_password=False
    )
    assert make_url(light).database == make_url(rendered).database == os.path.abspath(path)
    assert sqlite_file.file_path(light) == os.path.abspath(path)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///:memory:",
        "sqlite:///file:cat.db?mode=ro&uri=true",
        "sqlite:///cat.db?timeout=3",
        "sqlite:///caf%C3%A9.db",
        "postgresql+psycopg://u:p@h/db",
        "sqlite+aiosqlite:///cat.db",
        "not a url",
    ],
)
def test_everything_else_is_left_to_sqlalchemy(url):
    assert sqlite_file.file_path(url) is None
    assert sqlite_file.absolute(url) is None


_PRAGMAS = (
    "busy_timeout",
    "journal_mode",
    "foreign_keys",
    "synchronous",
    "cache_size",
    "mmap_size",
)


def test_the_lookups_connection_has_the_engines_settings(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with shardcat.Catalog(url, busy_timeout=7) as cat:
        with cat.engine.connect() as conn:
            engine_side = [conn.exec_driver_sql(f"PRAGMA {p}").scalar() for p in _PRAGMAS]
        assert cat.sqlite_file is not None
        own = cat.sqlite_file.connect()
        try:
            own_side = [own.execute(f"PRAGMA {p}").fetchone()[0] for p in _PRAGMAS]
            assert own.isolation_level is None  # autocommit: no read transaction left open
        finally:
            own.close()
    # mmap_size: the sqlite_mmap_size setting (2 GiB), as the linked SQLite's build caps it.
    assert own_side == engine_side == [7000, "wal", 1, 1, -65536, mapped_at_most(2 << 30)]


def mapped_at_most(size: int) -> int:
    """What ``PRAGMA mmap_size = size`` leaves on a connection of the linked SQLite (its cap)."""
    with tempfile.TemporaryDirectory() as folder:  # a file's: in memory nothing is mapped
        conn = sqlite3.connect(os.path.join(folder, "probe.db"))
        try:
            conn.execute(f"PRAGMA mmap_size = {size}")
            (got,) = conn.execute("PRAGMA mmap_size").fetchone()
        finally:
            conn.close()
    return int(got)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", 0), (0, 0), ("64MiB", 64 << 20), ("1048576", 1 << 20), (4096, 4096)],
)
def test_the_memory_map_setting_takes_sizes_and_zero(value, expected):
    with shardcat.config.set(sqlite_mmap_size=value):
        assert sqlite_file.mmap_size() == expected


_NOT_A_SIZE = r"SHARDCAT_SQLITE_MMAP_SIZE=.*2GiB"


@pytest.mark.parametrize("value", ["lots", "-1GiB", -5, True, "\u00b2"])
@pytest.mark.parametrize("existing", [False, True])
def test_a_memory_map_setting_that_is_not_a_size_says_what_to_write(tmp_path, value, existing):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    if existing:  # opened without an engine (at head): still refused when it opens
        shardcat.Catalog(url).close()
    with (
        shardcat.config.set(sqlite_mmap_size=value),
        pytest.raises(shardcat.errors.SettingError, match=_NOT_A_SIZE),
    ):
        shardcat.Catalog(url)


def test_a_memory_map_setting_changed_after_opening_is_named_at_the_next_connection(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with shardcat.Catalog(url) as cat:
        cat.create_dataset("d", str(tmp_path / "d"))
    with shardcat.Catalog(url) as cat:
        # The lookup's connection is made at the first get: the setting's own error then,
        # not a catalog error wrapping it.
        with (
            shardcat.config.set(sqlite_mmap_size="lots"),
            pytest.raises(shardcat.errors.SettingError, match=_NOT_A_SIZE),
        ):
            cat.get("d", "k")
        with pytest.raises(shardcat.errors.KeyNotFoundError):
            cat.get("d", "k")


def test_a_catalog_at_head_opens_without_an_engine_and_makes_one_for_its_first_unit_of_work(
    tmp_path,
):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    shardcat.Catalog(url).close()  # created through SQLAlchemy and Alembic
    assert sqlite_file.stamped_revision(str(tmp_path / "c.db"), 1.0) == HEAD_REVISION
    with shardcat.Catalog(url) as cat:
        assert cat._engine is None
        assert cat.revision == HEAD_REVISION
        assert cat.datasets() == []  # a unit of work: the engine comes now
        assert cat._engine is not None


def test_a_catalog_at_another_revision_goes_through_alembic_and_is_refused(tmp_path):
    path = tmp_path / "c.db"
    shardcat.Catalog(f"sqlite:///{path}").close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '0001'")
    conn.close()
    with pytest.raises(shardcat.errors.SchemaVersionError, match="0001"):
        shardcat.Catalog(f"sqlite:///{path}")


@pytest.mark.parametrize("content", [b"", b"not a database at all" * 100])
def test_an_empty_or_foreign_file_is_left_to_sqlalchemy(tmp_path, content):
    path = tmp_path / "c.db"
    path.write_bytes(content)
    assert sqlite_file.stamped_revision(str(path), 1.0) is None
    if content:
        with pytest.raises(shardcat.CatalogError):
            shardcat.Catalog(f"sqlite:///{path}")
    else:  # an empty file is an empty database: created at head
        with shardcat.Catalog(f"sqlite:///{path}") as cat:
            assert cat.revision == HEAD_REVISION


def test_lookups_opened_without_an_engine_are_closed_with_the_catalog_from_another_thread(
    tmp_path,
):
    with shardcat.ShardWriter(str(tmp_path / "s-000000.shard")) as w:
        w.add("k", {"txt": "v"})
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with shardcat.Catalog(url) as cat:
        cat.create_dataset("d", str(tmp_path))
        cat.register_shard("d", w.close())
    cat = shardcat.Catalog(url)
    got = []
    t = threading.Thread(target=lambda: got.append(cat.get("d", "k")["txt"].data))
    t.start()
    t.join(30)
    assert got == [b"v"]
    assert cat._engine is None
    cat.close()  # closes the other thread's sqlite3 connection (check_same_thread=False)
    with pytest.raises(shardcat.errors.CatalogClosedError):
        cat.get("d", "k")
