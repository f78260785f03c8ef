"""benchmarks/bench_rebuild_records.py runs at a tiny size on PostgreSQL.

No time is asserted: what is checked is that the catalog went to 0015 and back
with every row, and that 0016's order takes fewer bytes than 0015's.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The benchmarks are a folder of the repository, not of the installed wheel.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.bench_rebuild_records import main  # noqa: E402


def test_bench_rebuild_records_goes_down_and_up_with_every_row(postgres_server, capsys):
    figures = main(["--keys", "3000", "--postgres", postgres_server])
    assert set(figures) == {"registered", "0015", "0016"}
    assert [fp.rows for fp in figures.values()] == [3000, 3000, 3000]
    # Two entries and a 16-character key: 16 bytes of padding a row less in 0016's order.
    assert figures["0016"].table < figures["0015"].table
    assert "to 0016" in capsys.readouterr().out
