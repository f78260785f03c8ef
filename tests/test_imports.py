"""Layers load only what they need: the format without fsspec, the package root without any backend.

Each import runs in a fresh interpreter (this one has loaded everything already).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

HEAVY = ("fsspec", "sqlalchemy", "alembic", "dask", "distributed")


def loaded_after(statement: str) -> list[str]:
    """Top-level packages of HEAVY that ``statement`` loads in a fresh interpreter."""
    code = (
        f"import json, sys\n{statement}\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    return list(json.loads(p.stdout))


@pytest.mark.parametrize(
    "statement",
    [
        "import shardcat.format",
        "import shardcat",
        "from shardcat import Entry, Record, ShardInfo, __version__",
        "from shardcat.format import ShardReader, ShardWriter",
    ],
)
def test_format_and_root_load_no_storage_sql_or_dask(statement):
    assert loaded_after(statement) == []


def test_lazy_names_load_their_layer_on_first_use():
    # fsspec loads with the first URL resolved through it: local files are read with os.pread.
    assert loaded_after("import shardcat; shardcat.ShardWriter") == []
    assert loaded_after("import shardcat; shardcat.storage.resolve('memory://x')") == ["fsspec"]
    # A catalog loads SQLAlchemy with its first unit of work, not with its class.
    assert loaded_after("import shardcat; shardcat.Catalog") == []
    assert "sqlalchemy" in loaded_after("import shardcat; shardcat.Catalog('sqlite://').close()")


def test_lazy_names_are_the_real_objects():
    import shardcat
    import shardcat.format
    import shardcat.reading

    assert shardcat.Catalog is shardcat.reading.Catalog
    assert issubclass(shardcat.ShardReader, shardcat.format.ShardReader)
    assert issubclass(shardcat.ShardWriter, shardcat.format.ShardWriter)
    assert shardcat.__version__ == importlib.metadata.version("shardcat")
    assert set(shardcat.__all__) <= set(dir(shardcat))
    missing = [name for name in shardcat.__all__ if not hasattr(shardcat, name)]
    assert missing == []
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = shardcat.nope


def test_opening_a_catalog_and_looking_up_loads_no_migrations_orm_or_fsspec(tmp_path):
    """A local lookup in a fresh process (the cold first lookup) needs no Alembic, ORM models, fsspec or tar scanning."""
    import shardcat

    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with shardcat.ShardWriter(str(tmp_path / "s-000000.shard")) as w:
        w.add("k1", {"txt": "one"})
    with shardcat.Catalog(url) as cat:
        cat.create_dataset("d", str(tmp_path))
        cat.register_shard("d", w.close())
    code = (
        "import json, sys, shardcat\n"
        f"cat = shardcat.Catalog({url!r})\n"
        "assert cat.get('d', 'k1')['txt'].data == b'one'\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'fsspec')"
        " or m.startswith(('sqlalchemy.orm', 'shardcat.catalog.models', 'shardcat.format.tar')))))"
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == []


def test_the_public_catalog_moved_up_and_the_old_import_says_where():
    with pytest.raises(ImportError, match="from shardcat import Catalog"):
        from shardcat.catalog import Catalog  # noqa: F401
    import shardcat.catalog

    with pytest.raises(ImportError, match="from shardcat import CatalogHandle"):
        _ = shardcat.catalog.CatalogHandle


# What a CLI call of get, ls or count on a SQLite catalog must not load: each is
# a large share of a call's start-up (benchmarks/bench_cli_startup.py): SQLAlchemy
# and Alembic (the lookups' statements are text on sqlite3), numpy (no array is
# read), the crc32c package (the compiled codec checks), obstore's stack and ssl.
_STARTUP_HEAVY = ("sqlalchemy", "alembic", "numpy", "crc32c", "fsspec", "obstore", "ssl", "dask")


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["get", "d", "k1"], ()),
        # Some entries of a record are read and checked by the Python path (crc32c's package).
        (["get", "d", "k1", "--entry", "txt"], ("crc32c",)),
        (["ls"], ()),
        (["count", "d"], ()),
        (["count", "d", "--prefix", "k"], ()),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_cli_reads_of_a_sqlite_catalog_load_no_sql_toolkit_numpy_or_stores(tmp_path, argv, allowed):
    import shardcat

    with shardcat.ShardWriter(str(tmp_path / "s-000000.shard")) as w:
        w.add("k1", {"txt": "one", "json": {"a": 1}})
        w.add("k2", {"txt": "two", "json": {"a": 2}})
    with shardcat.Catalog(f"sqlite:///{tmp_path / 'shardcat.db'}") as cat:
        cat.create_dataset("d", str(tmp_path))
        cat.register_shard("d", w.close())
    code = (
        "import json, sys\n"
        "from shardcat.cli.app import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({_STARTUP_HEAVY!r}))),"
        " file=sys.stderr)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert p.returncode == 0, p.stderr
    loaded = set(json.loads(p.stderr.strip().splitlines()[-1])) - set(allowed)
    assert loaded == set()
    assert p.stdout.strip(), "the command printed nothing"
