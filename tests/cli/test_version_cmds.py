"""shardcat log, tag, untag, diff, delete-keys, expire and get --version, as JSON and text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.reading import Catalog


def shard(root: Path, name: str, keys: list[str]) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(str(root / f"{name}.shard")) as w:
        for k in keys:
            w.add(k, {"txt": f"{k}@{name}"})
    return w.close()


@pytest.fixture
def catalog(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        cat.create_dataset("train", str(tmp_path))
        for name, keys in (("one", ["a", "b"]), ("two", ["a", "c"])):
            job = cat.begin_job("train")
            cat.register_shard("train", shard(tmp_path, name, keys), job=job)
            cat.commit_job(job, on_duplicate="replace", message=f"write {name}")
    return url


def cli(catalog: str, *args: str, json_out: bool = True) -> Any:
    result = CliRunner().invoke(
        app, ["--catalog", catalog, *(["--json"] if json_out else []), *args]
    )
    return result


def test_log_tag_get_version_diff(catalog, tmp_path):
    log = cli(catalog, "log", "train")
    assert log.exit_code == 0, log.output
    versions = json.loads(log.output)["versions"]
    assert [(v["number"], v["message"], v["total_records"]) for v in versions] == [
        (2, "write two", 3),
        (1, "write one", 2),
    ]
    tagged = cli(catalog, "tag", "train", "1", "first")
    assert json.loads(tagged.output) == {"dataset": "train", "tag": "first", "version": 1}
    got = cli(catalog, "get", "train", "a", "--version", "first", "-e", "txt", json_out=False)
    assert got.exit_code == 0 and got.stdout == "a@one"
    diff = json.loads(cli(catalog, "diff", "train", "first", "2", "--keys").output)
    assert (diff["added_keys"], diff["removed_keys"], diff["replaced_keys"]) == (["c"], [], ["a"])
    missing = cli(catalog, "get", "train", "a", "--version", "9", json_out=False)
    # main() prints it as one error line and exits 1 (tests/cli/test_interface.py)
    assert isinstance(missing.exception, shardcat.errors.VersionNotFoundError)
    assert "no version 9" in str(missing.exception)


def test_delete_keys_then_expire_then_untag(catalog, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("b\nnope\n")
    refused = cli(catalog, "delete-keys", "train", "--keys-from", str(keys))
    assert isinstance(refused.exception, shardcat.errors.KeyNotFoundError)
    assert "'nope'" in str(refused.exception)
    done = cli(catalog, "delete-keys", "train", "--keys-from", str(keys), "--missing-ok", "-m", "x")
    assert json.loads(done.output) == {"dataset": "train", "version": 3, "deleted": 1, "asked": 2}
    assert cli(catalog, "tag", "train", "1", "first").exit_code == 0
    dry = json.loads(cli(catalog, "expire", "train", "--keep-last", "1", "-n").output)
    assert (dry["expired"], dry["dry_run"]) == ([2], True)
    done = json.loads(cli(catalog, "expire", "train", "--keep-last", "1").output)
    assert (done["expired"], done["kept"], done["retired_shards"]) == ([2], [3, 1], [])
    assert cli(catalog, "untag", "train", "first").exit_code == 0
    done = json.loads(cli(catalog, "expire", "train", "--keep-last", "1").output)
    assert done["expired"] == [1] and done["retired_shards"] == [str(tmp_path / "one.shard")]
    text = cli(catalog, "log", "train", json_out=False)
    assert "delete" in text.output and "write two" not in text.output


def test_stats_count_what_the_version_serves_not_what_its_shards_hold(catalog):
    # Version 2 replaced "a": its two shards hold 4 records and serve 3 keys.
    head = json.loads(cli(catalog, "stats", "train").output)
    counts = (head["version"], head["shards"], head["records"], head["hidden_records"])
    assert counts == (2, 2, 3, 1)
    assert head["shard_records"]["max"] == 2
    text = cli(catalog, "stats", "train", json_out=False).output
    assert "hidden records" in text and "version" in text


def test_stats_and_verify_take_a_version_and_delete_lists_tags(catalog):
    assert cli(catalog, "tag", "train", "1", "first").exit_code == 0
    stats = cli(catalog, "stats", "train", "--version", "first")
    assert stats.exit_code == 0, stats.output
    kinds = json.loads(stats.output)
    assert "txt" in json.dumps(kinds) and '"records": 2' in json.dumps(kinds)
    assert (kinds["version"], kinds["records"], kinds["hidden_records"]) == (1, 2, 0)
    verified = cli(catalog, "verify", "train", "--version", "1")
    assert verified.exit_code == 0, verified.output
    refused = cli(catalog, "delete", "train", json_out=False)  # no terminal: --yes is required
    assert refused.exit_code == 1
    assert "tagged first (version 1)" in refused.output and "2 kept versions" in refused.output


def test_a_dry_run_of_expire_says_what_would_be_retired_and_retires_nothing(catalog, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("b\n")
    assert cli(catalog, "delete-keys", "train", "--keys-from", str(keys)).exit_code == 0
    dry = cli(catalog, "expire", "train", "--keep-last", "1", "-n", json_out=False)
    assert dry.exit_code == 0, dry.output
    text = " ".join(dry.output.split())  # rich wraps long lines
    assert "would expire 2 versions (2, 1)" in text and "1 shard would be retired" in text
    assert f"would be retired {tmp_path / 'one.shard'}" in text
    assert " retired\t" not in dry.output and "1 shards" not in text
    assert [v["number"] for v in json.loads(cli(catalog, "log", "train").output)["versions"]] == [
        3,
        2,
        1,
    ]
    done = cli(catalog, "expire", "train", "--keep-last", "1", json_out=False)
    assert "expired 2 versions (2, 1)" in " ".join(done.output.split())
    assert "would" not in done.output
