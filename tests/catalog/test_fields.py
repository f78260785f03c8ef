"""Declared per-sample fields (revision 0006): the upgrade from 0003, storage, filters, deletion."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from shardcat.catalog import check, downgrade, head_revision, upgrade
from shardcat.errors import CatalogError
from shardcat.reading import Catalog

from .helpers import make_dataset, shard_keys, write_shard


def test_upgrade_from_0003_keeps_the_data_and_adds_empty_field_tables(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
    downgrade(catalog_url, "0003")
    engine = sa.create_engine(catalog_url)
    with engine.connect() as conn:
        tables = set(sa.inspect(conn).get_table_names())
        assert "record_fields" not in tables and "dataset_fields" not in tables
    engine.dispose()
    assert upgrade(catalog_url) == ("0003", head_revision())
    assert check(catalog_url) == []
    with Catalog(catalog_url) as cat:
        assert cat.get_many("train", shard_keys(0) + shard_keys(1)).ok
        assert cat.fields("train") == {}
        cat.declare_fields("train", {"label": int})
        shard = cat.shards("train")[0]
        offsets = [r.byte_offset for r in _records(cat, shard.id)]
        assert cat.store_fields("train", shard.id, [(o, {"label": 7}) for o in offsets]) == 40
        assert cat.select("train", "label = 7").count == 40


def _records(cat, shard_id):
    with cat.engine.connect() as conn:
        return conn.execute(
            sa.text("SELECT byte_offset FROM records WHERE shard_id = :s ORDER BY byte_offset"),
            {"s": shard_id},
        ).all()


def test_fields_are_columns_of_where_and_null_without_a_value(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        assert cat.declare_fields("train", {"label": int, "split": str, "score": float}) == {
            "label": "number",
            "score": "number",
            "split": "text",
        }
        s0, _ = cat.shards("train")
        offs = [r.byte_offset for r in _records(cat, s0.id)]
        cat.store_fields(
            "train",
            s0.id,
            [
                (o, {"label": i % 3, "split": "val" if i < 5 else "train"})
                for i, o in enumerate(offs)
            ],
        )
        assert cat.select("train", "label = 1").count == len(range(1, 40, 3))
        assert cat.select("train", "split = :s AND label = 0", {"s": "val"}).count == 2
        # Shard 1 has no values: its records are NULL, never equal to anything.
        assert cat.select("train", "label IS NULL").count == 40
        assert cat.select("train", "score IS NULL").count == 80
        # Storing again replaces the shard's values.
        cat.store_fields("train", s0.id, [(offs[0], {"label": 9})])
        assert cat.select("train", "label = 9").count == 1
        assert cat.select("train", "label IS NOT NULL").count == 1


def test_bad_declarations_and_values_are_refused(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        cat.declare_fields("train", {"label": int})
        for name in ("Label", "key", "1x", "a;b", "x" * 65):
            with pytest.raises(CatalogError, match="not allowed"):
                cat.declare_fields("train", {name: int})
        with pytest.raises(CatalogError, match="declared as number"):
            cat.declare_fields("train", {"label": str})
        with pytest.raises(CatalogError, match="int, float, bool or str"):
            cat.declare_fields("train", {"tags": list})
        shard = cat.shards("train")[0]
        with pytest.raises(CatalogError, match="holds number values"):
            cat.store_fields("train", shard.id, [(0, {"label": "three"})])
        with pytest.raises(CatalogError, match="not declared"):
            cat.store_fields("train", shard.id, [(0, {"other": 1})])
        with pytest.raises(CatalogError, match="not a shard of"):
            cat.store_fields("train", shard.id + 99, [])
        assert cat.select("train", "label IS NOT NULL").count == 0


def test_values_go_with_their_records(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 1)
        cat.declare_fields("train", {"label": int})
        job = cat.begin_job("train")
        row = cat.register_shard(
            "train", write_shard(f"{local_root}/x.shard", ["x/1", "x/2"]), job=job
        )
        offs = [r.byte_offset for r in _records(cat, row.id)]
        cat.store_fields("train", row.id, [(o, {"label": 1}) for o in offs])
        # Staged records are invisible to where=, values or not.
        assert cat.select("train", "label = 1").count == 0
        cat.abort_job(job)
        with cat.engine.connect() as conn:
            count = "SELECT count(*) FROM record_fields"
            assert conn.execute(sa.text(count)).scalar_one() == 0
        cat.delete_dataset("train")
        with cat.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM dataset_fields")).scalar_one() == 0
