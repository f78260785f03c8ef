"""The dataset commands through the real entry point, each in a process of its own.

A folder of 31 samples is written once per module (``written``), through the
installed ``shardcat`` script, for the commands that only read; tests that
corrupt or delete write a dataset of their own. A ``shardcat`` process pays
~1 s of imports, so the other invocations are forked from one process that
imported shardcat once (tests/_forkrun.py), entering the CLI as the script
does; independent ones run two at a time (:func:`runs`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import shardcat
from _forkrun import Call, completed
from shardcat.reading import Catalog

PNG_HEAD = b"\x89PNG\r\n\x1a\n"
FOLDERS = ("cats", "dogs", "birds/nested")

Result = subprocess.CompletedProcess[Any]


def call(
    *args: str, catalog: str | None = None, input: str = "", env: dict[str, str] | None = None
) -> Call:
    """``shardcat [--catalog URL] ARGS`` as a user runs it, without a terminal."""
    full = {k: v for k, v in os.environ.items() if k not in ("SHARDCAT_CATALOG", "SHARDCAT_CONFIG")}
    full.update({"COLUMNS": "250", "NO_COLOR": "1", **(env or {})})
    glob = [] if catalog is None else ["--catalog", catalog]
    return Call([*glob, *args], full, os.getcwd(), timeout=180, stdin=input.encode())


def runs(
    *calls: tuple[str, ...],
    catalog: str | None = None,
    binary: bool = False,
    real: bool = False,
    **kw: Any,
) -> list[Result]:
    """Several independent invocations, two at a time, forked from a process that imported
    shardcat once (tests/_forkrun.py; ``real``: through the installed script); results in the
    order given."""
    return completed(
        [call(*args, catalog=catalog, **kw) for args in calls], binary=binary, real=real
    )


def run(*args: str, **kw: Any) -> Result:
    return runs(args, **kw)[0]


def ok(p: Result) -> Result:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p


def make_folder(root: Path, per_folder: int) -> dict[str, dict[str, bytes]]:
    """Samples as files: .png (every byte value), .json and .txt, in sub-folders; plus noise."""
    samples: dict[str, dict[str, bytes]] = {}
    for f, folder in enumerate(FOLDERS):
        for i in range(per_folder):
            samples[f"{folder}/img{i:03d}"] = {
                "png": PNG_HEAD + bytes(range(256)) + bytes([f, i]) * (20 + i),
                "json": json.dumps({"label": i, "folder": folder}).encode(),
                "txt": f"a photo of {folder} number {i}\n".encode(),
            }
    samples["misc/x"] = {"seg.png": PNG_HEAD + b"mask", "txt": b"[bold]not markup[/bold]\n"}
    for key, entries in samples.items():
        for entry, data in entries.items():
            path = root / f"{key}.{entry}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    (root / ".DS_Store").write_bytes(b"hidden")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "y.txt").write_bytes(b"hidden")
    (root / "README").write_bytes(b"no extension")
    return samples


def write(src: Path, url: str, catalog: str, real: bool = False) -> Result:
    opts = ("--dataset", "pics", "--workers", "1", "--shard-size", "3KB", "--skip-unmatched")
    return run("write", str(src), url, *opts, catalog=catalog, real=real)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("written")
    samples = make_folder(base / "src", per_folder=10)
    catalog = f"sqlite:///{base / 'catalog.db'}"
    # through the installed script, as a user runs it: what the forked runs stand for
    p = ok(write(base / "src", str(base / "shards"), catalog, real=True))
    return {
        "src": base / "src",
        "root": base / "shards",
        "catalog": catalog,
        "samples": samples,
        "write": p,
    }


# --- write ------------------------------------------------------------------


def test_write_packs_the_folder_by_stem_and_registers_every_sample(written):
    p, samples = written["write"], written["samples"]
    assert "committed 31 records" in p.stdout
    # No extension, so no entry name: skipped on request, and counted.
    assert "1 unmatched files skipped, 2 hidden files skipped" in p.stdout
    assert "skipping 1 files without an entry name (skip_unmatched): README" in p.stderr
    assert "writing" in p.stderr and "Traceback" not in p.stderr  # the progress bar, on stderr
    shards = sorted(written["root"].glob("pics-*.shard"))
    assert len(shards) >= 3
    assert sum(len(shardcat.ShardReader(s)) for s in shards) == len(samples)
    with Catalog(written["catalog"]) as cat:
        record = cat.get("pics", "birds/nested/img007")
        assert record["png"].data == samples["birds/nested/img007"]["png"]
        assert record["png"].content_type == "image/png"
        assert record["json"].decode() == {"label": 7, "folder": "birds/nested"}
        assert set(cat.get("pics", "misc/x").entries) == {"seg.png", "txt"}
        hidden = cat.get_many("pics", [".DS_Store", ".hidden/y", "README"])
        assert len(hidden.missing) == 3


def test_write_refuses_unmatched_files_and_empty_sources_before_starting_a_cluster(
    written, tmp_path
):
    (tmp_path / "empty").mkdir()
    unmatched, empty, nowhere = runs(
        ("write", str(written["src"]), str(tmp_path / "a"), "-d", "a"),
        ("write", str(tmp_path / "empty"), str(tmp_path / "b"), "-d", "b"),
        ("--json", "write", str(tmp_path / "nope/*.jpg"), str(tmp_path / "c"), "-d", "c"),
        catalog=written["catalog"],
    )
    assert unmatched.returncode == 1
    assert "1 files under" in unmatched.stderr and ": README; pack them" in unmatched.stderr
    assert "--no-ext-entry NAME" in unmatched.stderr and "--skip-unmatched" in unmatched.stderr
    assert empty.returncode == 1 and "nothing to pack at" in empty.stderr
    assert nowhere.returncode == 1 and "nothing to pack at" in nowhere.stderr
    assert nowhere.stdout == ""
    assert not any((tmp_path / d).exists() for d in "abc")
    with Catalog(written["catalog"]) as cat:
        assert [d.name for d in cat.datasets()] == ["pics"]  # nothing was created


def test_write_refuses_an_existing_dataset_and_conflicting_options(written, tmp_path):
    again, both = runs(
        ("--json", "write", str(written["src"]), str(written["root"]), "-d", "pics", "--skip-unmatched"),
        ("write", str(written["src"]), str(tmp_path), "-d", "x", "--workers", "1", "--scheduler", "tcp://h:1"),
        catalog=written["catalog"],
    )  # fmt: skip
    assert again.returncode == 1 and again.stdout == ""
    assert "already has records" in again.stderr and "Traceback" not in again.stderr
    assert "--mode append" in again.stderr and "mode='append'" not in again.stderr
    assert both.returncode == 2 and "not both" in both.stderr


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_append_refuses_a_misspelt_dataset_and_another_folder(written, tmp_path, kind, request):
    """What a user met in their first week: both were accepted silently, before."""
    if kind == "sqlite":
        catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        catalog = request.getfixturevalue("postgres_url")
    src, root = str(written["src"]), str(tmp_path / "pics")
    ok(run("write", src, root, "-d", "pics", "--skip-unmatched", "--no-progress", catalog=catalog))
    misspelt, elsewhere = runs(
        ("write", src, root, "-d", "pic", "--mode", "append", "--skip-unmatched"),
        ("write", src, str(tmp_path / "other"), "-d", "pics", "--mode", "append", "--skip-unmatched"),
        catalog=catalog,
    )  # fmt: skip
    assert misspelt.returncode == 1 and "Traceback" not in misspelt.stderr
    assert "cannot append: no dataset named 'pic'" in misspelt.stderr
    assert "known datasets: 'pics'" in misspelt.stderr and "--mode create" in misspelt.stderr
    assert elsewhere.returncode == 1 and "one dataset lives in one folder" in elsewhere.stderr
    assert f"shardcat copy pics {tmp_path / 'other'} --move" in elsewhere.stderr
    assert not (tmp_path / "other").exists()
    with Catalog(catalog) as cat:
        assert [d.name for d in cat.datasets()] == ["pics"]


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_failed_first_write_leaves_no_dataset_and_the_rerun_picks_the_folder(
    written, tmp_path, kind, request, s3
):
    """A first write into a bucket that does not exist, then into the right one."""
    if kind == "sqlite":
        catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        catalog = request.getfixturevalue("postgres_url")
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": s3["endpoint"],  # every s3:// URL goes to moto
    }
    args = ("write", str(written["src"]))
    opts = ("-d", "pics", "--skip-unmatched", "--workers", "1", "--no-progress")
    wrong = run(*args, "s3://no-such-bucket-shardcat/x", *opts, catalog=catalog, env=env)
    assert wrong.returncode == 1 and "no-such-bucket-shardcat" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    with Catalog(catalog) as cat:
        assert cat.datasets() == []
    right = f"{s3['url']}/pics"
    ok(run(*args, right, *opts, catalog=catalog, env=env))
    with Catalog(catalog) as cat:
        assert [(d.name, d.root_url) for d in cat.datasets()] == [("pics", right)]


# --- ls and stats -----------------------------------------------------------


def test_ls_lists_datasets_then_a_datasets_shards(written):
    text, shards, as_json, all_json = runs(
        ("ls",), ("ls", "pics"), ("--json", "ls"), ("--json", "ls", "pics", "--all"),
        catalog=written["catalog"],
    )  # fmt: skip
    assert "pics" in ok(text).stdout and str(written["root"]) in text.stdout and "31" in text.stdout
    assert "pics-j1-000000-000.shard" in ok(shards).stdout and "committed" in shards.stdout
    datasets = json.loads(ok(as_json).stdout)
    assert datasets[0]["name"] == "pics" and datasets[0]["records"] == 31
    rows = json.loads(ok(all_json).stdout)
    assert sum(r["records"] for r in rows) == 31 and {r["state"] for r in rows} == {"committed"}
    assert sum(r["bytes"] for r in rows) == datasets[0]["bytes"]


def test_stats_counts_entry_kinds_and_shard_sizes(written):
    as_json, text = runs(
        ("--json", "stats", "pics"),
        ("stats", "pics", "--output", "table"),
        catalog=written["catalog"],
    )
    doc = json.loads(ok(as_json).stdout)
    assert doc["records"] == 31 and doc["shards"] >= 3
    kinds = {k["name"]: k for k in doc["entry_kinds"]}
    assert {n: k["records"] for n, k in kinds.items()} == {
        "json": 30,
        "png": 30,
        "seg.png": 1,
        "txt": 31,
    }
    assert kinds["png"]["content_type"] == "image/png"
    sizes = doc["shard_bytes"]
    assert sizes["min"] <= sizes["median"] <= sizes["max"] and doc["payload_bytes"] < doc["bytes"]
    assert "Entry kinds" in ok(text).stdout and "seg.png" in text.stdout and "median" in text.stdout


# --- get ----------------------------------------------------------------------


def test_get_prints_a_sample_decoding_text_and_json(written):
    text, markup, as_json = runs(
        ("get", "pics", "cats/img003"),
        ("get", "pics", "misc/x"),
        ("--json", "get", "pics", "cats/img003"),
        catalog=written["catalog"],
    )
    assert "a photo of cats number 3" in ok(text).stdout and '"label": 3' in text.stdout
    assert f"<{len(written['samples']['cats/img003']['png'])} bytes image/png>" in text.stdout
    assert "[bold]not markup[/bold]" in ok(markup).stdout  # data is never rich markup
    doc = json.loads(ok(as_json).stdout)
    assert doc["key"] == "cats/img003"
    assert doc["entries"]["json"]["value"] == {"label": 3, "folder": "cats"}
    assert "value" not in doc["entries"]["png"]
    assert doc["entries"]["png"]["content_type"] == "image/png"


def test_get_entry_writes_raw_bytes_to_stdout(written):
    png, txt, absent = runs(
        ("get", "pics", "dogs/img005", "--entry", "png"),
        ("get", "pics", "dogs/img005", "-e", "txt"),
        ("get", "pics", "dogs/img005", "-e", "jpg"),
        catalog=written["catalog"],
        binary=True,
    )
    assert ok(png).stdout == written["samples"]["dogs/img005"]["png"]  # all 256 byte values
    assert ok(txt).stdout == b"a photo of dogs number 5\n"
    assert absent.returncode == 1 and b"has no entry 'jpg'" in absent.stderr
    assert b"json, png, txt" in absent.stderr


def test_get_saves_entries_as_files_under_the_key(written, tmp_path):
    out, only = tmp_path / "out", tmp_path / "only"
    for p in runs(
        ("get", "pics", "birds/nested/img002", "-o", str(out)),
        ("get", "pics", "misc/x", "-o", str(only), "-e", "seg.png"),
        catalog=written["catalog"],
    ):
        ok(p)
    for entry, data in written["samples"]["birds/nested/img002"].items():
        assert (out / "birds" / "nested" / f"img002.{entry}").read_bytes() == data
    assert [p.name for p in only.rglob("*") if p.is_file()] == ["x.seg.png"]


def test_get_keys_from_a_file_saves_the_found_and_exits_1_for_the_missing(written, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("cats/img001\nno/such/key\n\ndogs/img009\r\nmisc/x\n")
    out = tmp_path / "many"
    p = run("get", "pics", "--keys-from", str(keys), "-o", str(out), catalog=written["catalog"])
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "1 key not found" in p.stderr and "no/such/key" in p.stderr
    assert len([f for f in out.rglob("*") if f.is_file()]) == 3 + 3 + 2
    assert (out / "dogs" / "img009.txt").read_bytes() == b"a photo of dogs number 9\n"
    stdin = run(
        "--json",
        "get",
        "pics",
        "--keys-from",
        "-",
        catalog=written["catalog"],
        input="cats/img000\n",
    )
    doc = json.loads(ok(stdin).stdout)
    assert [s["key"] for s in doc["samples"]] == ["cats/img000"] and doc["missing"] == []
    # Piped text: one table whose lines name their sample.
    piped = run("get", "pics", "--keys-from", str(keys), catalog=written["catalog"])
    assert piped.returncode == 1 and "no/such/key" in piped.stderr
    lines = [line.split("\t") for line in piped.stdout.splitlines()]
    assert lines[0] == ["key", "field", "value"]
    assert {line[0] for line in lines[1:]} == {"cats/img001", "dogs/img009", "misc/x"}


def test_errors_are_one_line_and_verbose_shows_the_traceback(written):
    dataset, key, loud, neither = runs(
        ("get", "nope", "cats/img001"),
        ("get", "pics", "cats/img999"),
        ("-v", "get", "nope", "cats/img001"),
        ("get", "pics"),
        catalog=written["catalog"],
    )
    assert dataset.returncode == 1 and dataset.stdout == ""
    assert (
        dataset.stderr.startswith("error: no dataset named 'nope'") and "'pics'" in dataset.stderr
    )
    assert len(dataset.stderr.strip().splitlines()) == 1
    assert key.returncode == 1 and "cats/img999" in key.stderr and "Traceback" not in key.stderr
    assert loud.returncode != 0
    assert "Traceback" in loud.stderr and "DatasetNotFoundError" in loud.stderr
    assert neither.returncode == 2 and "--keys-from" in neither.stderr


# --- verify, sql, gc --------------------------------------------------------


def test_verify_passes_on_a_good_dataset(written):
    text, as_json = runs(
        ("verify", "pics"), ("--json", "verify", "pics"), catalog=written["catalog"]
    )
    assert "ok:" in ok(text).stdout and "31 records" in text.stdout
    doc = json.loads(ok(as_json).stdout)
    assert doc["ok"] is True and doc["problems"] == [] and doc["records_checked"] == 31


def test_sql_selects_and_refuses_anything_that_writes(written):
    select, count, capped, delete, cte = runs(
        (
            "--output",
            "table",
            "sql",
            "SELECT key FROM records WHERE key LIKE 'cats/%' ORDER BY key",
        ),
        ("--json", "sql", "SELECT COUNT(*) AS n FROM records"),
        ("sql", "--limit", "5", "SELECT key FROM records", "--output", "table"),
        ("sql", "DELETE FROM records"),
        ("sql", "WITH doomed AS (SELECT 1) DELETE FROM records"),
        catalog=written["catalog"],
    )
    assert "cats/img000" in ok(select).stdout and "10 rows" in select.stdout
    assert json.loads(ok(count).stdout)["rows"] == [{"n": 31}]
    assert "5 rows" in ok(capped).stdout and "first 5 rows" in capped.stderr
    assert delete.returncode == 1 and "DELETE statements are not allowed" in delete.stderr
    # passes the statement check (it starts with WITH); the read-only transaction stops it
    assert cte.returncode == 1 and "tried to write" in cte.stderr
    assert "Traceback" not in delete.stderr + cte.stderr
    with Catalog(written["catalog"]) as cat:  # every row is still there
        assert len(cat.get_many("pics", list(written["samples"])).found()) == 31


def test_gc_dry_run_lists_orphans_and_removes_nothing(written):
    stray = written["root"] / "pics-999999-000.shard.partial"
    stray.write_bytes(b"left behind by a killed writer")
    old = time.time() - 3 * 3600
    os.utime(stray, (old, old))
    dry, young = runs(
        ("gc", "--dry-run", "--output", "table"),
        ("--json", "gc", "pics", "-n", "--grace", "5h"),
        catalog=written["catalog"],
    )
    assert "Would remove" in ok(dry).stdout and stray.name in dry.stdout
    assert "would remove 0 deleted shards and 1 orphan" in dry.stdout
    doc = json.loads(ok(young).stdout)
    assert doc["orphans"] == [] and doc["dry_run"] is True
    assert stray.exists()
    with Catalog(written["catalog"]) as cat:  # a second dataset in the same folder
        cat.create_dataset("neighbour", str(written["root"]))
    try:
        shared = run("--json", "gc", "pics", "--grace", "0", catalog=written["catalog"])
        assert (
            "shares its folder" in shared.stderr and json.loads(ok(shared).stdout)["orphans"] == []
        )
        assert stray.exists()  # whose is it? gc cannot tell, so it stays
    finally:
        with Catalog(written["catalog"]) as cat:
            cat.delete_dataset("neighbour")
    ok(run("gc", "pics", "--grace", "1h", catalog=written["catalog"]))
    assert not stray.exists()
    assert len(list(written["root"].glob("pics-*.shard"))) >= 3  # registered shards stay


# --- a dataset of its own: reindex, corrupt, verify, delete -----------------


def test_reindex_verify_a_corrupted_shard_then_delete_files_and_rows(tmp_path):
    make_folder(tmp_path / "src", per_folder=3)
    catalog = f"sqlite:///{tmp_path / 'c.db'}"
    ok(write(tmp_path / "src", str(tmp_path / "shards"), catalog))
    shards = sorted((tmp_path / "shards").glob("*.shard"))
    # One shard per partition (planned by bytes): partitions 0 and 1 are the first two.
    pattern = str(tmp_path / "shards" / "pics-j1-{000000..000001}-000.shard")
    rows = json.loads(ok(run("--json", "reindex", "pics", pattern, catalog=catalog)).stdout)
    assert [r["url"] for r in rows] == [str(s) for s in shards[:2]]

    victim = shards[1]
    data = bytearray(victim.read_bytes())
    data[100] ^= 0x01  # one bit inside the first record
    victim.write_bytes(bytes(data))
    text, as_json, refused = runs(
        ("verify", "pics", "--output", "table"),
        ("--json", "verify", "pics"),
        ("delete", "pics"),
        catalog=catalog,
    )
    assert text.returncode == 1
    assert victim.name in text.stdout and "corrupt" in text.stdout and "CRC32C" in text.stdout
    assert "1 problem in 1 shard" in text.stdout
    doc = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and doc["ok"] is False
    assert [x["shard"] for x in doc["problems"]] == [str(victim)]
    assert refused.returncode == 1 and "--yes" in refused.stderr  # no terminal, no --yes
    assert all(s.exists() for s in shards)

    p = ok(run("delete", "pics", "--yes", catalog=catalog))
    assert f"{len(shards)} shard object(s) removed" in p.stdout
    assert not list((tmp_path / "shards").glob("*"))
    with Catalog(catalog) as cat:
        assert cat.datasets() == []
        with cat.engine.connect() as conn:
            for table in ("records", "shards", "jobs", "layouts"):
                assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM {table}").scalar() == 0


# --- catalogs, config and secrets -------------------------------------------


def test_catalog_url_precedence_flag_env_config_default(tmp_path):
    config = tmp_path / "shardcat.toml"
    config.write_text(f'catalog = "sqlite:///{tmp_path}/from-config.db"\n')
    conf = ("--json", "--config", str(config))
    env = {"SHARDCAT_CATALOG": f"sqlite:///{tmp_path}/from-env.db"}
    current = ("catalog", "current")
    results = completed([
        call(*conf, *current),
        call(*conf, *current, env=env),
        call(*conf, "-c", f"sqlite:///{tmp_path}/flag.db", *current, env=env),
        call(*conf, "-c", f"sqlite:///{tmp_path}/flag.db", *current, "-c", f"sqlite:///{tmp_path}/sub.db"),
    ])  # fmt: skip
    used = [json.loads(ok(p).stdout)["catalog"].rsplit("/", 1)[1] for p in results]
    assert used == ["from-config.db", "from-env.db", "flag.db", "sub.db"]
    missing = run("ls", catalog=f"sqlite:///{tmp_path}/never.db")
    assert missing.returncode == 1 and "no catalog at" in missing.stderr
    assert not (tmp_path / "never.db").exists()  # reading never creates a catalog


def test_write_and_get_on_s3_with_a_config_file_never_print_the_secret(s3, tmp_path):
    secret = "sEcReT-value-1234"
    make_folder(tmp_path / "src", per_folder=2)
    config = tmp_path / "shardcat.toml"
    config.write_text(
        f'catalog = "sqlite:///{tmp_path}/c.db"\n'
        f'[storage_options]\nkey = "AKIDEXAMPLE"\nsecret = "{secret}"\n'
        f'[storage_options.client_kwargs]\nendpoint_url = "{s3["endpoint"]}"\n'
        'region_name = "us-east-1"\n'
    )
    url = f"{s3['url']}/pics"
    conf = ("--config", str(config))
    outputs = [ok(run(*conf, "-vv", "write", str(tmp_path / "src"), url, "-d", "pics", "--workers", "1", "--skip-unmatched"))]  # fmt: skip
    outputs += runs(
        (*conf, "ls", "pics"),
        (*conf, "-vv", "--json", "get", "pics", "cats/img001"),
        (*conf, "verify", "pics"),
        (*conf, "-S", f"secret={secret}", "get", "pics", "cats/img999"),
        (*conf, "inspect", f"{url}/missing.shard"),
    )
    listing, got, verified, no_key, no_shard = outputs[1:]
    assert f"{url}/pics-j1-000000-000.shard" in ok(listing).stdout
    assert json.loads(ok(got).stdout)["entries"]["json"]["value"] == {"label": 1, "folder": "cats"}
    assert "no problems" in ok(verified).stdout
    assert no_key.returncode == 1 and "cats/img999" in no_key.stderr
    assert no_shard.returncode == 1 and "missing.shard" in no_shard.stderr
    for p in outputs:
        assert secret not in p.stdout and secret not in p.stderr


def test_postgres_catalog_write_read_and_read_only_sql(postgres_url, tmp_path):
    make_folder(tmp_path / "src", per_folder=2)
    ok(write(tmp_path / "src", str(tmp_path / "shards"), postgres_url))
    stats, listing, cte, analyze, count = runs(
        ("--json", "stats", "pics"),
        ("ls",),
        ("sql", "WITH gone AS (DELETE FROM records RETURNING 1) SELECT COUNT(*) FROM gone"),
        ("sql", "EXPLAIN ANALYZE DELETE FROM records"),
        ("--json", "sql", "SELECT COUNT(*) AS n FROM records"),
        catalog=postgres_url,
    )
    doc = json.loads(ok(stats).stdout)
    assert doc["records"] == 7
    assert {k["name"] for k in doc["entry_kinds"]} == {"json", "png", "seg.png", "txt"}
    assert ok(listing).stdout.count("pics") == 1
    for refused in (cte, analyze):  # both start like reads: the read-only transaction stops them
        assert refused.returncode == 1 and "read-only" in refused.stderr
        assert "Traceback" not in refused.stderr
    assert json.loads(ok(count).stdout)["rows"] == [{"n": 7}]
    png = run("get", "pics", "dogs/img001", "-e", "png", catalog=postgres_url, binary=True)
    assert ok(png).stdout.startswith(PNG_HEAD)
    with Catalog(postgres_url) as cat:
        assert len(cat.shards("pics")) >= 1 and cat.get("pics", "misc/x")["txt"].data


# --- write --job-name, copy, copy --move --------------------------------------


def test_job_names_copy_and_move_from_the_command_line(tmp_path):
    samples = make_folder(tmp_path / "src", per_folder=4)
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    opts = ("--dataset", "pics", "--workers", "1", "--shard-size", "3KB", "--skip-unmatched")
    written = ok(
        run(
            "write",
            str(tmp_path / "src"),
            str(tmp_path / "shards"),
            *opts,
            "--job-name",
            "first",
            "--json",
            "--no-progress",
            catalog=catalog,
        )
    )
    assert json.loads(written.stdout)["resumed_partitions"] == 0
    again = run(
        "write",
        str(tmp_path / "src"),
        str(tmp_path / "shards"),
        *opts,
        "--mode",
        "append",
        "--job-name",
        "first",
        catalog=catalog,
    )
    assert again.returncode == 1
    assert "error: job 'first' of dataset 'pics' was committed already" in again.stderr
    assert "Traceback" not in again.stderr

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("x")
    busy = run(
        "copy", "pics", str(tmp_path / "busy"), "--as", "copy", "--workers", "1", catalog=catalog
    )
    assert busy.returncode == 1
    assert "holds 1 objects that are not shards of this copy" in busy.stderr

    copied = ok(
        run(
            "copy",
            "pics",
            str(tmp_path / "copy"),
            "--as",
            "copy",
            "--workers",
            "1",
            "--json",
            catalog=catalog,
        )
    )
    doc = json.loads(copied.stdout)
    assert doc["dataset"] == "copy" and doc["records"] == len(samples)
    assert doc["copied"] == doc["shards"] and not doc["moved"]

    moved = ok(
        run(
            "copy",
            "copy",
            str(tmp_path / "moved"),
            "--move",
            "--workers",
            "1",
            "--no-progress",
            catalog=catalog,
        )
    )
    assert "copy: moved" in moved.stdout
    with Catalog(catalog) as cat:
        assert cat.info("copy").root_url == str(tmp_path / "moved")
        assert cat.get("copy", "cats/img002")["png"].data == samples["cats/img002"]["png"]
        assert not list((tmp_path / "copy").rglob("*.shard"))  # the move removed the sources
        assert cat.count("pics") == len(samples)  # the original is untouched
