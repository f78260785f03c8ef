"""A shard whose dataset or job row disappears while it is registered gets a typed error."""

from __future__ import annotations

from typing import Any

import pytest

from shardcat import Catalog
from shardcat.catalog.datasets import find_dataset
from shardcat.catalog.register import prepare_shard
from shardcat.catalog.shards import insert_shard
from shardcat.errors import CatalogError, DuplicateKeyError

from .helpers import shard_keys, write_shard


def test_a_shard_whose_job_row_is_gone_is_refused_with_a_typed_error(
    cat: Catalog, tmp_path: Any
) -> None:
    cat.create_dataset("train", str(tmp_path))
    info = write_shard(str(tmp_path / "train-000000.shard"), shard_keys(0, 5))
    prep = prepare_shard(info)

    def register_under_a_missing_job() -> None:
        with cat._uow(write=True) as s:
            ds = find_dataset(s, "train")
            # No such job: its foreign key fails.
            insert_shard(s, ds.id, 987_654_321, prep, key_mode=ds.key_mode)

    with pytest.raises(CatalogError, match="was removed while it was being registered") as got:
        register_under_a_missing_job()
    assert not isinstance(got.value, DuplicateKeyError)
    assert cat.shards("train") == []
    # The catalog is usable afterwards, and the same shard registers.
    cat.register_shard("train", info)
    assert len(cat.shards("train")) == 1
