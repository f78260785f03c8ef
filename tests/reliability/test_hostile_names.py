"""Hostile keys, dataset names and entry names through the catalog API and the CLI, both databases.

Quotes, ``%`` and ``_`` (LIKE's wildcards), backslashes, NUL, newlines, SQL,
``../`` and absolute paths, non-BMP characters, the longest key the format
holds (65,535 bytes): stored and found exactly, or refused with a typed
error before anything is visible (lone surrogates, 1 MB keys, empty names;
NUL on PostgreSQL, whose text cannot hold it). Prefix searches take ``%``
and ``_`` literally; ``shardcat get -o`` never writes outside its folder.
(``tests/format/test_hostile.py`` covers hostile shard bytes,
``tests/cli/test_sql_safety.py`` hostile ``shardcat sql`` queries.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import shardcat
from cli.test_dataset_cmds import run, runs
from shardcat.errors import (
    DatasetNotFoundError,
    InvalidKeyError,
    InvalidNameError,
    KeyNotFoundError,
)
from shardcat.reading import Catalog

NAMES = [
    'it\'s "quoted"',
    "100%_done",
    "back\\slash",
    "line\nbreak\r\ttab",
    "'; DROP TABLE records; --",
    "../../escape",
    "/abs/olute",
    "..",
    "ключ/😀",
    "x" * 255,
]
KEYS = [
    *NAMES,
    "p%",
    "p_",
    "pa",
    "p\\",
    "p%x",
    "k" * 65_535,
]
ENTRIES = ["../../entry", "it's", "%_", "new\nline", "😀"]
REFUSED_KEYS = ["lone \udc80 surrogate", "k" * 1_000_000, ""]
REFUSED_NAMES = ["lone \udc80 surrogate", "n" * 256, ""]
NUL = "nul\x00inside"


def _payload(key: str) -> bytes:
    return key.encode("utf-8", "surrogatepass")[:64] + b"|" + str(len(key)).encode()


def _write(cat: Catalog, root: Path, dataset: str, keys: list[str], name: str) -> None:
    with shardcat.ShardWriter(str(root / f"{name}.shard")) as w:
        for k in keys:
            w.write({"__key__": k, "txt": k, **{e: _payload(e + k) for e in ENTRIES}})
    cat.register_shard(dataset, w.close())


def _check_stored(cat: Catalog, dataset: str, keys: list[str]) -> None:
    for k in keys:
        rec = cat.get(dataset, k)
        assert rec.key == k and rec["txt"].decode() == k
        assert {e: rec[e].data for e in ENTRIES} == {e: _payload(e + k) for e in ENTRIES}
    got = cat.get_many(dataset, keys)
    assert got.ok and sorted(got.found()) == sorted(keys)
    assert sorted(cat.keys(dataset)) == sorted(keys)
    # LIKE's wildcards and the escape character are plain text in a prefix.
    for prefix in ("p%", "p_", "p\\", "100%_", "it's"):
        assert sorted(cat.keys(dataset, prefix=prefix)) == sorted(
            k for k in keys if k.startswith(prefix)
        ), prefix


def test_hostile_keys_entry_and_dataset_names_through_the_api(
    catalog_url: str, tmp_path: Path
) -> None:
    pg = catalog_url.startswith("postgresql")
    with Catalog(catalog_url) as cat:
        for n, name in enumerate(NAMES):
            root = tmp_path / f"d{n}"
            root.mkdir()
            assert cat.create_dataset(name, str(root)).name == name
            _write(cat, root, name, KEYS, "all")
            _check_stored(cat, name, KEYS)
            assert cat.verify(name, workers=1).ok
        assert sorted(d.name for d in cat.datasets()) == sorted(NAMES)
        dataset, root = NAMES[0], tmp_path / "d0"
        # Refused before any file is complete, typed, naming the problem.
        for bad in REFUSED_KEYS:
            with pytest.raises(InvalidKeyError):
                _write(cat, root, dataset, [bad], "refused")
            with pytest.raises((InvalidKeyError, KeyNotFoundError)):
                cat.get(dataset, bad)
        for bad in REFUSED_NAMES:
            with pytest.raises(InvalidNameError, match="dataset name"):
                cat.create_dataset(bad, str(root))
            with pytest.raises(InvalidNameError):
                cat.dataset(bad)
        # NUL: SQLite stores it; PostgreSQL's text cannot, so it is refused, typed.
        if pg:
            with pytest.raises(InvalidNameError, match=r"NUL.*SQLite catalog"):
                _write(cat, root, dataset, [NUL], "nul")
            with pytest.raises(InvalidNameError, match="NUL"):
                cat.get(dataset, NUL)
            with pytest.raises(InvalidNameError, match="NUL"):
                cat.create_dataset(NUL, str(root))
            with pytest.raises(InvalidNameError, match="NUL"):
                cat.dataset(NUL)
        else:
            _write(cat, root, dataset, [NUL], "nul")
            assert cat.get(dataset, NUL)["txt"].decode() == NUL
            assert cat.create_dataset(NUL, str(root)).name == NUL
            with pytest.raises(DatasetNotFoundError):
                cat.dataset(NUL + "x")
        # Nothing refused became visible; the dataset is still exactly what was stored.
        wanted = KEYS + ([] if pg else [NUL])
        assert cat.count(dataset) == len(wanted)
        assert sorted(cat.keys(dataset)) == sorted(wanted)
        assert cat.verify(dataset, workers=1).ok
        # Every file stayed in the folder it was written to.
        assert {s.url for s in cat.shards(dataset)} <= {str(p) for p in root.iterdir()}


def _json(p: Any) -> Any:
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _files_around(tmp_path: Path) -> set[Path]:
    """Every file of this test's folder and its siblings (where an escaping name would land).

    Leaves out other tests' SQLite ``-wal``/``-shm`` files: SQLite removes them
    when those tests' last connection closes, which may happen during this test.
    """
    return {
        p
        for p in tmp_path.parent.rglob("*")
        if p.is_file() and (p.is_relative_to(tmp_path) or not p.name.endswith(("-wal", "-shm")))
    }


def test_hostile_names_through_the_cli(catalog_url: str, tmp_path: Path) -> None:
    dataset = "../../it's 100%_\nnew"
    root = tmp_path / "ds"
    root.mkdir()
    keys = [k for k in KEYS if len(k) < 1000]  # argv carries the rest
    shown = ["line\nbreak\r\ttab", "../../escape", "ключ/😀"]
    with Catalog(catalog_url) as cat:
        cat.create_dataset(dataset, str(root))
        _write(cat, root, dataset, keys, "all")
    out = tmp_path / "out"
    out.mkdir()
    before = _files_around(tmp_path)
    # Independent command lines, two at a time (each is a Python process start).
    listed, *results = runs(
        ("--json", "keys", dataset),
        *[("--json", "keys", dataset, "--prefix", prefix) for prefix in ("p%", "p_")],
        *[("--json", "get", dataset, key) for key in shown],
        *[("get", dataset, key, "-o", str(out)) for key in ("../../escape", "/abs/olute")],
        ("get", dataset, "lone \udc80"),
        ("count", "n" * 256),
        catalog=catalog_url,
    )
    prefixed, got, saved, refused = results[:2], results[2:5], results[5:7], results[7:]
    assert sorted(json.loads(line) for line in listed.stdout.splitlines()) == sorted(keys)
    for prefix, p in zip(("p%", "p_"), prefixed):
        assert p.returncode == 0, p.stderr
        assert [json.loads(x) for x in p.stdout.splitlines()] == sorted(
            k for k in keys if k.startswith(prefix)
        ), prefix
    for key, p in zip(shown, got):
        record = _json(p)
        assert record["key"] == key and record["entries"]["txt"]["value"] == key
    raw = run("get", dataset, shown[0], "--entry", "%_", catalog=catalog_url, binary=True)
    assert raw.returncode == 0 and raw.stdout == _payload("%_" + shown[0])
    # Saving entries: a key that would leave the folder is refused, typed; nothing written.
    for p in saved:
        assert p.returncode == 1 and "not a safe relative path" in p.stderr, p.stderr
    assert _files_around(tmp_path) == before
    # Refused input: one line saying what is wrong, exit 1, no traceback.
    for p in [*saved, *refused]:
        assert p.returncode == 1 and p.stderr.startswith("error: "), p.stderr
        assert "Traceback" not in p.stderr
