"""Fixtures for the catalog tests (helpers live in helpers.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest

from shardcat.reading import Catalog

from .helpers import ReadCounter


@pytest.fixture
def cat(catalog_url: str) -> Iterator[Catalog]:
    c = Catalog(catalog_url)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(params=["local", "memory", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[dict[str, Any]]:
    """Where shards are written: ``{"root": url, "storage_options": {...}}``."""
    if request.param == "local":
        yield {"root": str(tmp_path / "shards"), "storage_options": None, "kind": "local"}
    elif request.param == "memory":
        root = f"memory://shardcat-test-{uuid.uuid4().hex[:10]}"
        yield {"root": root, "storage_options": None, "kind": "memory"}
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)
    else:
        s3 = request.getfixturevalue("s3")
        yield {"root": f"{s3['url']}/train", "storage_options": s3["storage_options"], "kind": "s3"}


@pytest.fixture
def local_root(tmp_path: Any) -> str:
    root = tmp_path / "shards"
    root.mkdir()
    return str(root)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> ReadCounter:
    return ReadCounter(monkeypatch)
