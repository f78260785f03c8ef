"""Workers open the catalog the client names: relative SQLite paths, memory, other machines."""

from __future__ import annotations

import os

import pytest

import shardcat
from shardcat.errors import CatalogError
from shardcat.orchestration import reach
from shardcat.reading import Catalog

from .test_write import sample_bag


def test_a_relative_sqlite_path_is_resolved_on_the_client(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Catalog("sqlite:///rel.db") as cat:
        assert cat.handle().url == f"sqlite:///{tmp_path / 'rel.db'}"
        assert cat.url.endswith(f"{tmp_path / 'rel.db'}")
    for url in ("sqlite://", "sqlite:///:memory:", f"sqlite:///{tmp_path / 'abs.db'}"):
        with Catalog(url) as cat:
            assert cat.handle().url == url


def test_workers_in_another_folder_use_the_clients_catalog_file(client, tmp_path, monkeypatch):
    # Workers started elsewhere: with the URL as typed they would each open
    # (and create) their own shardcat.db and fail with "no dataset named ...".
    elsewhere = tmp_path / "workers"
    elsewhere.mkdir()
    (tmp_path / "client").mkdir()
    before = client.run(os.getcwd)
    client.run(os.chdir, str(elsewhere))
    monkeypatch.chdir(tmp_path / "client")
    try:
        summary = shardcat.write(
            sample_bag(2, 50),
            "out",
            catalog="sqlite:///shardcat.db",
            dataset="rel",
            client=client,
            progress=False,
        )
    finally:
        for addr, cwd in before.items():
            client.run(os.chdir, cwd, workers=[addr])
    assert summary.records == 100
    assert not (elsewhere / "shardcat.db").exists()
    with Catalog(f"sqlite:///{tmp_path / 'client' / 'shardcat.db'}") as cat:
        assert cat.get("rel", "s/001/00049").key == "s/001/00049"
        # The shards went to the client's folder too.
        assert all(s.url.startswith(str(tmp_path / "client" / "out")) for s in cat.shards("rel"))


def test_an_in_memory_catalog_is_refused_up_front(tmp_path):
    with Catalog("sqlite://") as cat, pytest.raises(CatalogError, match="in-memory SQLite"):
        shardcat.write(sample_bag(1, 5), str(tmp_path / "out"), catalog=cat, dataset="m")
    assert not (tmp_path / "out").exists()


def test_a_sqlite_file_is_refused_when_workers_run_on_another_machine(
    client, tmp_path, sqlite_url, monkeypatch
):
    # The client pretends to be elsewhere: the workers' real host name differs from it.
    monkeypatch.setattr(reach, "_this_host", lambda: "client-host")
    with pytest.raises(
        CatalogError, match=r"SQLite file on this machine \(client-host\).*PostgreSQL"
    ):
        shardcat.write(
            sample_bag(1, 5),
            str(tmp_path / "out"),
            catalog=sqlite_url,
            dataset="far",
            client=client,
            progress=False,
        )
    assert Catalog(sqlite_url).datasets() == []  # refused before anything was created
    assert not (tmp_path / "out").exists()


def test_a_postgres_catalog_is_fine_from_any_machine(client, tmp_path, postgres_url, monkeypatch):
    monkeypatch.setattr(reach, "_this_host", lambda: "client-host")
    summary = shardcat.write(
        sample_bag(2, 5),
        str(tmp_path / "out"),
        catalog=postgres_url,
        dataset="pg",
        client=client,
        progress=False,
    )
    assert summary.records == 10


def test_read_uses_the_catalogs_storage_options(client, s3, sqlite_url):
    opts = s3["storage_options"]
    shardcat.write(
        sample_bag(2, 20),
        f"{s3['url']}/ds",
        catalog=sqlite_url,
        dataset="s3",
        storage_options=opts,
        client=client,
        progress=False,
    )
    cat = Catalog(sqlite_url, storage_options=opts)
    assert shardcat.read(cat, "s3").count().compute() == 40
