"""`shardcat reindex DATASET FOLDER` rebuilds a versioned dataset's history from its folder.

What the team met: with the catalog lost, `reindex` of the shards failed on any
dataset with history (`error: 78 duplicate key(s)`: the folder rightly holds
older versions' shards), and deletes, replacements and tags were gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.reading import Catalog


def _shard(root: Path, name: str, keys: list[str]) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(str(root / f"{name}.shard")) as w:
        for k in keys:
            w.add(k, {"txt": f"{k}@{name}"})
    return w.close()


def _cli(catalog: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["--catalog", catalog, "--json", *args])


def test_reindex_of_the_folder_brings_back_every_version_and_tag(
    catalog_url: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    old = f"sqlite:///{tmp_path / 'old.db'}"
    with Catalog(old) as cat:
        cat.create_dataset("train", str(data))
        for name, keys in (("one", ["a", "b"]), ("two", ["a", "c"])):
            job = cat.begin_job("train")
            cat.register_shard("train", _shard(data, name, keys), job=job)
            cat.commit_job(job, on_duplicate="replace", message=f"write {name}")
        cat.delete_keys("train", ["b"], message="drop b")
        cat.tag("train", 1, "first")
        before = json.loads(_cli(old, "log", "train").output)["versions"]
    # Shards alone make one version of both files: the replaced key collides.
    flat = _cli(catalog_url, "reindex", "train", str(data / "*.shard"))
    assert isinstance(flat.exception, shardcat.errors.DuplicateKeyError)
    rebuilt = _cli(catalog_url, "reindex", "train", str(data))
    assert rebuilt.exit_code == 0, rebuilt.output
    doc = json.loads(rebuilt.stdout)
    assert (doc["versions"], doc["tags"], doc["shards"]) == ([1, 2, 3], {"first": 1}, 2)
    after = json.loads(_cli(catalog_url, "log", "train").output)["versions"]
    keep = ("number", "operation", "message", "total_records", "tags", "records_removed")
    assert [{k: v[k] for k in keep} for v in after] == [{k: v[k] for k in keep} for v in before]
    got = CliRunner().invoke(
        app, ["-c", catalog_url, "get", "train", "b", "--version", "first", "-e", "txt"]
    )
    assert got.exit_code == 0 and got.stdout == "b@one"
    gone = _cli(catalog_url, "get", "train", "b")
    assert isinstance(gone.exception, shardcat.errors.KeyNotFoundError)
    assert _cli(catalog_url, "verify", "train").exit_code == 0
    # A lost manifest: verify says so and how to fix it; --write-history fixes it.
    (data / "_versions" / "train" / "000000000003.json").unlink()
    bad = _cli(catalog_url, "verify", "train")
    assert bad.exit_code == 1
    problems = json.loads(bad.stdout)["problems"]
    assert [p["kind"] for p in problems] == ["history-missing"]
    assert "--write-history train" in problems[0]["detail"]
    fixed = _cli(catalog_url, "verify", "train", "--write-history")
    assert fixed.exit_code == 0, fixed.output
    assert "wrote 1 version manifest" in fixed.stderr
