"""The readers given "a Catalog or its URL" close a catalog they opened, and only that one.

Planning readers (index_fields, to_dask_dataframe, ShardIterableDataset)
close it before they return; KeySamples and KeyDataset read through it for
their lifetime and close it with ``close()``, a ``with`` block, or when
they are garbage collected. Open or closed is read from this process's
descriptors on the SQLite file (``_openfiles``).
"""

from __future__ import annotations

import gc
import pickle
from typing import Any

import pytest

import shardcat
from _openfiles import catalog_given, needs_proc, sqlite_files_open
from shardcat.errors import CatalogClosedError, DatasetNotFoundError
from shardcat.readers import KeySamples, index_fields
from shardcat.reading import Catalog

from .conftest import key, make_dataset

pytestmark = needs_proc

KINDS = ["url", "catalog"]


@pytest.fixture
def url(tmp_path: Any) -> str:
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url) as cat:
        make_dataset(cat, str(tmp_path / "train"))
    return url


@pytest.mark.parametrize("kind", KINDS)
def test_index_fields_and_to_dask_dataframe(url, kind):
    with catalog_given(kind, url) as catalog:
        assert index_fields(catalog, "train", {"label": int}) > 0
    with catalog_given(kind, url) as catalog:
        df = shardcat.to_dask_dataframe(catalog, "train", where="label = 3")
    assert sqlite_files_open(url) == 0
    assert set(df.compute(scheduler="sync")["json.label"]) == {3}
    with catalog_given(kind, url) as catalog, pytest.raises(DatasetNotFoundError):
        index_fields(catalog, "nope", {"label": int})


@pytest.mark.parametrize("kind", KINDS)
def test_key_samples_close_what_they_opened_and_only_that(url, kind):
    with catalog_given(kind, url) as catalog:
        samples = KeySamples(catalog, "train")
        assert samples[3]["json"]["i"] == 3
        samples.close()
        samples.close()  # idempotent
        if kind == "catalog":
            assert samples.get(key(4))["json"]["i"] == 4  # the caller's catalog: still open
        else:
            with pytest.raises(CatalogClosedError):
                samples.get(key(4))
    where = {"where": "key < :k", "params": {"k": key(5)}}
    with catalog_given(kind, url) as catalog, KeySamples(catalog, "train", **where) as samples:
        assert len(samples) == 5 and samples.getitems([0, 4])[1]["json"]["i"] == 4
    # Refused while it opens: closed all the same.
    with catalog_given(kind, url) as catalog, pytest.raises(DatasetNotFoundError):
        KeySamples(catalog, "nope", version=1)


def test_key_samples_dropped_unclosed_close_their_catalog(url):
    samples = KeySamples(url, "train")
    assert samples[0] is not None and sqlite_files_open(url) > 0
    del samples
    gc.collect()
    assert sqlite_files_open(url) == 0


def test_a_pickled_copy_owns_the_catalog_it_reopened(url):
    with Catalog(url) as cat:
        samples = KeySamples(cat, "train")
        copy = pickle.loads(pickle.dumps(samples))
        assert copy.catalog is not cat and copy[2]["json"]["i"] == 2
        copy.close()
        with pytest.raises(CatalogClosedError):
            copy[2]
        assert samples[2]["json"]["i"] == 2  # the original's catalog is the caller's, open
    assert sqlite_files_open(url) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_torch_datasets(url, kind):
    pytest.importorskip("torch")
    from shardcat.torch import KeyDataset, ShardIterableDataset

    with catalog_given(kind, url) as catalog:
        stream = ShardIterableDataset(catalog, "train", shuffle=False)
    # Planned and closed: iterating needs no catalog; one sample taken, the rest abandoned.
    it = iter(stream)
    assert next(it)["json"]["i"] == 0
    del it
    assert sqlite_files_open(url) == 0
    with catalog_given(kind, url) as catalog, pytest.raises(DatasetNotFoundError):
        ShardIterableDataset(catalog, "nope")
    with catalog_given(kind, url) as catalog, KeyDataset(catalog, "train") as ds:
        assert ds[1]["json"]["i"] == 1 and len(ds.__getitems__([0, 2])) == 2
