"""shardcat update-fields: values from JSON lines or CSV, a version each, on a real folder."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import CatalogError, UnknownKeysError
from shardcat.reading import Catalog

KEYS = [f"s/{i:03d}" for i in range(20)]


@pytest.fixture
def catalog(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    root = tmp_path / "data"
    root.mkdir()
    with Catalog(url) as cat:
        cat.create_dataset("train", str(root))
        with shardcat.ShardWriter(str(root / "part-0.shard")) as w:
            for k in KEYS:
                w.add(k, {"txt": k})
        cat.register_shard("train", w.close())
    return url


def cli(catalog: str, *args: str, json_out: bool = False, stdin: str | None = None) -> Any:
    # Wide: a usage error's panel would break a long temporary path inside a word.
    return CliRunner().invoke(
        app,
        ["--catalog", catalog, *(["--json"] if json_out else []), *args],
        input=stdin,
        env={"COLUMNS": "250", "NO_COLOR": "1"},
    )


def chosen(catalog: str, where: str, version: int | None = None) -> list[str]:
    with Catalog(catalog) as cat:
        sel = cat.select("train", where, version=version)
    return sorted(k for keys in sel.keys.values() for k in keys)


def test_json_lines_then_csv_each_make_a_version(catalog, tmp_path):
    lines = tmp_path / "labels.jsonl"
    lines.write_text(
        "\n".join(
            json.dumps({"key": k, "quality": i / 10, "split": "val"})
            for i, k in enumerate(KEYS[:5])
        )
        + "\n\n"
    )
    out = cli(
        catalog,
        "update-fields",
        "train",
        str(lines),
        "--field",
        "quality:float",
        "--field",
        "split:str",
        "-m",
        "first labels",
    )
    assert out.exit_code == 0, out.output
    assert out.output.strip() == "train: version 2 sets 10 values of 5 keys (quality, split)"
    assert chosen(catalog, "split = 'val' AND quality >= 0.2") == KEYS[2:5]
    table = tmp_path / "fix.csv"
    table.write_text(f"key,quality,split\n{KEYS[2]},0.9,train\n{KEYS[3]},,\nnope/1,1,val\n")
    refused = cli(catalog, "update-fields", "train", str(table))
    assert isinstance(refused.exception, UnknownKeysError)
    assert "'nope/1'" in str(refused.exception)
    out = cli(catalog, "update-fields", "train", str(table), "--on-missing", "skip", json_out=True)
    assert out.exit_code == 0, out.output
    assert json.loads(out.output) == {
        "dataset": "train",
        "version": 3,
        "keys": 2,
        "values": 2,
        "unset": 2,
        "skipped": 1,
        "fields": ["quality", "split"],
    }
    assert chosen(catalog, "split = 'val'") == [KEYS[0], KEYS[1], KEYS[4]]
    assert chosen(catalog, "split = 'val'", version=2) == KEYS[:5]
    assert chosen(catalog, "quality = 0.9") == [KEYS[2]]
    log = cli(catalog, "log", "train", json_out=True)
    versions = json.loads(log.output)["versions"]
    assert [(v["number"], v["operation"], v["message"]) for v in versions[:2]] == [
        (3, "update-fields", None),
        (2, "update-fields", "first labels"),
    ]
    # JSON lines on stdin, a field of the wrong kind: nothing changes.
    bad = cli(
        catalog,
        "update-fields",
        "train",
        "-",
        stdin=json.dumps({"key": KEYS[0], "quality": "high"}) + "\n",
    )
    assert isinstance(bad.exception, CatalogError)
    assert "holds number values" in str(bad.exception)
    with Catalog(catalog) as cat:
        assert cat.info("train").version == 3


def test_bad_files_are_named_with_their_line(catalog, tmp_path):
    for text, name, said in (
        ("{not json}\n", "a.jsonl", "a.jsonl line 1 is not JSON"),
        ('{"quality": 1}\n', "b.jsonl", 'line 1 is not a JSON object with a string "key"'),
        ("name,quality\nx,1\n", "c.csv", "has a header with a key column (found: name, quality)"),
        (f"key,quality\n{KEYS[0]},high\n", "d.csv", "d.csv line 2: field 'quality' holds numbers"),
    ):
        path = tmp_path / name
        path.write_text(text)
        out = cli(catalog, "update-fields", "train", str(path), "--field", "quality:float")
        assert out.exit_code == 2, out.output
        assert said in " ".join(re.sub("[│╭╮╰╯─]", " ", out.output).split()), out.output
    undeclared = tmp_path / "e.jsonl"
    undeclared.write_text(json.dumps({"key": KEYS[0], "score": 1}) + "\n")
    out = cli(catalog, "update-fields", "train", str(undeclared))
    assert isinstance(out.exception, CatalogError)
    assert "'score' is not declared" in str(out.exception)
    assert "--field NAME:TYPE" in out.exception.render("cli")


def test_csv_rows_with_too_few_or_too_many_cells_are_refused(catalog, tmp_path):
    # A short row used to unset every missing field silently; a long one was reported as
    # "field None is not declared".
    for text, said in (
        (
            f"key,split,quality\n{KEYS[0]},val,0.5\n{KEYS[1]}\n",
            "f.csv line 3 has 1 cell, the header 3",
        ),
        (f"key,split,quality\n{KEYS[0]},val,0.5,x\n", "f.csv line 2 has 4 cells, the header 3"),
    ):
        path = tmp_path / "f.csv"
        path.write_text(text)
        out = cli(
            catalog,
            "update-fields",
            "train",
            str(path),
            "--field",
            "quality:float",
            "--field",
            "split:str",
        )
        assert out.exit_code == 2, out.output
        assert said in " ".join(re.sub("[│╭╮╰╯─]", " ", out.output).split()), out.output
    with Catalog(catalog) as cat:
        assert cat.info("train").version == 1
    # An empty cell (the row has every cell) still unsets.
    path = tmp_path / "ok.csv"
    path.write_text(f"key,split,quality\n{KEYS[0]},,0.5\n")
    out = cli(
        catalog,
        "update-fields",
        "train",
        str(path),
        "--field",
        "quality:float",
        "--field",
        "split:str",
    )
    assert out.exit_code == 0, out.output
    assert "unset 1" in out.output


def test_a_missing_file_is_a_usage_error_naming_it(catalog, tmp_path):
    out = cli(catalog, "update-fields", "train", str(tmp_path / "nope.jsonl"))
    assert out.exit_code == 2, out.output
    assert "nope.jsonl" in out.output and "no such file" in out.output.lower()


def test_nan_in_a_csv_cell_is_refused(catalog, tmp_path):
    path = tmp_path / "nan.csv"
    path.write_text(f"key,quality\n{KEYS[0]},nan\n")
    out = cli(catalog, "update-fields", "train", str(path), "--field", "quality:float")
    assert isinstance(out.exception, CatalogError), out.output
    assert "not nan" in str(out.exception)


def test_a_refused_update_declares_no_field(catalog, tmp_path):
    # --field used to be declared in its own transaction first: an update refused after it
    # (unknown keys, a hash-only dataset) left the field declared though "nothing was changed".
    path = tmp_path / "v.jsonl"
    path.write_text(json.dumps({"key": "nope/1", "colour": "red"}) + "\n")
    out = cli(catalog, "update-fields", "train", str(path), "--field", "colour:str")
    assert isinstance(out.exception, UnknownKeysError), out.output
    with Catalog(catalog) as cat:
        assert cat.fields("train") == {}
        assert cat.info("train").version == 1
    # A field declared before keeps its kind: declaring it as another is the declaration's error.
    path.write_text(json.dumps({"key": KEYS[0], "colour": "red"}) + "\n")
    assert cli(catalog, "update-fields", "train", str(path), "--field", "colour:str").exit_code == 0
    out = cli(catalog, "update-fields", "train", str(path), "--field", "colour:int")
    assert isinstance(out.exception, CatalogError)
    assert "declared as text, not number" in str(out.exception)


def test_a_byte_order_mark_before_the_header_is_not_part_of_it(catalog, tmp_path):
    # Spreadsheets save "CSV UTF-8" with a BOM: the header's first column read as "\ufeffkey".
    path = tmp_path / "excel.csv"
    path.write_bytes(f"\ufeffkey,split\r\n{KEYS[0]},val\r\n".encode())
    out = cli(catalog, "update-fields", "train", str(path), "--field", "split:str")
    assert out.exit_code == 0, out.output
    assert chosen(catalog, "split = 'val'") == [KEYS[0]]
    out = cli(
        catalog,
        "update-fields",
        "train",
        "-",
        stdin="\ufeff" + json.dumps({"key": KEYS[1], "split": "val"}),
    )
    assert out.exit_code == 0, out.output
    assert chosen(catalog, "split = 'val'") == KEYS[:2]
