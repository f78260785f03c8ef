"""benchmarks/bench_verify_job.py runs at a tiny size: both ways check every record, no problem.

No time is asserted (benchmarks are measured, never timed in tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_verify_job import main  # noqa: E402


def test_bench_verify_job_checks_every_record_both_ways(tmp_path):
    figures = main(["--keys", "2000", "--per-shard", "250", "--scratch", str(tmp_path)])
    assert [f["way"] for f in figures] == ["client", "dask"]
    assert [(f["records"], f["shards"]) for f in figures] == [(2000, 8), (2000, 8)]
    assert all(float(f["peak_client_rss_mib"]) > 0 for f in figures)  # type: ignore[arg-type]
