from __future__ import annotations

from pathlib import Path

import pytest

from .badsamples import write_bad_dataset


@pytest.fixture
def bad_dataset(catalog_url: str, tmp_path: Path) -> str:
    """The catalog of :func:`~.badsamples.write_bad_dataset`'s ``imgs`` (two bad samples of 30)."""
    write_bad_dataset(catalog_url, str(tmp_path / "shards"))
    return catalog_url
