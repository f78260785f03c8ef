"""benchmarks/bench_groups.py runs end to end at a tiny scale, so it cannot rot.

It prints figures only (no timed assertion here or there); this checks it
runs and prints each of its ratios.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_groups import main  # noqa: E402


def test_bench_groups_runs_at_a_tiny_scale(capsys):
    main(
        [
            "--samples",
            "120",
            "--per-shard",
            "40",
            "--lookups",
            "20",
            "--repeat",
            "1",
            "--workers",
            "1",
        ]
    )
    out = capsys.readouterr().out
    for line in (
        "add_entries",
        "bytes written per caption byte",
        "get p50",
        "stream with",
        "lance",
    ):
        assert line in out, out
    assert "(0 keyed records)" in out  # the captions are written in the base's order
