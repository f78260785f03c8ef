"""`shardcat inspect` and `shardcat demo` through the real entry point, each a process of its own
(forked from one that imported shardcat once: tests/_forkrun.py; one through the installed script)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import shardcat
from _forkrun import run_one

GOLDEN = Path(__file__).parents[1] / "data" / "golden" / "v1" / "basic-a64.shard"


def run(
    *args: str, cwd: Path | None = None, real: bool = False
) -> subprocess.CompletedProcess[str]:
    """Forked from a process that imported shardcat once (tests/_forkrun.py); ``real``:
    through the installed script."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return run_one(*args, env=env, cwd=cwd, timeout=120, real=real)


def test_inspect_prints_header_footer_and_entry_kinds():
    # through the installed script, as a user runs it: what the forked runs stand for
    p = run("inspect", str(GOLDEN), "--records", "2", "--verify", "--output", "table", real=True)
    assert p.returncode == 0, p.stderr
    for text in (
        "Shard",
        "format",
        "1.0",
        "shard_number",
        "Entry kinds",
        "application/x-npy",
        "cat/0001",
        "verified",
    ):
        assert text in p.stdout


def test_inspect_json_is_machine_readable():
    p = run("--json", "inspect", str(GOLDEN), "-n", "10")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["shard"]["records"] == 5
    assert doc["shard"]["format"] == "1.0"
    assert doc["metadata"]["dataset"] == "golden"
    assert [r["key"] for r in doc["records"]][:2] == ["cat/0001", "dog/0002"]
    assert {k["name"] for k in doc["entry_kinds"]} >= {"txt", "json", "npy"}


def test_inspect_of_a_damaged_shard_prints_one_line_and_exits_1(tmp_path):
    data = bytearray(GOLDEN.read_bytes())
    data[-30] ^= 0xFF  # inside the trailer
    bad = tmp_path / "bad.shard"
    bad.write_bytes(bytes(data))
    p = run("inspect", str(bad))
    assert p.returncode == 1
    assert "Traceback" not in p.stderr
    assert "error:" in p.stderr and "bad.shard" in p.stderr and "CRC32C" in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3  # one message (rich may wrap it)


def test_inspect_of_a_missing_file_is_a_clear_error(tmp_path):
    p = run("inspect", str(tmp_path / "nope.shard"))
    assert p.returncode == 1
    assert "no such shard" in p.stderr


def test_inspect_verbose_shows_the_traceback(tmp_path):
    (tmp_path / "text.shard").write_text("hello\r\nworld\n")
    p = run("-v", "inspect", str(tmp_path / "text.shard"))
    assert p.returncode != 0
    assert "Traceback" in p.stderr and "FormatError" in p.stderr


def test_demo_writes_reads_and_verifies(tmp_path):
    p = run("demo", "--out", str(tmp_path / "demo"), "--samples", "300", "--shard-size", "200KB")
    assert p.returncode == 0, p.stderr
    assert "wrote 300 samples" in p.stdout and "verified" in p.stdout
    assert "untimed warm-up batch" in p.stdout  # the batch figure is warm, as users see it
    shards = sorted((tmp_path / "demo").glob("demo-*.shard"))
    assert len(shards) >= 2
    assert sum(len(shardcat.ShardReader(s)) for s in shards) == 300
    # Run again (the Quickstart twice): the shard the README inspects is still there.
    again = run(
        "demo", "--out", str(tmp_path / "demo"), "--samples", "300", "--shard-size", "200KB"
    )
    assert again.returncode == 0, again.stderr
    assert sorted((tmp_path / "demo").glob("demo-*.shard")) == shards
    assert (tmp_path / "demo" / "demo-j1-000000-000.shard").exists()


def _one_line_error(p: subprocess.CompletedProcess[str], *texts: str) -> None:
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    assert "error:" in p.stderr and all(t in p.stderr for t in texts), p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3  # one message (rich may wrap it)


def test_inspect_and_get_of_hostile_shards_exit_1_with_one_line(tmp_path):
    # Shards with every CRC right (tests/format/hostile.py). Before: a RecursionError
    # traceback from inspect, and `shardcat get` allocated 1.1 GB before a ZstdError.
    from format.hostile import build_shard, with_metadata, zstd_frame
    from shardcat.format import Codec
    from shardcat.reading import Catalog

    fine = ("txt", "text/plain", Codec.NONE, b"fine")
    lie = zstd_frame(os.urandom(32 << 10), 1_100_000_000)
    data = build_shard(
        [("ok", [fine]), ("bomb", [fine, ("bin", "application/json", Codec.ZSTD, lie)])]
    )
    shard = tmp_path / "hostile.shard"
    shard.write_bytes(data)
    deep = tmp_path / "deep.shard"
    deep.write_bytes(with_metadata(data, b'{"user":' + b"[" * 100_000 + b"]" * 100_000 + b"}"))
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(catalog) as cat:  # the footer is sound: the shard registers
        cat.create_dataset("d", str(tmp_path))
        cat.reindex("d", [str(shard)])

    _one_line_error(run("inspect", str(deep)), "deep.shard", "nested more than 64 levels")
    _one_line_error(
        run("inspect", "--verify", str(shard)), "'bin'", "SHARDCAT_MAX_DECOMPRESSED_BYTES"
    )
    for args in (("get", "d", "bomb"), ("--json", "get", "d", "bomb")):
        _one_line_error(
            run("--catalog", catalog, *args), "hostile.shard", "'bin'", "1,100,000,000 bytes"
        )
    # A single-entry lookup (reading/lookup.py) does not pass the entry's name and place.
    _one_line_error(run("--catalog", catalog, "get", "d", "bomb", "-e", "bin"), "1,100,000,000")
    ok = run("--catalog", catalog, "get", "d", "ok")
    assert ok.returncode == 0 and "fine" in ok.stdout, ok.stderr


def test_inspect_of_a_shard_whose_clock_was_far_off_shows_a_clamped_date(tmp_path):
    from format.hostile import build_shard
    from shardcat.format import Codec

    shard = tmp_path / "future.shard"
    shard.write_bytes(
        build_shard([("a", [("txt", "text/plain", Codec.NONE, b"x")])], created_us=2**62)
    )
    p = run("--json", "inspect", str(shard), "--verify")
    assert p.returncode == 0, p.stderr  # before: ValueError: year 148108 is out of range
    doc = json.loads(p.stdout)
    assert doc["shard"]["created"] == "9999-12-30T23:59:59+00:00"
    assert doc["verified"]["ok"]
