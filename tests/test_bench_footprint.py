"""benchmarks/bench_footprint.py runs at a tiny size: both key modes, both catalogs.

No size is asserted as a goal: what is checked is that each mode was measured in a
catalog of its own, and that a hash-only dataset's rows hold no key text (its key
index is empty, its table smaller).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_footprint import main  # noqa: E402


def test_bench_footprint_measures_both_key_modes(postgres_server, capsys):
    figures = main(["--keys", "3000", "--reindex", "--postgres", postgres_server])
    assert set(figures) == {
        "sqlite keys=text",
        "sqlite keys=hash",
        "postgresql keys=text",
        "postgresql keys=text reindexed",
        "postgresql keys=hash",
        "postgresql keys=hash reindexed",
    }
    for name, fp in figures.items():
        assert fp.rows == 3000, name
    for db in ("sqlite", "postgresql"):
        text, hashed = figures[f"{db} keys=text"], figures[f"{db} keys=hash"]
        assert text.indexes["ix_records_dataset_id_key"] > 0
        # Empty: SQLite's b-tree keeps its root page, PostgreSQL's index its metapage and root.
        assert hashed.indexes["ix_records_dataset_id_key"] <= 2 * 8192
        assert hashed.table < text.table and hashed.total < text.total
    assert "sqlite keys=hash" in capsys.readouterr().out
