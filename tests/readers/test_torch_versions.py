"""``version=``: the torch datasets read a dataset as of a kept version, exactly as ``read`` does."""

from __future__ import annotations

from typing import Any

import pytest

import shardcat
from shardcat.errors import VersionNotFoundError
from shardcat.reading import Catalog

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.torch import KeyDataset, ShardIterableDataset  # noqa: E402


def key_and_text(sample: dict[str, Any]) -> tuple[str, str]:
    # Module level: spawned workers unpickle it by name.
    return sample["__key__"], sample["txt"]


def commit(cat: Catalog, root: str, name: str, keys: list[str], tag: str, **kw: Any) -> int:
    """One job writing ``keys`` with the text ``key@tag``; returns the new version."""
    job = cat.begin_job("train")
    with shardcat.ShardWriter(f"{root}/{name}.shard") as w:
        for k in keys:
            w.add(k, {"txt": f"{k}@{tag}"})
    cat.register_shard("train", w.close(), job=job)
    cat.commit_job(job, **kw)
    return cat.info("train").version


@pytest.fixture
def history(catalog_url: str, tmp_path: Any) -> tuple[str, dict[int, dict[str, str]]]:
    """A dataset with appends, a replace and a delete; each version's expected samples."""
    root = str(tmp_path / "shards")
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", root)
        expect: dict[int, dict[str, str]] = {}
        first = [f"k{i:03d}" for i in range(30)]
        v = commit(cat, root, "a", first, "1")
        expect[v] = {k: f"{k}@1" for k in first}
        more = [f"k{i:03d}" for i in range(30, 45)]
        v = commit(cat, root, "b", more, "2")
        expect[v] = {**expect[v - 1], **{k: f"{k}@2" for k in more}}
        # Replace 10 keys of the first shard and 5 of the second, add 3 new ones.
        changed = [*first[::3], *more[:5], "k900", "k901", "k902"]
        v = commit(cat, root, "c", changed, "3", on_duplicate="replace")
        expect[v] = {**expect[v - 1], **{k: f"{k}@3" for k in changed}}
        gone = [*first[1:8], "k900"]
        v = cat.delete_keys("train", gone)
        expect[v] = {k: t for k, t in expect[v - 1].items() if k not in gone}
        cat.tag("train", v - 2, "before-replace")
    return catalog_url, expect


def test_each_version_yields_exactly_its_samples(history):
    url, expect = history
    assert len(expect) == 4
    for version, samples in expect.items():
        ds = ShardIterableDataset(url, "train", version=version, decode=key_and_text, seed=3)
        got = list(ds)
        assert len(got) == len(ds) == len(samples), version
        assert dict(got) == samples, version
    latest = dict(ShardIterableDataset(url, "train", decode=key_and_text))
    assert latest == expect[max(expect)]
    tagged = dict(ShardIterableDataset(url, "train", version="before-replace", decode=key_and_text))
    assert tagged == expect[min(expect) + 1]


def test_version_agrees_with_read(history):
    pytest.importorskip("dask.bag")
    url, expect = history
    for version in expect:
        bag = shardcat.read(url, "train", version=version)
        read = {s["__key__"]: s["txt"] for s in bag.compute(scheduler="sync")}
        ds = ShardIterableDataset(url, "train", version=version, decode=key_and_text)
        assert dict(ds) == read


def test_where_filters_within_a_version(history):
    url, expect = history
    where = "key < :upto"
    for version, samples in expect.items():
        ds = ShardIterableDataset(
            url, "train", version=version, where=where, params={"upto": "k035"}
        )
        got = {s["__key__"]: s["txt"] for s in ds}
        assert got == {k: t for k, t in samples.items() if k < "k035"}, version


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_version_through_dataloader_workers(history, method):
    url, expect = history
    version = min(expect) + 2  # after the replace: hidden records in two shards
    ds = ShardIterableDataset(url, "train", version=version, decode=key_and_text)
    loader = DataLoader(
        ds, batch_size=4, num_workers=2, multiprocessing_context=method, collate_fn=list
    )
    got = [s for b in loader for s in b]
    assert len(got) == len(expect[version])
    assert dict(got) == expect[version]


def test_key_dataset_reads_a_version(history):
    url, expect = history
    for version, samples in expect.items():
        kd = KeyDataset(url, "train", version=version, decode=key_and_text)
        assert kd.keys == sorted(samples)
        assert [kd[i] for i in range(len(kd))] == sorted(samples.items())
        assert kd.__getitems__([0, len(kd) - 1]) == [
            (kd.keys[0], samples[kd.keys[0]]),
            (kd.keys[-1], samples[kd.keys[-1]]),
        ]
    v1 = min(expect)
    old = KeyDataset(url, "train", version=v1, decode=key_and_text)
    assert old.get("k000") == ("k000", "k000@1")  # replaced later: the old record
    assert old.get("k001") == ("k001", "k001@1")  # deleted later: still there at v1
    chosen = KeyDataset(url, "train", version=v1, where="key >= :k", params={"k": "k025"})
    assert chosen.keys == [f"k{i:03d}" for i in range(25, 30)]


def test_an_unknown_version_is_a_typed_error(history):
    url, expect = history
    with pytest.raises(VersionNotFoundError):
        ShardIterableDataset(url, "train", version=max(expect) + 5)
    with pytest.raises(VersionNotFoundError, match="no tag"):
        ShardIterableDataset(url, "train", version="nope")
    with pytest.raises(VersionNotFoundError):
        KeyDataset(url, "train", version="nope")
    with pytest.raises(VersionNotFoundError):
        ShardIterableDataset(url, "train", version=max(expect) + 5, where="key > 'a'")
