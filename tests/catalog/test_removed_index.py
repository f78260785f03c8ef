"""Revision 0007: removed records are found through a partial index, not a scan of the dataset."""

from __future__ import annotations

import sqlalchemy as sa

from shardcat.catalog import check, downgrade, head_revision, internal, upgrade
from shardcat.reading import Catalog

from .helpers import make_dataset, shard_keys

_HIDDEN = (
    "SELECT r.shard_id, r.byte_offset FROM records r WHERE r.dataset_id = :d "
    "AND r.removed_version IS NOT NULL AND r.removed_version <= :v"
)
_INDEX = "ix_records_dataset_id_removed_version"


def _plan(cat: Catalog) -> str:
    with cat.engine.connect() as conn:
        if cat.engine.dialect.name == "sqlite":
            rows = conn.execute(sa.text("EXPLAIN QUERY PLAN " + _HIDDEN), {"d": 1, "v": 9})
            return " ".join(str(r[-1]) for r in rows)
        # A few rows: make the planner say whether it can use the index at all.
        conn.execute(sa.text("SET enable_seqscan = off"))
        return " ".join(r[0] for r in conn.execute(sa.text("EXPLAIN " + _HIDDEN), {"d": 1, "v": 9}))


def _indexes(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return {ix["name"] for ix in sa.inspect(conn).get_indexes("records")}


def test_upgrade_from_0006_indexes_the_records_already_removed(catalog_url, local_root):
    with Catalog(catalog_url) as cat:
        make_dataset(cat, local_root, 2)
        removed = shard_keys(0)[:5]
        cat.delete_keys("train", removed)
    downgrade(catalog_url, "0006")
    engine = sa.create_engine(catalog_url)
    assert _INDEX not in _indexes(engine)
    engine.dispose()
    assert upgrade(catalog_url) == ("0006", head_revision())
    assert check(catalog_url) == []
    with Catalog(catalog_url) as cat:
        assert _INDEX in _indexes(cat.engine)
        assert _INDEX in _plan(cat)
        number, shards = internal.visible_shards(cat, "train")
        assert sum(len(hidden) for _, hidden in shards) == 5
        got = cat.get_many("train", shard_keys(0))
        assert sorted(got.missing) == sorted(removed)
        assert cat.count("train") == 2 * len(shard_keys(0)) - 5 and number == 3
