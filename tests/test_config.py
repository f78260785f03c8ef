"""shardcat.config: one table of settings, the same in docs/CONFIG.md and in the code that uses them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import shardcat.config
from shardcat._units import parse_size
from shardcat.storage import resolve_remote_max_gap

ROOT = Path(__file__).resolve().parents[1]


def _documented() -> str:
    text = (ROOT / "docs" / "CONFIG.md").read_text()
    start = text.index("<!-- settings:")
    end = text.index("<!-- end of settings -->")
    return text[text.index("\n", start) + 1 : end]


def test_docs_config_md_holds_every_setting_as_the_code_declares_it():
    tables = re.findall(r"^\|.*\|$(?:\n^\|.*\|$)*", _documented(), re.M)
    assert tables == [
        shardcat.config.markdown_table("user"),
        shardcat.config.markdown_table("implementation"),
    ], "regenerate the tables of docs/CONFIG.md with `python -m shardcat.config`"


def test_the_defaults_are_those_of_the_code_that_uses_them():
    from shardcat.catalog import DEFAULT_URL
    from shardcat.catalog.selection import FilterLimits
    from shardcat.cli.common import DEFAULT_CATALOG
    from shardcat.format.codecs import DEFAULT_MAX_DECOMPRESSED_BYTES
    from shardcat.storage import objput

    d = shardcat.config.defaults()
    assert d["catalog"] == DEFAULT_URL == DEFAULT_CATALOG
    limits = FilterLimits()
    assert float(d["where_timeout"]) == limits.timeout
    assert int(d["where_max_rows"]) == limits.max_rows
    assert parse_size(d["where_max_bytes"]) == limits.max_bytes
    assert parse_size(d["max_decompressed_bytes"]) == DEFAULT_MAX_DECOMPRESSED_BYTES
    assert d["remote_max_gap"] == "auto"
    assert resolve_remote_max_gap() is None  # auto: derived per store
    assert parse_size(d["s3_upload_memory"]) == objput._DEFAULT_MEMORY
    assert {s.env for s in shardcat.config.SETTINGS} >= {
        "SHARDCAT_CATALOG",
        "SHARDCAT_SQL_ROLE",
        "SHARDCAT_WHERE_TIMEOUT",
        "SHARDCAT_WHERE_MAX_ROWS",
        "SHARDCAT_WHERE_MAX_BYTES",
        "SHARDCAT_MAX_DECOMPRESSED_BYTES",
        "SHARDCAT_REMOTE_MAX_GAP",
        "SHARDCAT_S3_TRANSPORT",
        "SHARDCAT_S3_UPLOAD_MEMORY",
        "SHARDCAT_WRITE_BEHIND",
        "SHARDCAT_RECORD_CODEC",
        "SHARDCAT_POINT_LOOKUP",
        "SHARDCAT_TAR_WALKER",
    }


def test_set_is_a_context_manager_and_none_is_the_default():
    assert shardcat.config.get("where_timeout") == 300.0
    with shardcat.config.set(where_timeout=5, **{"s3-transport": "fsspec"}):
        assert shardcat.config.get("where_timeout") == 5
        assert shardcat.config.get("s3_transport") == "fsspec"
        with shardcat.config.set(where_timeout=None):
            assert shardcat.config.get("where_timeout") == 300.0
        assert shardcat.config.get("where_timeout") == 5
    assert shardcat.config.get("where_timeout") == 300.0
    assert shardcat.config.get("s3_transport") == "auto"
    with pytest.raises(KeyError, match="no shardcat setting 'where_timout'"):
        shardcat.config.set(where_timout=5)
    with pytest.raises(KeyError, match="no shardcat setting"):
        shardcat.config.get("nope")


def test_the_file_then_the_environment(tmp_path):
    file = tmp_path / "shardcat.toml"
    file.write_text(
        'catalog = "sqlite:///file.db"\nwhere-timeout = 9\n[storage_options]\nanon = true\n'
    )
    env = {
        "SHARDCAT_CONFIG": str(file),
        "SHARDCAT_CATALOG": "sqlite:///env.db",
        "SHARDCAT_SQL_ROLE": " ",
    }
    assert shardcat.config.collect(env=env) == {
        "catalog": "sqlite:///env.db",
        "where_timeout": 9,
        "storage_options": {"anon": True},
    }
    assert shardcat.config.collect(file, env={}) == shardcat.config.read_file(file)
    (tmp_path / "typo.toml").write_text('catalgo = "x"\n')
    with pytest.raises(ValueError, match="unknown key"):
        shardcat.config.collect(tmp_path / "typo.toml", env={})
    with pytest.raises(FileNotFoundError, match="no config file"):
        shardcat.config.collect(tmp_path / "missing.toml", env={})


def test_the_environment_is_read_when_asked_not_when_imported(tmp_path):
    script = (
        "import os, shardcat, shardcat.catalog, shardcat.storage, shardcat.cli.app\n"
        "import shardcat.config as c\n"
        "os.environ['SHARDCAT_WHERE_MAX_ROWS'] = '7'\n"
        "c.refresh()\n"
        "assert c.get('where_max_rows') == '7', c.get('where_max_rows')\n"
        "os.environ['SHARDCAT_WHERE_MAX_ROWS'] = '8'\n"
        "assert c.get('where_max_rows') == '7'\n"
        "c.refresh()\n"
        "assert c.get('where_max_rows') == '8'\n"
        "from shardcat.catalog.selection import FilterLimits\n"
        "assert FilterLimits.from_env().max_rows == 8\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
    lazy = "import sys, shardcat.cli.app, shardcat.config; assert 'donfig' not in sys.modules"
    subprocess.run([sys.executable, "-c", lazy], env=env, check=True, timeout=120)


def test_max_open_shards_is_one_setting_resolved_once(monkeypatch):
    import resource

    from shardcat import Catalog
    from shardcat.storage import resolve_max_open
    from shardcat.storage.cache import MAX_OPEN_AUTO

    low, high = MAX_OPEN_AUTO
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for soft, auto in ((1024, 512), (100, low), (20_000, high), (resource.RLIM_INFINITY, high)):
        # auto: half the process's limit of open files, within MAX_OPEN_AUTO.
        monkeypatch.setattr(resource, "getrlimit", lambda _which, s=soft: (s, hard))
        assert resolve_max_open("auto") == resolve_max_open(" AUTO ") == auto
    monkeypatch.undo()
    assert resolve_max_open(7) == resolve_max_open("7") == 7
    with shardcat.config.set(max_open_shards="12"):
        assert resolve_max_open() == 12
        with Catalog("sqlite://") as cat:
            assert cat.max_open_shards == 12  # a catalog takes the setting when not told
            assert cat.handle().max_open_shards == 12  # and its workers the same number
        with Catalog("sqlite://", max_open_shards=3) as cat:
            assert cat.max_open_shards == 3  # the argument wins
    for bad in (0, -1, "many", 2.5, True):
        with pytest.raises(shardcat.errors.SettingError, match="max_open_shards"):
            resolve_max_open(bad)
