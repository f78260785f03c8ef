"""Column groups (docs/GROUPS.md) rebuilt from the bucket alone (phase 2).

A group's shards name their group in the footer (``column_group``); the
version manifests name each added shard's group and the groups each version
created and dropped. With the catalog lost, ``rebuild_history`` brings back
every kept version with its groups, and ``reindex`` of the shards alone (no
history) brings back the groups of the latest version. Real Dask workers,
SQLite and PostgreSQL, local folders and S3 (moto).
"""

from __future__ import annotations

import pytest

import shardcat
from shardcat.format.info import GROUP_KEY
from shardcat.format.manifest import (
    AddedShard,
    VersionManifest,
    decode_manifest,
    encode_manifest,
)
from shardcat.reading import Catalog

from .test_groups import add, captions, make
from .test_groups_copy import KEYS, N, _build, _expected_state, _merged


def _groups(cat: Catalog) -> list[tuple[str, int, int | None, int]]:
    return [(g.name, g.added_version, g.dropped_version, g.records) for g in cat.groups("train")]


def _rebuild_and_compare(cat: Catalog, root: str) -> None:
    versions = [v.number for v in cat.log("train")]
    before = {v: _merged(cat, "train", version=v) for v in versions}
    groups = _groups(cat)
    assert cat.verify("train").ok
    # The catalog is lost: its rows go, the bucket stays.
    cat.delete_dataset("train")
    cat.create_dataset("train", root)
    rebuilt = cat.rebuild_history("train", root)
    assert rebuilt.versions == sorted(versions)
    assert {v: _merged(cat, "train", version=v) for v in versions} == before
    assert _groups(cat) == groups
    _expected_state(cat, "train")
    report = cat.verify("train")
    assert report.ok, [str(p) for p in report.problems]


def test_every_version_with_its_groups_comes_back_from_the_history(client, tmp_path, catalog_url):
    root = str(tmp_path / "ds")
    with Catalog(catalog_url) as cat:
        _build(cat, root, client)
        _rebuild_and_compare(cat, root)
        # The rebuilt catalog goes on: a group fixed again, its manifest written, verify agrees.
        add(cat, client, captions(["k009"], "after"), mode="replace")
        assert cat.get("train", "k009")["txt"].decode() == "after k009"
        assert cat.verify("train").ok


def test_groups_come_back_from_a_history_on_s3(client, s3, sqlite_url):
    root = f"{s3['url']}/datasets/train"
    opts = s3["storage_options"]
    with Catalog(sqlite_url, storage_options=opts) as cat:
        _build(cat, root, client, storage_options=opts)
        _rebuild_and_compare(cat, root)


@pytest.mark.filterwarnings("ignore::shardcat.errors.HistoryWarning")  # the lost catalog's history
def test_reindex_of_the_shards_alone_tells_group_shards_by_their_footer(
    client, tmp_path, catalog_url
):
    """No history: the latest version's shards, reindexed into an empty catalog."""
    root = tmp_path / "ds"
    lost = tmp_path / "lost.db"
    with Catalog(f"sqlite:///{lost}") as src:
        make(src, str(root), client, n=N)
        add(src, client, captions(KEYS))
        labels = [{"__key__": k, "cls": f"label {k}"} for k in KEYS[4:8]]
        add(src, client, labels, group="labels", replace_entries=True)
        expected = _merged(src, "train")
        shards = [s.url for s in src.shards("train")]
    for path in tmp_path.glob("lost.db*"):
        path.unlink()  # the catalog is lost
    for url in shards:
        with shardcat.open_shard(url) as shard:
            named = shard.info.group
            assert named == (
                "captions" if ".captions-" in url else "labels" if ".labels-" in url else None
            )
    with Catalog(catalog_url) as cat:
        cat.create_dataset("train", str(root))
        cat.reindex("train", shards)
        assert _merged(cat, "train") == expected
        # captions' shards were written first: it is the older group (labels' entry wins).
        assert [(g.name, g.records) for g in cat.groups("train")] == [
            ("captions", N),
            ("labels", 4),
        ]
        assert cat.get("train", "k005")["cls"].decode() == "label k005"
        # Reindexing a group's shard again keeps it the same group's (the live one).
        cat.reindex("train", [u for u in shards if ".labels-" in u])
        assert [g.name for g in cat.groups("train")] == ["captions", "labels"]
        assert _merged(cat, "train") == expected
        assert cat.verify("train").ok


def test_a_base_write_cannot_claim_the_group_key(client, tmp_path, sqlite_url):
    with pytest.raises(ValueError, match=GROUP_KEY):
        shardcat.write(
            [{"__key__": "a", "txt": "x"}],
            str(tmp_path / "ds"),
            catalog=sqlite_url,
            dataset="train",
            metadata={GROUP_KEY: "captions"},
            client=client,
            progress=False,
        )


def test_manifests_name_groups_only_where_there_are_some():
    base = AddedShard("a.shard", "00" * 16, "native", 3, 100, 0)
    plain = VersionManifest(
        1, "write", None, "2026-01-01T00:00:00+00:00", 3, 0, 9, 0, 3, 9, (base,)
    )
    data = encode_manifest(plain)
    assert b"group" not in data  # a manifest without groups reads as it always did
    assert decode_manifest(data, "x") == plain
    group = AddedShard("a.c.shard", "11" * 16, "native", 3, 50, 1, group="captions")
    m = VersionManifest(
        2,
        "add-entries",
        None,
        "2026-01-01T00:00:00+00:00",
        3,
        0,
        5,
        0,
        6,
        14,
        (group,),
        groups_added=("captions",),
        groups_dropped=("old",),
    )
    assert decode_manifest(encode_manifest(m), "x") == m
