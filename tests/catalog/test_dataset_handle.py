"""``cat.dataset(name)``: a handle whose methods are the catalog's with the name bound (real files, SQLite and PostgreSQL)."""

from __future__ import annotations

import warnings

import pytest

from shardcat.catalog import DatasetInfo, internal
from shardcat.errors import DatasetNotFoundError, KeyNotFoundError
from shardcat.reading import Dataset

from .helpers import make_dataset, sample, shard_keys


def test_the_handle_reads_and_queries_as_the_catalog_does(cat, local_root):
    make_dataset(cat, local_root, 2)
    train = cat.dataset("train")
    assert isinstance(train, Dataset) and train.name == "train" and train.catalog is cat
    key = shard_keys(1)[7]
    assert (
        train.get(key).decode() == cat.get("train", key).decode() == {"__key__": key, **sample(key)}
    )
    assert train.get(key, ["txt"])["txt"].decode() == f"text of {key}"
    asked = [shard_keys(0)[3], "nope", key]
    assert [r.key if r else None for r in train.get_many(asked)] == [shard_keys(0)[3], None, key]
    assert train.locate(key) == cat.locate("train", key)
    assert list(train.keys(prefix="img/001/", limit=3)) == shard_keys(1)[:3]
    assert train.count() == cat.count("train") == 2 * len(shard_keys(0))
    assert train.count(prefix="img/000/") == len(shard_keys(0))
    chosen = train.select("key = :k", {"k": key})
    assert chosen.count == 1
    assert train.where("key = :k", {"k": key}).count == 1
    assert train.shards() == cat.shards("train")
    assert train.entry_kinds() == cat.entry_kinds("train")
    assert train.fields() == {}
    assert train.info() == cat.info("train")
    report = train.verify()
    assert report.ok and report.shards_checked == 2
    with pytest.raises(KeyNotFoundError):
        train.get("nope")


def test_the_handle_keeps_versions(cat, local_root):
    make_dataset(cat, local_root, 2)
    train = cat.dataset("train")
    first = train.info().version
    gone = shard_keys(0)[:3]
    second = train.delete_keys(gone, message="drop three")
    assert second == first + 1 and train.info().version == second  # the handle sees new commits
    assert [v.number for v in train.log()] == [v.number for v in cat.log("train")]
    assert train.tag(first, "before") == first
    assert train.get(gone[0], version="before").key == gone[0]
    with pytest.raises(KeyNotFoundError):
        train.get(gone[0])
    diff = train.diff("before", second, keys=True)
    assert diff == cat.diff("train", "before", second, keys=True) and diff.removed == 3
    assert train.untag("before") == first
    assert train.expire(keep_last=1, dry_run=True) == cat.expire("train", keep_last=1, dry_run=True)
    assert [s.url for s in train.shards(version=first)] == [s.url for s in cat.shards("train")]
    with pytest.raises(ValueError, match="committed"):
        train.shards(None, version=first)


def test_stats_are_what_the_version_reads(cat, local_root):
    make_dataset(cat, local_root, 2)
    train = cat.dataset("train")
    train.delete_keys(shard_keys(1)[:4])
    stats = train.stats()
    number, visible = internal.visible_shards(cat, "train")
    assert stats.version == number == train.info().version
    assert stats.shards == [row for row, _ in visible]
    assert stats.hidden_records == 4
    assert stats.record_count == train.count() == 2 * len(shard_keys(0)) - 4
    assert stats.size_bytes == sum(s.size_bytes for s in cat.shards("train"))
    assert stats.entry_kinds == cat.entry_kinds("train")
    assert train.stats(version=1).hidden_records == 0


def test_an_unknown_dataset_fails_when_the_handle_is_made(cat, local_root):
    make_dataset(cat, local_root, 1)
    with pytest.raises(DatasetNotFoundError, match="'train'"):
        cat.dataset("nope")
    with pytest.raises(DatasetNotFoundError):
        cat.info("nope")


def test_the_rows_fields_on_the_handle_still_work_with_a_warning(cat, local_root):
    make_dataset(cat, local_root, 1)
    row = cat.info("train")
    assert isinstance(row, DatasetInfo)
    train = cat.dataset("train")
    for field in ("id", "root_url", "format_version", "version", "properties", "created_at"):
        with pytest.warns(DeprecationWarning, match=r"cat\.info\('train'\)"):
            assert getattr(train, field) == getattr(row, field)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert train.name == "train"  # the handle's own: no warning
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = train.nope


def test_internal_methods_still_work_with_a_warning(cat, local_root):
    make_dataset(cat, local_root, 2)
    shard = cat.shards("train")[0]
    with pytest.warns(DeprecationWarning, match=r"internal\.record_rows"):
        rows = cat.record_rows(shard.id)
    assert rows == internal.record_rows(cat, shard.id)
    with pytest.warns(DeprecationWarning, match=r"internal\.visible_shards"):
        assert cat.visible_shards("train") == internal.visible_shards(cat, "train")
    with pytest.warns(DeprecationWarning, match=r"internal\.set_dataset_root"):
        cat.set_dataset_root("train", local_root + "/moved")
    assert cat.info("train").root_url == local_root + "/moved"
    with pytest.warns(DeprecationWarning, match=r"internal\.purge_shards"):
        assert cat.purge_shards("train", [shard.url]) == 0  # committed shards are never purged
    with pytest.warns(DeprecationWarning, match=r"internal\.copy_fields"):
        assert cat.copy_fields("train", shard.id, []) == 0
    version = cat.info("train").version
    with pytest.warns(DeprecationWarning, match=r"internal\.move_shards"):
        moved = cat.move_shards(
            "train", {}, expected_version=version, root_url=local_root + "/again"
        )
    assert moved == version + 1 and cat.info("train").root_url == local_root + "/again"
