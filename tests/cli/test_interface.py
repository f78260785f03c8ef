"""The command line a new user expects: options anywhere, -h, --version, pipes, clean help.

Through the real entry point, each command a process of its own, without a
terminal, as a script or a pipe runs it: forked from one that imported
shardcat once (tests/_forkrun.py), ``--version`` through the installed script. The dataset is written with the
Python API (no Dask: these tests are about the command line).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

import shardcat
from _forkrun import run_one
from shardcat.cli.storage_options import parse_storage_options
from shardcat.reading import Catalog

Result = subprocess.CompletedProcess[str]
KEYS = [f"cam{c}/{i:03d}" for c in (1, 3, 30) for i in range(4)] + ["cam3", "cam4/x"]


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, real: bool = False
) -> Result:
    """Forked from a process that imported shardcat once (tests/_forkrun.py); ``real``:
    through the installed script."""
    full = {k: v for k, v in os.environ.items() if k not in ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG")}
    full.update({"COLUMNS": "100", "NO_COLOR": "1", **(env or {})})
    return run_one(*args, env=full, cwd=cwd, timeout=120, real=real)


def ok(p: Result) -> Result:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def write_dataset(catalog: str, root: Path, name: str = "cams", keys: list[str] = KEYS) -> None:
    root.mkdir(parents=True, exist_ok=True)
    with Catalog(catalog) as cat:
        cat.create_dataset(name, str(root))
        with shardcat.ShardWriter(str(root / f"{name}-000000.shard"), shard_number=0) as w:
            for k in keys:
                w.add(k, {"txt": f"sample {k}"})
        cat.register_shard(name, w.close())


@pytest.fixture(scope="module")
def cams(tmp_path_factory: pytest.TempPathFactory) -> str:
    base = tmp_path_factory.mktemp("cams")
    catalog = f"sqlite:///{base / 'catalog.db'}"
    write_dataset(catalog, base / "shards")
    return catalog


# --- global options before or after the command ---------------------------------------


def test_global_options_work_after_the_command_too(cams):
    before = ok(run("--catalog", cams, "--json", "ls", "cams"))
    after = ok(run("ls", "cams", "--json", "-c", cams))
    assert json.loads(after.stdout) == json.loads(before.stdout)
    got = ok(run("get", "cams", "cam1/000", "-c", cams, "--output", "json"))
    assert json.loads(got.stdout)["entries"]["txt"]["value"] == "sample cam1/000"
    # the catalog sub-app too, after the group or after its command
    for args in (("catalog", "current", "-c", cams), ("catalog", "-c", cams, "current")):
        assert ok(run(*args)).stdout.endswith("(head)\n")


def test_an_option_given_after_the_command_wins(cams, tmp_path):
    elsewhere = f"sqlite:///{tmp_path / 'none.db'}"
    p = run("-c", elsewhere, "count", "cams", "-c", cams)
    assert ok(p).stdout == f"{len(KEYS)}\n"
    p = run("-c", cams, "count", "cams", "-c", elsewhere)
    assert p.returncode == 1 and "no catalog at" in p.stderr


def test_version_and_h_everywhere():
    # through the installed script, as a user runs it: what the forked runs stand for
    assert ok(run("--version", real=True)).stdout == f"shardcat {shardcat.__version__}\n"
    for args in (("-h",), ("ls", "-h"), ("catalog", "-h"), ("catalog", "upgrade", "-h")):
        p = ok(run(*args))
        assert "Usage: shardcat" in p.stdout and "--help" in p.stdout


def test_help_shows_metavars_not_python_types():
    for args in ((), ("get",), ("write",), ("reindex",), ("keys",), ("sql",), ("inspect",)):
        text = ok(run(*args, "--help")).stdout
        for python_ish in ("<bool>", "<str>", "<int>", "<list[str]>", "<path>"):
            assert python_ish not in text, (args, python_ish, text)
        assert not re.search(r"\{[A-Z_]+\}", text), text  # {DATASET}: a required argument
    text = ok(run("get", "--help")).stdout
    assert "shardcat get [OPTIONS] DATASET [KEY]" in text and "KEY=VALUE" in text


def test_help_imports_no_database_storage_or_dask_library():
    """`shardcat --help` must stay fast: the heavy libraries load inside the commands."""
    probe = (
        "import sys\n"
        "from shardcat.cli.app import main\n"
        "for args in (['--help'], ['sql', '--help'], ['reindex', '-h'], ['catalog', '-h']):\n"
        "    try:\n"
        "        main(args)\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, e.code\n"
        "heavy = ('sqlalchemy', 'alembic', 'fsspec', 'dask', 'distributed', 'psycopg', 'numpy')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"


# --- piped output -------------------------------------------------------------------------


def test_piped_output_is_tab_separated_rows_under_a_header(cams):
    p = ok(run("ls", "-c", cams))
    header, row, end = p.stdout.split("\n")
    assert header.split("\t") == ["name", "root", "shards", "records", "bytes", "created"]
    fields = row.split("\t")
    assert fields[0] == "cams" and fields[3] == str(len(KEYS)) and fields[4].isdigit()
    assert end == "" and "┃" not in p.stdout and "│" not in p.stdout
    table = ok(run("ls", "-c", cams, "--output", "table"))
    assert "┃" in table.stdout and "Datasets in" in table.stdout


def test_json_and_output_must_agree(cams):
    p = run("ls", "-c", cams, "--json", "--output", "tsv")
    assert p.returncode == 2 and "--json and --output tsv disagree" in p.stderr
    p = run("ls", "-c", cams, "--output", "yaml")
    assert p.returncode == 2 and "table, tsv, json" in p.stderr


# --- keys and count -------------------------------------------------------------------------


def test_keys_and_count_by_prefix(cams):
    cam3 = sorted(k for k in KEYS if k.startswith("cam3/"))
    assert ok(run("keys", "cams", "--prefix", "cam3/", "-c", cams)).stdout.split() == cam3
    assert ok(run("keys", "cams", "-c", cams)).stdout.split() == sorted(KEYS)
    assert ok(run("keys", "cams", "-n", "2", "-c", cams)).stdout.split() == sorted(KEYS)[:2]
    lines = ok(run("keys", "cams", "-p", "cam3", "--json", "-c", cams)).stdout.splitlines()
    assert [json.loads(x) for x in lines] == sorted(k for k in KEYS if k.startswith("cam3"))
    assert ok(run("count", "cams", "-p", "cam3/", "-c", cams)).stdout == "4\n"
    doc = json.loads(ok(run("count", "cams", "--json", "-c", cams)).stdout)
    assert doc == {"dataset": "cams", "prefix": None, "count": len(KEYS)}


# --- storage options --------------------------------------------------------------------------


def test_storage_option_values_stay_strings_unless_typed():
    got = parse_storage_options(
        [
            "secret=0123",
            "key=true",
            "anon=true",
            "default_block_size=1048576",
            "client_kwargs.region_name=0001",
            "retries:int=5",
            'cfg:json={"a": [1]}',
            'config_kwargs={"retries": {"max_attempts": 2}}',  # a whole table: JSON
        ]
    )
    assert got == {
        "secret": "0123",
        "key": "true",
        "anon": True,
        "default_block_size": 1048576,
        "client_kwargs": {"region_name": "0001"},
        "retries": 5,
        "cfg": {"a": [1]},
        "config_kwargs": {"retries": {"max_attempts": 2}},
    }
    for bad, says in (
        ("client_kwargs=maybe", "type json"),
        ("anon=maybe", "type bool"),
        ("x:complex=1", "unknown type"),
        ("nokey", "KEY=VALUE"),
    ):
        with pytest.raises(typer.BadParameter, match=says) as err:
            parse_storage_options([bad])
        assert "maybe" not in str(err.value)  # a value is never echoed: it may be a secret


# --- errors in the interface's terms ----------------------------------------------------------


def test_a_users_sql_mistake_is_not_a_schema_problem(cams):
    p = run("sql", "SELECT * FROM nosuch", "-c", cams)
    assert p.returncode == 1
    assert p.stderr.strip() == "error: your query failed: no such table: nosuch"
    p = run("sql", "SELECT nosuch FROM records", "-c", cams)
    assert "your query failed: no such column: nosuch" in p.stderr and "upgrade" not in p.stderr


def test_a_catalog_without_the_schema_still_gets_the_upgrade_hint(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    import sqlite3

    sqlite3.connect(tmp_path / "old.db").execute("CREATE TABLE other (x)").connection.commit()
    p = run("sql", "SELECT * FROM records", "-c", url)
    assert p.returncode == 1 and f"run `shardcat catalog upgrade --catalog {url}`" in p.stderr
    assert "shardcat.catalog.upgrade" not in p.stderr  # the Python spelling is for Python


def test_sql_json_says_when_it_is_truncated_and_limit_0_is_everything(cams):
    doc = json.loads(
        ok(run("--json", "sql", "SELECT key FROM records", "--limit", "3", "-c", cams)).stdout
    )
    assert len(doc["rows"]) == 3 and doc["truncated"] is True and doc["limit"] == 3
    doc = json.loads(
        ok(run("--json", "sql", "SELECT key FROM records", "--limit", "0", "-c", cams)).stdout
    )
    assert len(doc["rows"]) == len(KEYS) and doc["truncated"] is False and doc["limit"] is None


def test_dataset_errors_name_the_command_line_fix(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url):
        pass
    p = run("ls", "nope", "-c", url)
    assert p.returncode == 1 and "shardcat write SRC URL -d NAME" in p.stderr
    assert "Catalog.create_dataset" not in p.stderr


def test_unsupported_dialects_say_which_are_supported():
    p = run("sql", "SELECT 1", "-c", "mysql://u:pw@127.0.0.1/x")
    assert p.returncode == 1
    assert "mysql database" in p.stderr and "sqlite" in p.stderr and "postgresql" in p.stderr
    assert "pw" not in p.stderr


def test_python_callers_get_python_terms(tmp_path):
    from shardcat.errors import DatasetExistsError, DatasetNotFoundError

    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        with pytest.raises(DatasetNotFoundError, match=r"Catalog\.create_dataset") as err:
            cat.shards("nope")
        assert "shardcat write" in err.value.render("cli")
        cat.create_dataset("d", str(tmp_path))
        with pytest.raises(DatasetExistsError, match="exist_ok=True") as exists:
            cat.create_dataset("d", str(tmp_path))
        assert "exist_ok" not in exists.value.render("cli")
        assert "shardcat delete d" in exists.value.render("cli")
    hint = DatasetExistsError.APPEND_OR_OVERWRITE
    assert "mode='append'" in hint.python and "--mode append" in hint.cli


# --- reindex: the disaster-recovery command ------------------------------------------------


def test_reindex_rebuilds_a_lost_catalog_from_another_folder(tmp_path):
    data = tmp_path / "data"
    catalog_file = tmp_path / "catalog.db"
    write_dataset(f"sqlite:///{catalog_file}", data / "train", name="train")
    with shardcat.ShardWriter(str(data / "train" / "train-000001.shard"), shard_number=1) as w:
        w.add("late/1", {"txt": "one more"})
    catalog_file.unlink()  # the catalog is lost; the shards are all there is

    second, third = tmp_path / "second", tmp_path / "third"
    second.mkdir()
    third.mkdir()
    url = f"sqlite:///{catalog_file}"
    # relative to `second`, a glob and a brace pattern naming the same shards
    p = ok(run("reindex", "train", "../data/train/*.shard", "-c", url, cwd=second))
    assert "created dataset 'train'" in p.stderr and str(data / "train") in p.stderr
    rows = p.stdout.splitlines()[1:]
    assert [r.split("\t")[0] for r in rows] == [
        str(data / "train" / f"train-{n:06d}.shard") for n in (0, 1)
    ]
    again = ok(
        run("reindex", "train", "../data/train/train-{000000..000001}.shard", "-c", url, cwd=second)
    )
    assert "created" not in again.stderr and again.stdout == p.stdout  # replaced, not doubled

    got = ok(run("get", "train", "cam3/001", "-c", url, "--json", cwd=third))
    assert json.loads(got.stdout)["entries"]["txt"]["value"] == "sample cam3/001"
    assert ok(run("count", "train", "-c", url, cwd=third)).stdout == f"{len(KEYS) + 1}\n"
    ok(run("verify", "train", "-c", url, cwd=third))

    missing = run("reindex", "train", "../data/train/*.nothing", "-c", url, cwd=second)
    assert missing.returncode == 1 and "no file matches" in missing.stderr


def test_reindex_takes_a_folder_and_a_failure_leaves_no_empty_dataset(tmp_path):
    data = tmp_path / "data"
    write_dataset(f"sqlite:///{tmp_path / 'first.db'}", data / "train", name="train")
    (data / "train" / "notes.txt").write_text("not a shard")  # only *.shard files are taken
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    p = ok(run("reindex", "train", str(data / "train"), "-c", url))
    assert [r.split("\t")[0] for r in p.stdout.splitlines()[1:]] == [
        str(data / "train" / "train-000000.shard")
    ]
    assert ok(run("count", "train", "-c", url)).stdout == f"{len(KEYS)}\n"
    # A folder with no shard: says so, and what to pass instead.
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = run("reindex", "other", str(empty), "-c", url)
    assert bad.returncode == 1 and f"folder {empty} holds no *.shard file" in bad.stderr
    assert "glob" in bad.stderr
    # Files that are not shards: the error, and no empty dataset left behind.
    (empty / "x.jpg").write_bytes(b"\xff\xd8 not a shard")
    bad = run("reindex", "other", str(empty / "x.jpg"), "-c", url)
    assert bad.returncode == 1 and "not a shardcat shard" in bad.stderr
    assert "other" not in ok(run("ls", "-c", url)).stdout
    # An existing dataset is never dropped by a failed reindex.
    bad = run("reindex", "train", str(empty / "x.jpg"), "-c", url)
    assert bad.returncode == 1
    assert ok(run("count", "train", "-c", url)).stdout == f"{len(KEYS)}\n"
    # inspect on a folder: what to pass instead.
    folder = run("inspect", str(data / "train"))
    assert folder.returncode == 1 and "is a folder, not a shard file" in folder.stderr


def test_sql_defaults_repeated_for_a_fast_help_agree_with_the_runner():
    from shardcat.catalog import readonly
    from shardcat.cli import sql_cmd

    assert sql_cmd.DEFAULT_TIMEOUT == readonly.DEFAULT_TIMEOUT


def test_a_scheduler_address_nobody_answers_is_a_one_line_error(tmp_path):
    import socket

    # Bound and never listening for the whole test: connections are refused, and no other
    # process (a Dask worker of a parallel test) can take the port meanwhile.
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    port = blocker.getsockname()[1]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("x")
    url = f"sqlite:///{tmp_path / 'c.db'}"
    for args in (
        ("write", str(tmp_path / "src"), str(tmp_path / "out"), "-d", "ds"),
        ("demo", "--out", str(tmp_path / "demo")),
    ):
        p = run(*args, "--scheduler", f"tcp://127.0.0.1:{port}", "-c", url)
        assert p.returncode == 1, p.stderr
        assert p.stderr.startswith(f"error: no Dask scheduler answers at tcp://127.0.0.1:{port}")
        assert "dask scheduler" in p.stderr and "Traceback" not in p.stderr
    from shardcat.errors import SchedulerUnreachableError
    from shardcat.orchestration.scheduler import connect

    with blocker, pytest.raises(SchedulerUnreachableError, match="check the address"):
        connect(f"127.0.0.1:{port}")
