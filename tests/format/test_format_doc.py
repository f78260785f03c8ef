"""docs/FORMAT.md stays true: its offset tables and worked example are checked against the code."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_format_doc_tables_and_worked_example_match_the_code():
    p = subprocess.run(
        [sys.executable, str(ROOT / "docs" / "tools" / "format_example.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "up to date" in p.stdout
