"""Declared fields on WebDataset tars indexed in place: at indexing (``fields=``, ``--field``) and after.

Before, ``index_fields(cat, "wds", {"label": int}, entry="json")`` on a tar
dataset failed with ``not a shardcat shard: magic bytes are b'sample00'``
(it opened every shard as a native one), ``index_tar`` took no ``fields=``,
and neither ``shardcat write`` nor ``index-tar`` could declare one. Real tars
(written by webdataset), a real two-process Dask cluster, SQLite and
PostgreSQL, local disk and S3.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import CatalogError
from shardcat.readers import SampleStream, index_fields, plan_tasks
from shardcat.reading import Catalog
from shardcat.testing.tars import write_wds_tar


@pytest.fixture
def tars(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "wds"
    folder.mkdir()
    return [
        write_wds_tar(folder / f"train-{i:06d}.tar", n=30, seed=i, prefix=f"t{i}-")
        for i in range(3)
    ]


def _labelled_tar(path: Path) -> Path:
    """Samples 0-9: ``json`` {"label": i % 3, "split": ...} for even i, no ``json`` for odd i."""
    import webdataset as wds

    with wds.TarWriter(str(path)) as sink:
        for i in range(10):
            sample: dict[str, Any] = {"__key__": f"lab/{i:03d}", "jpg": bytes([i]) * (100 + i)}
            if i % 2 == 0:
                split = "val" if i == 4 else "train"
                sample["json"] = json.dumps({"label": i % 3, "split": split}).encode()
            sink.write(sample)
    return path


def _read_where(cat: Catalog, dataset: str, where: str) -> list[tuple[str, int]]:
    """(key, json i) of every sample a filtered stream yields, by key."""
    tasks = tuple(plan_tasks(cat, dataset, where, None))
    stream = SampleStream(tasks, shuffle=False, catalog=cat.handle())
    return sorted((s["__key__"], s["json"]["i"]) for s in stream.iter_reader(0))


def test_index_fields_fills_a_tar_dataset_in_place(client, catalog_url, tars):
    pattern = str(tars[0].parent / "train-{000000..000002}.tar")
    shardcat.index_tar(pattern, catalog=catalog_url, dataset="wds", client=client)
    with Catalog(catalog_url) as cat:
        assert index_fields(cat, "wds", {"i": int}, entry="json") == 90
        assert cat.fields("wds") == {"i": "number"}
        assert cat.select("wds", "i < 10").count == 30
        expected = sorted((f"t{t}-{i % 3}/sample{i:05d}", i) for t in range(3) for i in range(10))
        assert _read_where(cat, "wds", "i < 10") == expected
        # Again: the values are replaced, not doubled.
        assert index_fields(cat, "wds", {"i": int}) == 90
        assert cat.select("wds", "i = 3").count == 3


def test_index_tar_stores_fields_with_the_commit(client, catalog_url, tmp_path, tars):
    labelled = _labelled_tar(tmp_path / "wds" / "lab-000000.tar")
    summary = shardcat.index_tar(
        [str(labelled), str(tars[0])],
        catalog=catalog_url,
        dataset="wds",
        client=client,
        fields={"label": int, "split": str, "i": int},
    )
    assert summary.records == 40
    with Catalog(catalog_url) as cat:
        assert cat.fields("wds") == {"i": "number", "label": "number", "split": "text"}
        chosen = cat.select("wds", "label = 1")
        assert sorted(k for keys in chosen.keys.values() for k in keys) == ["lab/004"]
        val = cat.select("wds", "split = 'val'")
        assert [k for keys in val.keys.values() for k in keys] == ["lab/004"]
        # Samples without a json member, or without the field, have NULL there.
        unlabelled = cat.select("wds", "label IS NULL AND shard_url = :u", {"u": str(labelled)})
        assert sorted(k for keys in unlabelled.keys.values() for k in keys) == [
            f"lab/{i:03d}" for i in range(1, 10, 2)
        ]
        assert cat.select("wds", "i >= 28").count == 2


def test_a_field_of_the_wrong_type_fails_the_job_and_commits_nothing(client, sqlite_url, tars):
    with pytest.raises(CatalogError, match="holds text values"):
        shardcat.index_tar(
            [str(tars[0])], catalog=sqlite_url, dataset="wds", client=client, fields={"i": str}
        )
    with Catalog(sqlite_url) as cat:
        assert cat.datasets() == []  # the failed first job's dataset went with it


def test_fields_of_tars_on_s3(client, sqlite_url, s3, tars):
    fs = fsspec.filesystem("s3", **s3["storage_options"])
    for t in tars:
        fs.put_file(str(t), f"{s3['bucket']}/wds/{t.name}")
    pattern = f"{s3['url']}/wds/train-{{000000..000002}}.tar"
    opts = s3["storage_options"]
    shardcat.index_tar(
        pattern,
        catalog=sqlite_url,
        dataset="wds",
        storage_options=opts,
        client=client,
        fields={"i": int},
    )
    with Catalog(sqlite_url, storage_options=opts) as cat:
        assert cat.select("wds", "i = 7").count == 3
        shardcat.index_tar(
            pattern, catalog=cat, dataset="later", storage_options=opts, client=client
        )
        assert index_fields(cat, "later", {"i": int}, storage_options=opts) == 90
        assert cat.select("later", "i < 2").count == 6


def test_cli_index_tar_and_write_take_field(client, sqlite_url, tmp_path, tars):
    runner = CliRunner()
    address = client.scheduler.address
    pattern = str(tars[0].parent / "train-{000000..000002}.tar")
    base = ["--catalog", sqlite_url]
    result = runner.invoke(
        app,
        [*base, "index-tar", pattern, "-d", "wds", "--field", "i:int", "--scheduler", address],
    )
    assert result.exit_code == 0, result.output
    files = tmp_path / "files"
    (files / "a").mkdir(parents=True)
    for n in range(6):
        (files / "a" / f"img{n}.jpg").write_bytes(bytes([n]) * 50)
        (files / "a" / f"img{n}.json").write_text(json.dumps({"label": n % 2, "name": f"n{n}"}))
    result = runner.invoke(
        app,
        [
            *base,
            "write",
            str(files),
            str(tmp_path / "shards"),
            "-d",
            "imgs",
            "--field",
            "label:int",
            "--field",
            "name:str",
            "--scheduler",
            address,
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    with Catalog(sqlite_url) as cat:
        assert cat.select("wds", "i = 0").count == 3
        assert cat.fields("imgs") == {"label": "number", "name": "text"}
        ones = cat.select("imgs", "label = 1")
        assert sorted(k for keys in ones.keys.values() for k in keys) == [
            "a/img1",
            "a/img3",
            "a/img5",
        ]
        assert cat.select("imgs", "name = 'n4'").count == 1
    # taridx import indexes tars too: the same option.
    out = tmp_path / "wds.taridx"
    result = runner.invoke(app, [*base, "taridx", "export", "wds", str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(
        app,
        [
            *base,
            "taridx",
            "import",
            str(out),
            "--tars",
            pattern,
            "-d",
            "again",
            "--field",
            "i:int",
            "--scheduler",
            address,
        ],
    )
    assert result.exit_code == 0, result.output
    with Catalog(sqlite_url) as cat:
        assert cat.select("again", "i = 29").count == 3
    for bad in ("label", "label:integer", ":int"):
        result = runner.invoke(app, [*base, "index-tar", pattern, "-d", "x", "--field", bad])
        assert result.exit_code == 2, result.output
        assert "NAME:TYPE" in result.output


def test_a_tar_s_fields_are_read_from_its_json_members_only(
    client, sqlite_url, tmp_path, monkeypatch
):
    """Images of 40 KiB, JSON of a few bytes: the fields cost the JSON, not a second scan."""
    import os

    import webdataset as wds

    from shardcat.orchestration.fields import shard_field_values

    path = tmp_path / "big-000000.tar"
    with wds.TarWriter(str(path)) as sink:
        for i in range(20):
            sink.write(
                {"__key__": f"big/{i:03d}", "jpg": os.urandom(40_000), "json": b'{"i": %d}' % i}
            )
    with Catalog(sqlite_url) as cat:
        shardcat.index_tar([str(path)], catalog=cat, dataset="big", client=client)
        (row,) = cat.shards("big")
        read: list[int] = []
        real = os.pread

        def pread(fd: int, n: int, offset: int) -> bytes:
            read.append(n)
            return real(fd, n, offset)

        monkeypatch.setattr(os, "pread", pread)
        values = shard_field_values(cat, row, ("i",), "json", {})
    assert sorted(v["i"] for _, v in values) == list(range(20))
    assert 0 < sum(read) < 20 * 1024  # the tar is ~820 KB
