"""benchmarks/bench_point_hash.py runs at a tiny size, on both point lookups.

No time is asserted (benchmarks are measured, never asserted): what is checked is
that both datasets were looked up and the figures printed, and that the switch the
script makes for ``--point-lookup`` is undone when it returns.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from shardcat.reading import point

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_point_hash import main  # noqa: E402


@pytest.mark.parametrize("mode", ["compiled", "python"])
def test_bench_point_hash_measures_both_key_modes(mode: str, capsys) -> None:
    if mode == "compiled" and not point.available():
        pytest.skip("the compiled point lookup is not available here")
    before = point.active()
    figures = main(
        ["--keys", "400", "--per-shard", "150", "--lookups", "250", "--point-lookup", mode]
    )
    assert point.active() == before
    assert set(figures) == {"text", "hash"}
    for name, f in figures.items():
        assert 0 < f["p50"] <= f["p99"], name
    out = capsys.readouterr().out
    assert f"point lookup: {mode}" in out and "hash-only / text p50:" in out


def test_bench_point_hash_measures_batches(capsys) -> None:
    figures = main(["--keys", "400", "--per-shard", "150", "--lookups", "20", "--batch", "50"])
    for name, f in figures.items():
        assert 0 < f["p50"] <= f["p99"] and f["keys_per_s"] > 0, name
    out = capsys.readouterr().out
    assert "20 batches of 50 per dataset" in out and "keys/s" in out


def test_bench_point_hash_measures_entries_on_s3_behind_the_latency_proxy(capsys) -> None:
    argv = ["--keys", "200", "--per-shard", "100", "--lookups", "6", "--batch", "20"]
    figures = main([*argv, "--entries", "json", "--profile", "loopback"])
    assert set(figures) == {"text", "hash"}
    for name, f in figures.items():
        assert 0 < f["p50"] <= f["p99"] and f["keys_per_s"] > 0, name
    out = capsys.readouterr().out
    assert "shards: S3 behind the latency proxy (loopback), entries json" in out
