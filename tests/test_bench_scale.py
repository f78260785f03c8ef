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
        # SQLite only: the same lookups through connections without a memory map.
        assert ("point_unmapped" in r) == (r["backend"] == "sqlite")
        if r["backend"] == "sqlite":
            assert r["point_unmapped"]["count"] == 50 and r["point_unmapped"]["p50_ms"] > 0
        # Every shard byte and the whole catalog (a file; a table and its indexes) were read.
        assert r["warm"]["shard_bytes"] > 2000 * 8  # at least every sample's 8-byte entry
        assert r["warm"]["catalog_bytes"] >= sizes["table"]
        # How much the page cache held after the warm-up, and of how much memory (Linux).
        assert 0 < r["warm"]["page_cache_bytes"] <= r["warm"]["memory_bytes"]
        # A 2,000-key catalog fits any server's buffers: warmed into them, not the page cache.
        assert r["warm"]["catalog_mode"] == ("buffer" if r["backend"] == "postgres" else "read")
        assert r["batch"]["size"] == 200 and r["batch"]["keys_per_s"] > 0
        assert r["verify"]["seconds"] > 0 and r["gc"]["removed_keys"] == 10
        assert r["verify_quick"]["seconds"] > 0  # the quick one found every row too
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


def test_a_size_without_its_floor_prints_dashes_for_it():
    from benchmarks.bench_scale import table

    reg = {"keys_per_s": 5000.0, "stage_s": 1.0, "commit_s": 0.5, "footer_s": 0.1}
    point = {"p50_ms": 0.02, "p99_ms": 0.1}
    result = {
        "backend": "sqlite",
        "keys": 100_000_000,
        "bytes": {"table": 6_000_000_000, "catalog": 11_000_000_000},
        "floor": None,  # --floor-max-keys below this size
        "registration": {"1": reg},
        "point": point,
        "point_before_warm": point,
        "batch": {"keys_per_s": 9000.0},
        "vs_smallest": {"point_p50": 1.0, "batch": 1.0},
        "verify": None,
        "verify_quick": {"seconds": 1.5},
        "gc": {"seconds": 0.2},
    }
    first = table([result]).splitlines()[1].split()
    assert first[:5] == ["sqlite", "100,000,000", "60.0", "-", "5,000"] and first[5] == "-"


def test_shuffled_shards_hold_every_key_once_spread_over_the_whole_range(tmp_path):
    from benchmarks.peers.bigcatalog import payload, shuffled, write_tiny_shards
    from benchmarks.peers.data import Dataset

    import shardcat

    keys, per_shard = 1000, 250
    paths = write_tiny_shards(str(tmp_path), keys, per_shard, alignment=8, shuffle=True)
    seen: list[int] = []
    for path in paths:
        with shardcat.ShardReader(path) as reader:
            numbers = []
            written = reader.keys()  # in the shard's order (iterating a reader gives records)
            for key in written:
                n = int(key.rsplit("/", 1)[1])
                assert key == Dataset.key(n)
                assert reader.get(key)["bin"].data == payload(n)  # the key's own payload
                numbers.append(n)
        # Not a run of neighbours: one shard's keys reach across most of the range.
        assert max(numbers) - min(numbers) > keys * 0.9
        assert numbers != sorted(numbers)
        seen += numbers
    assert sorted(seen) == list(range(keys))  # a permutation: every key written once
    assert [shuffled(i, keys) for i in range(per_shard)] == seen[:per_shard]


def test_bench_scale_looks_up_shuffled_keys(tmp_path):
    figures = main(
        [
            "--keys-count", "2000",
            "--backends", "sqlite",
            "--workers", "1",
            "--points", "50",
            "--batch", "200",
            "--batch-repeats", "1",
            "--gc-keys", "10",
            "--no-verify",
            "--shuffle",
            "--scratch", str(tmp_path / "scratch"),
            "--keep",
        ]
    )  # fmt: skip
    (result,) = figures["results"]
    assert result["shuffled"] is True
    # Each looked-up payload was checked against its key; the shards were written shuffled.
    assert result["point"]["count"] == 50 and result["batch"]["keys_per_s"] > 0
    assert (tmp_path / "scratch" / "shards-2000-250-shuffled" / "_complete").exists()


def test_bench_scale_bulk_registers_in_one_call_and_builds_the_indexes_after(
    tmp_path, monkeypatch, postgres_server
):
    from shardcat.catalog import deferred_indexes

    # 2,000 keys take the bulk path on SQLite here; PostgreSQL keeps its indexes.
    monkeypatch.setattr(deferred_indexes, "DEFER_MIN_ROWS", 1000)
    dropped = []
    real = deferred_indexes._key_indexes
    monkeypatch.setattr(deferred_indexes, "_key_indexes", lambda *a: dropped.append(1) or real(*a))
    figures = main(
        [
            "--keys-count", "2000",
            "--backends", "sqlite,postgres",
            "--pg-url", postgres_server,
            "--bulk",
            "--workers", "1,2",
            "--points", "50",
            "--batch", "200",
            "--batch-repeats", "1",
            "--gc-keys", "10",
            "--scratch", str(tmp_path / "scratch"),
        ]
    )  # fmt: skip
    assert dropped == [1]  # SQLite's one registration
    assert [r["backend"] for r in figures["results"]] == ["sqlite", "postgres"]
    for result in figures["results"]:
        assert result["bulk"] is True
        # One registration, in one call: --workers is unused.
        assert list(result["registration"]) == ["1"]
        reg = result["registration"]["1"]
        assert reg["bulk"] is True and reg["commit_s"] == 0.0 and reg["keys_per_s"] > 0
        # Every looked-up payload checked; verify found every record (it raises otherwise).
        assert result["point"]["count"] == 50 and result["verify"]["seconds"] > 0
        assert (
            result["floor"]["keys"] == 2000
            and result["bytes"]["ix_records_dataset_id_key_hash"] > 0
        )
