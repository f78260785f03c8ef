"""``shardcat add-entries``, ``drop-group``, ``groups`` and ``get``/``stats`` of a dataset with groups."""

from __future__ import annotations

import json

from shardcat.reading import Catalog

from .test_dataset_cmds import ok, run


def test_add_entries_then_get_stats_groups_and_drop(tmp_path):
    src, caps = tmp_path / "src", tmp_path / "caps"
    src.mkdir()
    caps.mkdir()
    for name in ("a", "b", "c"):
        (src / f"{name}.bin").write_bytes(name.encode() * 10)
        (caps / f"{name}.txt").write_text(f"caption {name}")
    (caps / "zz.txt").write_text("no such sample")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    ok(
        run(
            "write",
            str(src),
            str(tmp_path / "shards"),
            "-d",
            "pics",
            "--workers",
            "1",
            catalog=catalog,
        )
    )
    refused = run(
        "add-entries", str(caps), "pics", "--group", "captions", "--workers", "1", catalog=catalog
    )
    assert refused.returncode == 1 and "'zz'" in refused.stderr
    assert "--on-missing skip" in refused.stderr
    added = ok(
        run(
            "add-entries",
            str(caps),
            "pics",
            "-g",
            "captions",
            "--on-missing",
            "skip",
            "--workers",
            "1",
            catalog=catalog,
        )
    )
    assert "committed 3 records" in added.stdout and "1 sample skipped" in added.stdout
    got = ok(run("--json", "get", "pics", "b", catalog=catalog))
    doc = json.loads(got.stdout)
    assert set(doc["entries"]) == {"bin", "txt"}
    listed = ok(run("--json", "groups", "pics", catalog=catalog))
    (group,) = json.loads(listed.stdout)
    assert (group["name"], group["records"], group["dropped_version"]) == ("captions", 3, None)
    stats = ok(run("stats", "pics", catalog=catalog))
    assert "\ncaptions\t2\t\t3\t" in stats.stdout  # name, added, dropped, records (TSV: no tty)
    dropped = ok(run("drop-group", "pics", "captions", catalog=catalog))
    assert "drops group 'captions'" in dropped.stdout
    with Catalog(catalog) as cat:
        assert list(cat.get("pics", "b")) == ["bin"]
        assert cat.log("pics")[0].operation == "drop-group"


def test_write_keys_hash_then_get_and_a_clear_error_for_keys(tmp_path):
    """`shardcat write --keys hash`: `get` reads samples back, `keys` says what to do instead."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a", "b", "c"):
        (src / f"{name}.bin").write_bytes(name.encode() * 10)
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    write = ("write", str(src), str(tmp_path / "shards"), "-d", "pics", "--workers", "1")
    ok(run(*write, "--keys", "hash", catalog=catalog))
    with Catalog(catalog) as cat:
        assert cat.info("pics").keys == "hash"
        assert cat.get("pics", "b")["bin"].data == b"b" * 10
    got = ok(run("get", "pics", "c", "--entry", "bin", catalog=catalog, binary=True))
    assert got.stdout == b"c" * 10
    refused = run("keys", "pics", catalog=catalog)
    assert refused.returncode == 1
    assert 'keys="hash"' in refused.stderr and "shardcat get" in refused.stderr


def test_add_entries_failures_say_what_to_do_and_write_nothing_they_refuse(tmp_path):
    """A group added twice names `--mode replace` (add-entries has no --on-duplicate); a
    replace of a missing group and a group of a hash-only dataset are refused before any
    shard is written."""
    src, caps = tmp_path / "src", tmp_path / "caps"
    src.mkdir()
    caps.mkdir()
    for name in ("a", "b"):
        (src / f"{name}.bin").write_bytes(name.encode() * 10)
        (caps / f"{name}.txt").write_text(f"caption {name}")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    for dataset, keys in (("pics", "text"), ("hashed", "hash")):
        write = ("write", str(src), str(tmp_path / dataset), "-d", dataset, "--keys", keys)
        ok(run(*write, "--workers", "1", catalog=catalog))
    add = ("add-entries", str(caps), "pics", "-g", "captions", "--workers", "1")
    ok(run(*add, catalog=catalog))
    twice = run(*add, catalog=catalog)
    assert twice.returncode == 1 and "--on-duplicate" not in twice.stderr
    assert "group 'captions' has entries of these keys already: pass --mode replace" in (
        twice.stderr
    )
    before = {p.name for p in (tmp_path / "pics").iterdir()}
    missing = run(
        "add-entries", str(caps), "pics", "-g", "nosuch", "--mode", "replace", catalog=catalog
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines()[-1] == (
        "error: dataset 'pics' has no group 'nosuch' to replace entries of; nothing was "
        "written; add it first: shardcat add-entries ... (without --mode replace)"
    )
    assert {p.name for p in (tmp_path / "pics").iterdir()} == before
    hashed_before = {p.name for p in (tmp_path / "hashed").iterdir()}
    hashed = run("add-entries", str(caps), "hashed", "-g", "captions", catalog=catalog)
    assert hashed.returncode == 1 and "writing" not in hashed.stderr
    assert "dataset 'hashed' was created with keys=\"hash\"" in hashed.stderr
    assert {p.name for p in (tmp_path / "hashed").iterdir()} == hashed_before
    with Catalog(catalog) as cat:  # no job was opened for either refusal
        assert [j.state for j in cat.jobs("pics")].count("committed") == 2
        assert len(cat.jobs("hashed")) == 1
    ok(run("drop-group", "pics", "captions", catalog=catalog))
    again = run("drop-group", "pics", "captions", catalog=catalog)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        "error: dataset 'pics' has no group 'captions' (it was dropped at version 3); its live "
        "groups: none; check the name: shardcat groups pics lists every group"
    )


def test_add_entries_takes_files_without_extension_as_write_does(tmp_path):
    """Its refusal of `KEY` files names --no-ext-entry and --skip-unmatched: it has both."""
    src, notes = tmp_path / "src", tmp_path / "notes"
    src.mkdir()
    notes.mkdir()
    for name in ("a", "b"):
        (src / f"{name}.bin").write_bytes(name.encode() * 10)
    (notes / "a").write_text("a note on a")
    (notes / "b.note.txt").write_text("a note on b")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    ok(
        run(
            "write",
            str(src),
            str(tmp_path / "pics"),
            "-d",
            "pics",
            "--workers",
            "1",
            catalog=catalog,
        )
    )
    add = ("add-entries", str(notes), "pics", "-g", "notes", "--workers", "1")
    refused = run(*add, catalog=catalog)
    assert refused.returncode == 1
    assert "--no-ext-entry NAME" in refused.stderr and "--skip-unmatched" in refused.stderr
    ok(run(*add, "--skip-unmatched", catalog=catalog))
    with Catalog(catalog) as cat:
        assert cat.get("pics", "b")["note.txt"].decode() == "a note on b"
        assert "note.txt" not in cat.get("pics", "a")
    ok(run(*add, "--no-ext-entry", "note.txt", "--mode", "replace", catalog=catalog))
    with Catalog(catalog) as cat:
        assert cat.get("pics", "a")["note.txt"].decode() == "a note on a"
