"""benchmarks/bench_open_files.py runs end to end at a tiny size.

2,000 keys in 20 shards of 100, lookups with 4 files open and with the
setting's default: every payload checked by the benchmark's own lookups, the
limit each catalog used reported. No speed is asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_open_files import main  # noqa: E402

from shardcat.storage import resolve_max_open  # noqa: E402


def test_bench_open_files_runs_with_each_limit(tmp_path, capsys):
    out = tmp_path / "open.json"
    figures = main(
        [
            "--keys", "2000",
            "--per-shard", "100",
            "--max-open", "4,auto",
            "--rounds", "1",
            "--points", "50",
            "--batch", "200",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(figures))
    assert figures["shards"] == 20
    runs = figures["runs"]
    assert [(r["max_open"], r["files_open"]) for r in runs] == [
        ("4", 4),
        ("auto", resolve_max_open("auto")),
    ]
    for r in runs:
        assert 0 < r["p50_ms"] <= r["p99_ms"] and r["count"] == 50
        assert r["batch_keys_per_s"] > 0
    assert "20 shards" in capsys.readouterr().out
