"""benchmarks/bench_footprint.py runs at a tiny size: every key mode, both catalogs.

No size is asserted as a goal: what is checked is that each mode was measured in a
catalog of its own, that an unsorted dataset's key index is empty and its table holds
the key text, and that a hash-only dataset's rows hold no key text (its key index is
empty, its table smaller).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_footprint import main  # noqa: E402


def test_bench_footprint_measures_every_key_mode(postgres_server, capsys):
    figures = main(["--keys", "3000", "--reindex", "--postgres", postgres_server])
    assert set(figures) == {
        f"{db} keys={mode}{again}"
        for mode in ("text", "unsorted", "hash")
        for db, again in (("sqlite", ""), ("postgresql", ""), ("postgresql", " reindexed"))
    }
    for name, fp in figures.items():
        assert fp.rows == 3000, name
    for db in ("sqlite", "postgresql"):
        text, unsorted, hashed = (figures[f"{db} keys={m}"] for m in ("text", "unsorted", "hash"))
        assert text.indexes["ix_records_dataset_id_key"] > 0
        # Empty: SQLite's b-tree keeps its root page, PostgreSQL's index its metapage and root.
        assert unsorted.indexes["ix_records_dataset_id_key"] <= 2 * 8192
        assert hashed.indexes["ix_records_dataset_id_key"] <= 2 * 8192
        # The unsorted table keeps the key text (a byte or so of its flag besides).
        assert unsorted.table >= text.table and unsorted.total < text.total
        assert hashed.table < unsorted.table and hashed.total < unsorted.total
    assert "sqlite keys=hash" in capsys.readouterr().out
