"""Every operation given "a Catalog or its URL" closes a catalog it opened, and only that one.

The catalog is a SQLite file; whether this process still holds it open is
read from its descriptors (``_openfiles``). Dask tasks run on worker
processes (the module's LocalCluster), so only what the operation itself
opened in this process is counted.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import shardcat
from _openfiles import catalog_given, needs_proc, sqlite_files_open
from shardcat.errors import CatalogClosedError, DatasetExistsError, DatasetNotFoundError
from shardcat.orchestration.gc import delete_dataset, gc
from shardcat.orchestration.taridx_io import export_taridx, import_taridx
from shardcat.reading import Catalog
from shardcat.testing.tars import write_wds_tar

pytestmark = needs_proc

KINDS = ["url", "catalog"]


@pytest.fixture
def url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


def samples(n: int = 30, start: int = 0) -> list[dict[str, Any]]:
    return [{"__key__": f"k/{i:04d}", "txt": f"sample {i}"} for i in range(start, start + n)]


def written(url: str, root: str, client: Any) -> None:
    shardcat.write(samples(), root, catalog=url, dataset="d", client=client, progress=False)
    assert sqlite_files_open(url) == 0


def test_opened_yields_a_catalog_as_it_is_and_closes_only_what_it_opened(url):
    with Catalog(url) as cat:
        with Catalog.opened(cat) as same:
            assert same is cat
        assert cat.datasets() == []  # left open
    with Catalog.opened(url) as cat:
        assert cat.datasets() == [] and sqlite_files_open(url) > 0
    assert sqlite_files_open(url) == 0
    with pytest.raises(CatalogClosedError):
        cat.datasets()
    with pytest.raises(DatasetNotFoundError), Catalog.opened(url) as cat:
        cat.dataset("nope")
    assert sqlite_files_open(url) == 0  # closed on an error too
    with Catalog.opened(url, create=False, storage_options={"anon": True}) as cat:
        assert cat.storage_options == {"anon": True}


@pytest.mark.parametrize("kind", KINDS)
def test_write_and_delete_keys(client, tmp_path, url, kind):
    with catalog_given(kind, url) as catalog:
        shardcat.write(
            samples(), str(tmp_path / "d"), catalog=catalog, dataset="d", client=client,
            progress=False,
        )  # fmt: skip
    with catalog_given(kind, url) as catalog:
        assert shardcat.delete_keys(catalog, "d", ["k/0000"]) == 2
    # A failing call closes it too.
    with catalog_given(kind, url) as catalog, pytest.raises(DatasetNotFoundError):
        shardcat.delete_keys(catalog, "nope", ["k/0000"])


@pytest.mark.parametrize("kind", KINDS)
def test_dataset_writer_on_success_and_on_error(tmp_path, url, kind):
    with (
        catalog_given(kind, url) as catalog,
        shardcat.DatasetWriter(catalog, "w", str(tmp_path / "w")) as w,
    ):
        for s in samples(5):
            w.write(s)
    assert w.summary is not None and w.summary.records == 5
    with catalog_given(kind, url) as catalog:
        w = shardcat.DatasetWriter(catalog, "w", str(tmp_path / "w"), mode="append")
        w.write(samples(1, start=100)[0])
        with pytest.raises(RuntimeError, match="stop"), w:
            raise RuntimeError("stop")
    # Refused when it opens: closed all the same.
    with catalog_given(kind, url) as catalog, pytest.raises(DatasetExistsError):
        shardcat.DatasetWriter(catalog, "w", str(tmp_path / "w"))


@pytest.mark.parametrize("kind", KINDS)
def test_read_plans_then_closes_and_its_bag_still_reads(client, tmp_path, url, kind):
    written(url, str(tmp_path / "d"), client)
    with catalog_given(kind, url) as catalog:
        bag = shardcat.read(catalog, "d")
    # Taken one record from and abandoned: the bag holds shard URLs, never the catalog.
    assert len(bag.take(1, npartitions=-1)) == 1
    assert sqlite_files_open(url) == 0
    assert sorted(r["__key__"] for r in bag.compute()) == [s["__key__"] for s in samples()]


@pytest.mark.parametrize("kind", KINDS)
def test_gc_delete_dataset_and_compact(client, tmp_path, url, kind):
    written(url, str(tmp_path / "d"), client)
    shardcat.delete_keys(url, "d", [f"k/{i:04d}" for i in range(20)])
    with catalog_given(kind, url) as catalog:
        summary = shardcat.compact(catalog, "d", min_live=1.0, client=client)
    assert summary.records == 10
    with catalog_given(kind, url) as catalog:
        gc(catalog, "d", dry_run=True, grace=dt.timedelta(0))
    with catalog_given(kind, url) as catalog:
        delete_dataset(catalog, "d")


@pytest.mark.parametrize("kind", KINDS)
def test_copy_dataset_closes_both_catalogs_it_opened(client, tmp_path, url, kind):
    written(url, str(tmp_path / "d"), client)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    with catalog_given(kind, url) as catalog, catalog_given(kind, other) as to_catalog:
        summary = shardcat.copy_dataset(
            catalog, "d", str(tmp_path / "copy"), to_catalog=to_catalog, client=client
        )
    assert summary.records == 30
    with catalog_given(kind, url) as catalog:
        shardcat.copy_dataset(catalog, "d", str(tmp_path / "moved"), move=True, client=client)


@pytest.mark.parametrize("kind", KINDS)
def test_index_tar_and_taridx_export_import(client, tmp_path, url, kind):
    tar = str(write_wds_tar(tmp_path / "a-000000.tar", n=12))
    with catalog_given(kind, url) as catalog:
        shardcat.index_tar(tar, catalog=catalog, dataset="t", client=client)
    with catalog_given(kind, url) as catalog:
        done = export_taridx(catalog, "t", str(tmp_path / "t.taridx"))
    index, tars = done.index, done.tars
    assert tars == [tar] and len(index.rows) > 0
    with catalog_given(kind, url) as catalog:
        summary = import_taridx(
            catalog, str(tmp_path / "t.taridx"), tar, dataset="u", client=client
        )
    assert summary.records == 12
