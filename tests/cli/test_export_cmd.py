"""shardcat export: JSON and text output, a version and a registration, and refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app, main
from shardcat.reading import Catalog
from shardcat.testing.tars import wds_samples


@pytest.fixture
def catalog(tmp_path: Path) -> str:
    """Dataset ``train``: v1 has k0..k5, v2 replaces k0 and deletes k5."""
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        with shardcat.DatasetWriter(cat, "train", str(tmp_path / "train")) as w:
            for i in range(6):
                w.add(f"k/{i}", {"txt": f"text {i}" * 50, "json": {"i": i}})
        with shardcat.DatasetWriter(
            cat, "train", str(tmp_path / "train"), mode="append", on_duplicate="replace"
        ) as w:
            w.add("k/0", {"txt": "replaced", "json": {"i": 0}})
        shardcat.delete_keys(cat, "train", ["k/5"])
    return url


def _cli(catalog: str, *args: str) -> Any:
    return CliRunner().invoke(app, ["--catalog", catalog, *args])


def _main(capsys: pytest.CaptureFixture[str], catalog: str, *args: str) -> tuple[int, str]:
    """The command as the installed script runs it (errors as one line on stderr)."""
    try:
        main(["--catalog", catalog, *args])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def _read(tars: list[str]) -> dict[str, bytes]:
    return {s["__key__"]: s["txt"] for t in tars for s in wds_samples(t)}


def test_export_json_then_text_with_a_version_and_a_registration(catalog, tmp_path):
    done = _cli(
        catalog, "--json", "export", "train", str(tmp_path / "v2"), "--shard-size", "2KB",
        "--workers", "1",
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    out = json.loads(done.output)
    assert (out["dataset"], out["version"], out["samples"]) == ("train", 3, 5)
    assert len(out["tars"]) > 1
    assert all(Path(t.replace(".tar", ".taridx")).is_file() for t in out["tars"])
    got = _read(out["tars"])
    assert sorted(got) == [f"k/{i}" for i in range(5)] and got["k/0"] == b"replaced"

    text = _cli(
        catalog, "export", "train", str(tmp_path / "v1"), "--version", "1", "--name", "old",
        "--register", "old_tars", "--workers", "1", "--no-progress",
    )  # fmt: skip
    assert text.exit_code == 0, text.output
    assert "train v1: exported 6 samples in 1 tar" in text.output
    assert "registered as 'old_tars'" in text.output
    assert (tmp_path / "v1" / "old-000000.tar").is_file()
    cat = Catalog(catalog)
    assert cat.get("old_tars", "k/0")["txt"].data == b"text 0" * 50
    assert cat.count("old_tars") == 6


def test_export_refusals_say_what_to_do(catalog, tmp_path, capsys):
    dest = tmp_path / "out"
    assert _cli(catalog, "export", "train", str(dest), "--workers", "1").exit_code == 0
    code, err = _main(capsys, catalog, "export", "train", str(dest), "--workers", "1")
    assert code == 1
    assert "holds 1 tar already" in err and "or pass --overwrite to replace" in err
    over = _cli(catalog, "export", "train", str(dest), "--workers", "1", "--overwrite")
    assert over.exit_code == 0, over.output
    bad = _cli(catalog, "export", "train", str(tmp_path / "x"), "--shard-size", "lots")
    assert bad.exit_code == 2 and "cannot read 'lots' as a size" in bad.output
    fmt = _cli(catalog, "export", "train", str(tmp_path / "x"), "--format", "mds")
    assert fmt.exit_code == 2 and "webdataset" in fmt.output
    with (
        Catalog(catalog) as cat,
        shardcat.DatasetWriter(cat, "dotted", str(tmp_path / "dotted")) as w,
    ):
        w.add("img.001", {"jpg": b"\xff\xd8"})
    code, err = _main(capsys, catalog, "export", "dotted", str(tmp_path / "d"), "--workers", "1")
    assert code == 1
    assert "sample 'img.001', entry 'jpg'" in err and "first dot" in err
    assert not (tmp_path / "d").exists()
