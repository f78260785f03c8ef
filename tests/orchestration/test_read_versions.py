"""shardcat.read at a version: records a version does not see are skipped, shard by shard."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardcat
from shardcat.errors import VersionNotFoundError
from shardcat.reading import Catalog


def _commit(cat: Catalog, root: Path, name: str, keys: list[str], **kw: object) -> None:
    job = cat.begin_job("train")
    with shardcat.ShardWriter(str(root / f"{name}.shard")) as w:
        for k in keys:
            w.add(k, {"txt": f"{k}@{name}"})
    cat.register_shard("train", w.close(), job=job)
    cat.commit_job(job, **kw)  # type: ignore[arg-type]


def _read(cat: Catalog, version: int | str | None = None) -> dict[str, str]:
    bag = shardcat.read(cat, "train", version=version)
    return {r["__key__"]: r["txt"] for r in bag.compute(scheduler="sync")}


def test_read_sees_each_version_exactly(catalog_url: str, tmp_path: Path) -> None:
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", str(tmp_path))
        _commit(cat, tmp_path, "one", ["a", "b", "c"])
        _commit(cat, tmp_path, "two", ["a", "d"], on_duplicate="replace")
        _commit(cat, tmp_path, "three", ["d", "e"], on_duplicate="skip")
        cat.delete_keys("train", ["b"])
        cat.tag("train", 2, "second")
        assert _read(cat, 1) == {"a": "a@one", "b": "b@one", "c": "c@one"}
        assert _read(cat, "second") == {"a": "a@two", "b": "b@one", "c": "c@one", "d": "d@two"}
        assert _read(cat) == {"a": "a@two", "c": "c@one", "d": "d@two", "e": "e@three"}
        with pytest.raises(VersionNotFoundError):
            _read(cat, 7)
