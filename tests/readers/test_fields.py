"""index_fields: declared fields filled from a JSON entry, then chosen with where= by every reader."""

from __future__ import annotations

import pytest

import shardcat
from shardcat.errors import CatalogError
from shardcat.readers import SampleStream, index_fields, plan_tasks
from shardcat.reading import Catalog

from .conftest import make_dataset


def test_index_fields_makes_label_a_column_of_where(catalog_url, tmp_path):
    with Catalog(catalog_url) as cat:
        keys = make_dataset(cat, str(tmp_path / "shards"))
        assert index_fields(cat, "train", {"label": int, "i": int}) == 2 * len(keys)
        assert cat.fields("train") == {"i": "number", "label": "number"}
        chosen = cat.select("train", "label = 3")
        assert chosen.count == len(range(3, len(keys), 5))
        stream = SampleStream(
            tuple(plan_tasks(cat, "train", "label = :l", {"l": 3})), shuffle=False
        )
        got = [s["json"]["i"] for s in stream.iter_reader(0)]
        assert got == list(range(3, len(keys), 5))
        df = shardcat.to_dask_dataframe(cat, "train", where="label = 3 AND i < 20")
        assert df.compute(scheduler="sync")["json.i"].tolist() == [3, 8, 13, 18]
        # Running it again replaces the values: nothing doubles.
        index_fields(cat, "train", {"label": int})
        assert cat.select("train", "label = 3").count == chosen.count


def test_a_value_of_another_type_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Catalog(url) as cat:
        make_dataset(cat, str(tmp_path / "shards"), sizes=(3,))
    with pytest.raises(CatalogError, match="holds text values"):
        index_fields(url, "train", {"label": str})
