"""Column groups (docs/GROUPS.md) surviving copy and move (phase 2).

A dataset with a base, a group fixed in part (``mode="replace"``), a group
whose entry replaces a base entry, and a dropped group; its copies (across
SQLite and PostgreSQL, local folders and S3 through moto) and its move read
every sample as the source did. Real Dask workers throughout.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import shardcat
from shardcat.reading import Catalog

from .test_groups import add, base, captions, make

N = 24
KEYS = [f"k{i:03d}" for i in range(N)]


def _build(cat: Catalog, root: str, client: Any, **options: Any) -> dict[str, int]:
    """Base, ``captions`` (then 3 fixed), ``labels`` replacing ``cls`` of 4 keys, ``old`` dropped."""
    make(cat, root, client, n=N, **options)
    add(cat, client, captions(KEYS), **options)
    add(cat, client, [{"__key__": k, "extra": b"x"} for k in KEYS[:5]], group="old", **options)
    before_fix = cat.info("train").version
    add(cat, client, captions(KEYS[:3], "fixed"), mode="replace", **options)
    labels = [{"__key__": k, "cls": f"label {k}"} for k in KEYS[4:8]]
    add(cat, client, labels, group="labels", replace_entries=True, **options)
    cat.drop_group("train", "old")
    return {"before_fix": before_fix}


def _merged(cat: Catalog, dataset: str, version: int | None = None) -> dict[str, dict]:
    """Every sample as ``get`` and ``get_many`` return it, merged; both must agree."""
    many = cat.get_many(dataset, KEYS, version=version)
    assert many.ok
    batch = {r.key: (list(r), dict(r.decode())) for r in many.records}
    points = {
        k: (list(rec), dict(rec.decode()))
        for k in KEYS
        for rec in [cat.get(dataset, k, version=version)]
    }
    assert points == batch
    return points


def _expected_state(cat: Catalog, dataset: str) -> None:
    got = _merged(cat, dataset)
    assert got["k001"][1]["txt"] == "fixed k001"
    assert got["k003"][1]["txt"] == "a photo of k003"
    assert got["k005"] == (["jpg", "cls", "txt"], {**got["k005"][1], "cls": "label k005"})
    assert "extra" not in got["k002"][1]  # the dropped group stays dropped
    assert [(g.name, g.records) for g in cat.groups(dataset) if g.dropped_version is None] == [
        ("captions", N),
        ("labels", 4),
    ]
    assert list(cat.get(dataset, "k006", entries=["cls"])) == ["cls"]
    assert cat.get(dataset, "k006", entries=["cls"])["cls"].decode() == "label k006"
    assert cat.count(dataset) == N  # a sample is its base record


def test_copy_carries_groups_local_to_s3_and_back_across_sqlite_and_postgres(
    client, tmp_path, sqlite_url, postgres_url, s3
):
    with Catalog(sqlite_url) as src:
        _build(src, str(tmp_path / "ds"), client)
        expected = _merged(src, "train")
        _expected_state(src, "train")
        there = f"{s3['url']}/copies/train"
        summary = shardcat.copy_dataset(
            src,
            "train",
            there,
            to_catalog=postgres_url,
            destination_options=s3["storage_options"],
            client=client,
        )
        live = len(internal_shards(src, "train"))
        assert summary.shards == live
        with Catalog(postgres_url, storage_options=s3["storage_options"]) as pg:
            assert _merged(pg, "train") == expected
            _expected_state(pg, "train")
            # The copy is one version: both groups were added in it.
            (v,) = [x.number for x in pg.log("train")]
            assert {g.added_version for g in pg.groups("train")} == {v}
            assert pg.verify("train").ok
            shardcat.copy_dataset(
                pg,
                "train",
                str(tmp_path / "back"),
                to_catalog=src,
                name="back",
                storage_options=s3["storage_options"],
                destination_options={},
                client=client,
            )
        assert _merged(src, "back") == expected
        _expected_state(src, "back")
        assert _merged(src, "train") == expected  # the source is untouched
        assert src.verify("back").ok


def internal_shards(cat: Catalog, dataset: str) -> list[Any]:
    from shardcat.catalog import internal

    return [row for row, _ in internal.visible_shards(cat, dataset, with_groups=True)[1]]


def test_copy_within_one_catalog_keeps_the_groups_order_and_adds_to_them_after(
    client, tmp_path, catalog_url
):
    with Catalog(catalog_url) as cat:
        _build(cat, str(tmp_path / "ds"), client)
        expected = _merged(cat, "train")
        shardcat.copy_dataset(cat, "train", str(tmp_path / "copy"), name="copy", client=client)
        assert _merged(cat, "copy") == expected
        _expected_state(cat, "copy")
        # The copy's groups are groups like any: fixed in part, dropped, at new versions.
        copied = cat.info("copy").version
        shardcat.add_entries(
            captions(["k010"], "copy fix"),
            catalog=cat,
            dataset="copy",
            group="captions",
            mode="replace",
            client=client,
            progress=False,
        )
        assert cat.get("copy", "k010")["txt"].decode() == "copy fix k010"
        assert cat.get("train", "k010")["txt"].decode() == "a photo of k010"
        cat.drop_group("copy", "labels")
        assert cat.get("copy", "k005")["cls"].decode() == base(N)[5]["cls"]
        assert _merged(cat, "copy", version=copied) == expected


def test_move_repoints_group_shards_and_every_kept_version_reads_them(
    client, tmp_path, catalog_url
):
    with Catalog(catalog_url) as cat:
        versions = _build(cat, str(tmp_path / "ds"), client)
        expected = _merged(cat, "train")
        older = _merged(cat, "train", version=versions["before_fix"])
        assert older["k001"][1]["txt"] == "a photo of k001"
        summary = shardcat.copy_dataset(
            cat, "train", str(tmp_path / "moved"), move=True, client=client
        )
        assert summary.moved and summary.sources_left == []
        rows = cat.shards("train", state=None)
        assert all(r.url.startswith(str(tmp_path / "moved")) for r in rows)
        assert any("/train.captions-" in r.url for r in rows)
        assert not list(Path(tmp_path / "ds").rglob("*.shard"))
        assert _merged(cat, "train") == expected
        _expected_state(cat, "train")
        # The version before the fix, and the one that still had the dropped group, moved too.
        assert _merged(cat, "train", version=versions["before_fix"]) == older
        assert older["k002"][1]["extra"] == b"x"
        assert cat.verify("train").ok
        assert cat.verify("train", version=versions["before_fix"]).ok


def test_move_on_s3_with_groups(client, s3, sqlite_url):
    url = f"{s3['url']}/datasets/train"
    opts = s3["storage_options"]
    with Catalog(sqlite_url, storage_options=opts) as cat:
        _build(cat, url, client, storage_options=opts)
        expected = _merged(cat, "train")
        shardcat.copy_dataset(cat, "train", f"{s3['url']}/moved/train", move=True, client=client)
        assert all("/moved/train/" in r.url for r in cat.shards("train", state=None))
        assert _merged(cat, "train") == expected
        assert cat.verify("train").ok
