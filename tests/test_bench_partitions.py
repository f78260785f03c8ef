"""benchmarks/bench_partitions.py runs end to end at a tiny size on the real PostgreSQL.

3,000 keys in 3 shards, a plain catalog and one of 4 partitions: every phase
runs and checks what it measures (each looked-up payload, each batch's rows),
and the EXPLAIN of the partitioned catalog's batch probes one partition per
key. No speed is asserted: the figures are the benchmark's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_partitions import main  # noqa: E402


@pytest.mark.slow
def test_bench_partitions_runs_on_both_layouts(tmp_path, postgres_server):
    out = tmp_path / "partitions.json"
    figures = main(
        [
            "--keys-count", "3000",
            "--per-shard", "1000",
            "--layouts", "0,4",
            "--points", "50",
            "--batch", "100",
            "--batch-repeats", "2",
            "--statement-repeats", "2",
            "--write-processes", "1",
            "--pg-url", postgres_server,
            "--scratch", str(tmp_path / "scratch"),
            "--json", str(out),
            "--convert", "3",
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(figures))
    assert set(figures["layouts"]) == {"0", "4"}
    assert set(figures["layouts"]["0"]["convert"]) == {"to_3_s", "to_3_load", "to_0_s", "to_0_load"}
    for layout in figures["layouts"].values():
        assert layout["point"]["count"] == 50
        assert set(layout["batch"]) == {"unnest_keys_per_s", "any_keys_per_s"}
        assert set(layout["statement"]) == {"unnest_ms", "any_ms"}
    # Where the planner probes by index, each key probes one partition: loops sum to the keys.
    scans = figures["layouts"]["4"]["explain"]["unnest"]["records_scans"]
    assert not scans or sum(n for _, n in scans) == 100
    assert all(name.startswith("records_p") for name, _ in scans)
