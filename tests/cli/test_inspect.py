"""`shardcat inspect` and `shardcat demo` through the real entry point (a subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import shardcat

GOLDEN = Path(__file__).parents[1] / "data" / "golden" / "v1" / "basic-a64.shard"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "shardcat", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


def test_inspect_prints_header_footer_and_entry_kinds():
    p = run("inspect", str(GOLDEN), "--records", "2", "--verify")
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
    shards = sorted((tmp_path / "demo").glob("demo-*.shard"))
    assert len(shards) >= 2
    assert sum(len(shardcat.ShardReader(s)) for s in shards) == 300
