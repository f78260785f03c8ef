"""benchmarks/bench_scale.py (issue 33's curve) runs end to end at a tiny size on both catalogs.

2,000 keys in 8 shards, 1 and 2 registration workers (spawned processes
staging into one job), SQLite and the real PostgreSQL: every phase runs and
checks what it measures (each looked-up payload, verify's record count, gc
removing the aborted job's shard); the floor copies exactly the rows the
registration wrote. No speed is asserted: the figures are the benchmark's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_scale import main, parse_count  # noqa: E402


def test_key_counts_parse_as_whole_numbers():
    assert parse_count("1e6") == parse_count("1_000_000") == 1_000_000
    with pytest.raises(argparse.ArgumentTypeError):
        parse_count("2.5")


@pytest.mark.slow  # six spawned worker processes: 106 s on the 2-core VM at load 15
def test_bench_scale_runs_on_sqlite_and_postgres(tmp_path, postgres_server, capsys):
    out = tmp_path / "scale.json"
    figures = main(
        [
            "--keys-count", "2000",
            "--backends", "sqlite,postgres",
            "--workers", "1,2",
            "--points", "50",
            "--batch", "200",
            "--batch-repeats", "2",
            "--gc-keys", "10",
            "--pg-url", postgres_server,
            "--scratch", str(tmp_path / "scratch"),
            "--json", str(out),
            "--dataset-options", '{"properties": {"made_by": "bench_scale"}}',
        ]
    )  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(figures))
    assert figures["run"]["command"].startswith("benchmarks/bench_scale.py --keys-count 2000 ")
    results = figures["results"]
    assert [(r["backend"], r["keys"], r["shards"]) for r in results] == [
        ("sqlite", 2000, 8),
        ("postgres", 2000, 8),
    ]
    for r in results:
        assert set(r["registration"]) == {"1", "2"}
        for workers, reg in r["registration"].items():
            assert reg["workers"] == int(workers) and reg["keys_per_s"] > 0
            assert reg["seconds"] >= reg["stage_s"] + reg["commit_s"] - 1e-9
        assert r["floor"]["keys"] == 2000  # the floor wrote exactly the catalog's rows
        sizes = r["bytes"]
        assert sizes["table"] > 0 and sizes["catalog"] >= sum(
            v for k, v in sizes.items() if k != "catalog"
        )
        assert "ix_records_dataset_id_key_hash" in sizes and "ix_records_dataset_id_key" in sizes
        assert 0 < r["point"]["p50_ms"] <= r["point"]["p99_ms"] and r["point"]["count"] == 50
        assert r["point_before_warm"]["count"] == 50  # timed before the catalog was read once
        # Every shard byte and the whole catalog (a file; a table and its indexes) were read.
        assert r["warm"]["shard_bytes"] > 2000 * 8  # at least every sample's 8-byte entry
        assert r["warm"]["catalog_bytes"] >= sizes["table"]
        assert r["batch"]["size"] == 200 and r["batch"]["keys_per_s"] > 0
        assert r["verify"]["seconds"] > 0 and r["gc"]["removed_keys"] == 10
        assert r["vs_smallest"]["point_p50"] == 1.0
    assert "pk_records" in results[1]["bytes"]  # PostgreSQL's primary key is an index of its own
    assert not (tmp_path / "scratch").exists()  # removed without --keep
    engine = sa.create_engine(postgres_server)
    try:
        with engine.connect() as conn:
            left = conn.execute(
                sa.text("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'scale\\_2000\\_w%'")
            ).all()
    finally:
        engine.dispose()
    assert left == []  # every catalog schema of the run was dropped
    printed = capsys.readouterr().out
    assert "sqlite           2,000" in printed and "postgres         2,000" in printed
    assert "pk_records" in printed
