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


def test_read_of_a_tar_dataset_sees_each_version_exactly(catalog_url: str, tmp_path: Path) -> None:
    """A tar's catalog rows outlive its deleted records: the read leaves out those its version hides."""
    from readers.conftest import make_tar_dataset
    from shardcat.testing.tars import wds_samples

    with Catalog(catalog_url) as cat:
        tars = make_tar_dataset(cat, tmp_path / "wds")
        every = [s["__key__"] for t in tars for s in wds_samples(t)]
        before = cat.dataset("wds").info().version
        # The first sample of a tar, one inside another, the last of the third.
        gone = [every[0], every[20], every[-1]]
        cat.delete_keys("wds", gone)

        def keys(version: int | None = None) -> list[str]:
            bag = shardcat.read(cat, "wds", entries=["cls"], version=version)
            return sorted(s["__key__"] for s in bag.compute(scheduler="processes"))

        assert keys(before) == sorted(every)
        assert keys() == sorted(k for k in every if k not in gone)
