"""benchmarks/bench_commit_scale.py (issue 33's commit at scale) runs end to end at a tiny size.

SQLite: a job of 3,000 keys built in SQL under real staged shards, committed over 2,000
committed ones; the commit's statements are timed and explained, and the rows it committed
are the ones the script built. (Their hashes are not the keys' xxHash: lookups by key do not
find them, and the benchmark times no lookup.) No speed is asserted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import sqlalchemy as sa

import shardcat

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_commit_scale  # noqa: E402


def test_bench_commit_scale_commits_what_it_built(tmp_path, capsys):
    out = tmp_path / "commit.json"
    scratch = tmp_path / "scratch"
    argv = ["--keys", "3000", "--base-keys", "2000", "--shards", "3", "--scratch", str(scratch)]
    figures = bench_commit_scale.main([*argv, "--keep", "--explain", "--json", str(out)])
    assert json.loads(out.read_text()) == figures
    assert figures["keys"] == 3000 and figures["commit_s"] > 0
    assert any("key_hash" in s for s in figures["statements"])
    assert figures["plans"] and "commit of 3,000 keys" in capsys.readouterr().out
    with shardcat.Catalog(f"sqlite:///{scratch}/catalog.db") as cat:
        # Both jobs' built keys and each shard's real seed record.
        assert cat.count(bench_commit_scale.DATASET) == 5000 + 2 * 3
        with cat.engine.connect() as c:
            distinct = c.execute(
                sa.text("SELECT count(DISTINCT key_hash), count(DISTINCT key) FROM records")
            ).one()
            built = c.execute(
                sa.text("SELECT min(key), max(key) FROM records WHERE key LIKE 'img/%'")
            )
            assert tuple(built.one()) == ("img/000000000", "img/000004999")
        assert tuple(distinct) == (5006, 5006)


def test_built_keys_of_one_hash_are_compared_by_text_and_commit(tmp_path, monkeypatch):
    # Every built key shares one hash: the commit compares their text, finds no repeat.
    monkeypatch.setattr(bench_commit_scale, "_HASH", "0")
    figures = bench_commit_scale.main(["--keys", "50", "--shards", "2", "--scratch", str(tmp_path)])
    assert any("key_hash IN (0)" in s for s in figures["statements"])
    with shardcat.Catalog(f"sqlite:///{tmp_path}/catalog.db") as cat:
        assert cat.count(bench_commit_scale.DATASET) == 50 + 2
