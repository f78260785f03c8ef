"""shardcat compact: JSON and text output, nothing to do, and option errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import GroupNotFoundError
from shardcat.reading import Catalog


def _shard(root: Path, name: str, keys: list[str]) -> shardcat.ShardInfo:
    with shardcat.ShardWriter(str(root / f"{name}.shard")) as w:
        for k in keys:
            w.add(k, {"txt": f"{k}@{name}"})
    return w.close()


@pytest.fixture
def catalog(tmp_path: Path) -> str:
    """Shard ``one`` holds a (replaced by ``two``) and b: half of it is live."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        cat.create_dataset("train", str(tmp_path))
        for name, keys in (("one", ["a", "b"]), ("two", ["a", "c"])):
            job = cat.begin_job("train")
            cat.register_shard("train", _shard(tmp_path, name, keys), job=job)
            cat.commit_job(job, on_duplicate="replace")
    return url


def _cli(catalog: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["--catalog", catalog, *args])


def test_compact_json_then_nothing_left(catalog, tmp_path):
    cat = Catalog(catalog)
    before = {k: cat.get("train", k)["txt"].data for k in "abc"}
    done = _cli(catalog, "--json", "compact", "train", "--min-live", "0.6", "--workers", "1")
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    assert out["compacted"] == [str(tmp_path / "one.shard")]
    assert (out["version"], out["records"], out["tar_shards"]) == (3, 1, 0)
    assert cat.log("train")[0].operation == "compact"
    assert {k: cat.get("train", k)["txt"].data for k in "abc"} == before
    assert cat.get("train", "a", version=1)["txt"].data == b"a@one"
    assert cat.locate("train", "b").url == out["written"][0]
    text = _cli(catalog, "compact", "train", "--min-live", "0.6", "--workers", "1", "--no-progress")
    assert text.exit_code == 0, text.output
    assert "nothing to compact" in text.output
    assert cat.log("train")[0].number == 3


def test_compact_refuses_bad_options(catalog):
    both = _cli(catalog, "compact", "train", "--workers", "1", "--scheduler", "tcp://x:1")
    assert both.exit_code != 0 and "--workers or --scheduler" in both.output
    high = _cli(catalog, "compact", "train", "--min-live", "2")
    assert high.exit_code != 0
    assert Catalog(catalog).log("train")[0].number == 2


def test_compact_fold_groups(catalog, tmp_path):
    """--fold-group NAME folds one group (a new version, the group dropped); --fold-groups all."""
    for group in ("depth", "mask"):
        folder = tmp_path / group
        folder.mkdir()
        for k in "abc":
            (folder / f"{k}.{group}.txt").write_text(f"{group} of {k}")
        added = _cli(
            catalog, "add-entries", str(folder), "train", "--group", group, "--workers", "1"
        )
        assert added.exit_code == 0, added.output
    cat = Catalog(catalog)
    before = {k: dict(cat.get("train", k).decode()) for k in "abc"}
    both = _cli(catalog, "compact", "train", "--fold-groups", "--fold-group", "depth")
    assert both.exit_code != 0 and "--fold-groups folds every group" in both.output
    unknown = _cli(catalog, "compact", "train", "--fold-group", "nope", "--workers", "1")
    assert isinstance(unknown.exception, GroupNotFoundError)  # main() prints it, exit code 1
    assert "shardcat groups train lists every group" in unknown.exception.render("cli")
    one = _cli(catalog, "--json", "compact", "train", "--fold-group", "depth", "--workers", "1")
    assert one.exit_code == 0, one.output
    out = json.loads(one.output)
    assert out["folded"] == {"depth": 3} and out["records"] == 3
    assert [(g.name, g.dropped_version) for g in cat.groups("train")] == [
        ("depth", out["version"]),
        ("mask", None),
    ]
    rest = _cli(catalog, "compact", "train", "--fold-groups", "--workers", "1", "--no-progress")
    assert rest.exit_code == 0, rest.output
    assert "folded groups 'mask' (3 records)" in rest.output
    assert cat.log("train")[0].operation == "fold"
    assert {k: dict(cat.get("train", k).decode()) for k in "abc"} == before
    assert all(cat.locate("train", k).groups == () for k in "abc")
