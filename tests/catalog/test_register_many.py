"""Catalog.register_shards: many shards in one transaction, one version, all or nothing (issue 10)."""

from __future__ import annotations

import pytest

from shardcat import Catalog
from shardcat.errors import DuplicateKeyError

from .helpers import write_shard
from .test_register_statements import MANIFEST_STATEMENTS, statements

BULK_STATEMENTS = 12 + MANIFEST_STATEMENTS
"""register_shards: fixed statements, plus one shard row per shard (a loop of register_shard
sends up to 13 per shard); the records' bulk inserts are not counted (see test_register_statements)."""


def test_shards_registered_together_are_one_version(catalog_url, local_root):
    infos = [
        write_shard(f"{local_root}/s{i}.shard", [f"s{i}/{k}" for k in range(30)]) for i in range(3)
    ]
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        with statements(cat) as sent:
            rows = cat.register_shards("train", infos)
        assert 0 < len(sent) <= BULK_STATEMENTS + len(infos), sent
        assert [r.url for r in rows] == [i.path for i in infos]
        assert all(r.state == "committed" and r.record_count == 30 for r in rows)
        assert len({r.added_version for r in rows}) == 1
        log = cat.log("train")
        assert [v.number for v in log] == [1]
        assert (log[0].total_records, log[0].records_added) == (90, 90)
        assert cat.get("train", "s2/29").key == "s2/29"
        assert cat.register_shards("train", []) == []


def test_a_key_in_two_of_the_shards_registers_nothing(catalog_url, local_root):
    a = write_shard(f"{local_root}/a.shard", ["x", "y"])
    b = write_shard(f"{local_root}/b.shard", ["z", "y"])
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        with pytest.raises(DuplicateKeyError, match="registered together") as e:
            cat.register_shards("train", [a, b])
        assert e.value.keys == ["y"]
        assert cat.shards("train", state=None) == [] and cat.log("train") == []


def test_a_key_already_committed_registers_nothing(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        cat.register_shard("train", write_shard(f"{local_root}/a.shard", ["x", "y"]))
        b = write_shard(f"{local_root}/b.shard", ["p", "q"])
        c = write_shard(f"{local_root}/c.shard", ["r", "x"])
        with pytest.raises(DuplicateKeyError) as e:
            cat.register_shards("train", [b, c])
        assert e.value.keys == ["x"]
        assert [r.url for r in cat.shards("train")] == [f"{local_root}/a.shard"]
        assert [v.number for v in cat.log("train")] == [1]
        assert cat.get_many("train", ["p", "r"]).missing == ["p", "r"]


def test_a_taken_or_repeated_url_registers_nothing(catalog_url, local_root):
    a = write_shard(f"{local_root}/a.shard", ["x"])
    b = write_shard(f"{local_root}/b.shard", ["y"])
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", local_root)
        with pytest.raises(DuplicateKeyError, match="more than once"):
            cat.register_shards("train", [a, b, a])
        cat.register_shard("train", a)
        with pytest.raises(DuplicateKeyError, match="already committed"):
            cat.register_shards("train", [b, a])
        assert [r.url for r in cat.shards("train")] == [a.path]
        assert cat.count("train") == 1
