"""Column groups (docs/GROUPS.md): add_entries, mode="replace", drop_group, merged reads at any version.

Real Dask workers, real SQLite and PostgreSQL catalogs, local folders and S3 (moto).
"""

from __future__ import annotations

import pytest

import shardcat
from shardcat.errors import (
    DuplicateKeyError,
    EntryExistsError,
    GroupNotFoundError,
    KeyNotFoundError,
    UnknownKeysError,
)
from shardcat.reading import Catalog


def base(n: int = 40) -> list[dict]:
    return [{"__key__": f"k{i:03d}", "jpg": b"img" * (i + 1), "cls": str(i % 3)} for i in range(n)]


def captions(keys, text: str = "a photo of") -> list[dict]:
    return [{"__key__": k, "txt": f"{text} {k}"} for k in keys]


def make(cat, root, client, n: int = 40, **options) -> None:
    shardcat.write(
        base(n),
        str(root),
        catalog=cat,
        dataset="train",
        client=client,
        progress=False,
        max_records_per_shard=15,
        **options,
    )


def add(cat, client, samples, group: str = "captions", **options):
    return shardcat.add_entries(
        samples,
        catalog=cat,
        dataset="train",
        group=group,
        client=client,
        progress=False,
        max_records_per_shard=15,
        **options,
    )


def test_add_entries_writes_only_the_group_and_every_read_merges_it(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client)
        before = cat.info("train").version
        keys = [f"k{i:03d}" for i in range(40)]
        summary = add(cat, client, captions(keys))
        assert summary.records == 40 and summary.skipped_keys == 0
        # The group's shards hold only its entries, under the dataset's folder, named for it.
        assert all("/train.captions-" in url for url in summary.shards)
        for url in summary.shards:
            with shardcat.open_shard(url) as shard:
                assert {name for rec in shard for name in rec.entries} == {"txt"}
        v = cat.info("train").version
        assert v == before + 1
        assert cat.log("train")[0].operation == "add-entries"
        assert cat.diff("train", before, v).added == 0  # no sample added: entries of them
        rec = cat.get("train", "k007")
        assert dict(rec.decode()) == {
            "__key__": "k007",
            "jpg": b"img" * 8,
            "cls": "1",
            "txt": "a photo of k007",
        }
        assert list(rec) == ["jpg", "cls", "txt"]  # the base's entries, then the group's
        # The version before the group reads the base alone.
        assert list(cat.get("train", "k007", version=before)) == ["jpg", "cls"]
        # entries= reads only the groups that hold them.
        assert list(cat.get("train", "k007", entries=["txt"])) == ["txt"]
        assert list(cat.get("train", "k007", entries=["cls", "txt"])) == ["cls", "txt"]
        assert list(cat.get("train", "k007", entries=["txt"], version=before)) == []
        many = cat.get_many("train", [*keys[:10], "nope"])
        assert many.missing == ["nope"]
        assert [r["txt"].decode() for r in many.records[:10]] == [
            f"a photo of {k}" for k in keys[:10]
        ]
        assert all(set(r) == {"jpg", "cls", "txt"} for r in many.records[:10])
        old = cat.get_many("train", keys[:10], version=before)
        assert all(set(r) == {"jpg", "cls"} for r in old.records)
        some = cat.get_many("train", keys[:5], entries=["txt"])
        assert all(set(r) == {"txt"} for r in some.records)
        loc = cat.locate("train", "k007")
        assert len(loc.groups) == 1 and "/train.captions-" in loc.groups[0].url
        assert cat.locate("train", "k007", version=before).groups == ()
        assert [e.name for e in cat.describe("train", "k007")] == ["jpg", "cls", "txt"]
        (g,) = cat.groups("train")
        assert (g.name, g.added_version, g.dropped_version, g.records) == ("captions", v, None, 40)


def test_unknown_keys_are_an_error_or_skipped_and_counted(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=10)
        version = cat.info("train").version
        samples = captions(["k001", "k002", "zz1", "zz2"])
        with pytest.raises(UnknownKeysError, match="'zz1', 'zz2'") as err:
            add(cat, client, samples)
        assert err.value.keys == ["zz1", "zz2"]
        assert isinstance(err.value, KeyNotFoundError)
        assert cat.info("train").version == version  # nothing committed
        assert cat.groups("train") == []
        summary = add(cat, client, samples, on_missing="skip")
        assert summary.skipped_keys == 2 and summary.records == 2
        assert cat.get("train", "k001")["txt"].decode() == "a photo of k001"
        assert "txt" not in cat.get("train", "k003")
        with pytest.raises(KeyNotFoundError):
            cat.get("train", "zz1")
        assert cat.groups("train")[0].records == 2


def test_entry_names_the_samples_have_need_replace_entries(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=10)
        fixed = [{"__key__": "k004", "cls": "fixed"}]
        with pytest.raises(EntryExistsError, match="replace_entries") as err:
            add(cat, client, fixed, group="labels")
        assert err.value.names == ["cls"] and err.value.keys == ["k004"]
        before = cat.info("train").version
        add(cat, client, fixed, group="labels", replace_entries=True)
        assert cat.get("train", "k004")["cls"].decode() == "fixed"
        assert cat.get("train", "k004", entries=["cls"])["cls"].decode() == "fixed"
        assert cat.get_many("train", ["k004"]).records[0]["cls"].decode() == "fixed"
        assert (
            cat.get_many("train", ["k004"], entries=["cls"]).records[0]["cls"].decode() == "fixed"
        )
        assert cat.get("train", "k004", version=before)["cls"].decode() == "1"
        assert list(cat.get("train", "k004")) == ["jpg", "cls"]  # replaced in its place
        assert cat.read_part("train", "k004", "cls", 0, 5).tobytes() == b"fixed"


def test_replace_mode_fixes_part_of_a_group_as_a_new_version(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=20)
        keys = [f"k{i:03d}" for i in range(20)]
        add(cat, client, captions(keys))
        first = cat.info("train").version
        with pytest.raises(DuplicateKeyError):  # append: keys the group has already
            add(cat, client, captions(keys[:2], "again"))
        summary = add(cat, client, captions(keys[:3], "fixed"), mode="replace")
        assert summary.records == 3
        second = cat.info("train").version
        assert cat.log("train")[0].operation == "replace-entries"
        assert cat.get("train", "k001")["txt"].decode() == "fixed k001"
        assert cat.get("train", "k005")["txt"].decode() == "a photo of k005"
        assert cat.get("train", "k001", version=first)["txt"].decode() == "a photo of k001"
        got = cat.get_many("train", keys[:4])
        assert [r["txt"].decode() for r in got.records] == [
            "fixed k000",
            "fixed k001",
            "fixed k002",
            "a photo of k003",
        ]
        assert cat.groups("train")[0].records == 20
        with pytest.raises(GroupNotFoundError):
            add(cat, client, captions(keys[:1]), group="nope", mode="replace")
        assert cat.info("train").version == second


def test_drop_group_is_a_version_and_older_versions_keep_reading_it(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=10)
        add(cat, client, captions([f"k{i:03d}" for i in range(10)]))
        with_group = cat.info("train").version
        dropped = cat.drop_group("train", "captions")
        assert dropped == with_group + 1
        assert cat.log("train")[0].operation == "drop-group"
        assert list(cat.get("train", "k003")) == ["jpg", "cls"]
        assert cat.get("train", "k003", version=with_group)["txt"].decode() == "a photo of k003"
        (g,) = cat.groups("train")
        assert (g.dropped_version, g.records) == (dropped, 0)
        with pytest.raises(GroupNotFoundError, match="captions"):
            cat.drop_group("train", "captions")
        # The name may be used again: a new group.
        add(cat, client, captions(["k001"], "new"))
        assert cat.get("train", "k001")["txt"].decode() == "new k001"
        assert [x.name for x in cat.groups("train")] == ["captions", "captions"]
        # Deleting a key removes its records of every group.
        cat.delete_keys("train", ["k001"])
        with pytest.raises(KeyNotFoundError):
            cat.get("train", "k001")


def test_groups_on_s3(client, s3, sqlite_url):
    url = f"{s3['url']}/datasets/train"
    opts = s3["storage_options"]
    with Catalog(sqlite_url, storage_options=opts) as cat:
        make(cat, url, client, n=12, storage_options=opts)
        add(cat, client, captions([f"k{i:03d}" for i in range(12)]), storage_options=opts)
        assert cat.get("train", "k011")["txt"].decode() == "a photo of k011"
        assert list(cat.get("train", "k011")) == ["jpg", "cls", "txt"]
        got = cat.get_many("train", [f"k{i:03d}" for i in range(12)])
        assert got.ok and all(set(r) == {"jpg", "cls", "txt"} for r in got.records)
        assert list(cat.get("train", "k002", entries=["txt"])) == ["txt"]


def test_verify_reindex_and_streaming_of_a_dataset_with_groups(client, tmp_path, catalog_url):
    with Catalog(catalog_url) as cat:
        make(cat, tmp_path / "ds", client, n=20)
        summary = add(cat, client, captions([f"k{i:03d}" for i in range(20)]))
        report = cat.verify("train")
        assert report.ok
        base_shards = len(cat.shards("train")) - len(summary.shards)
        assert report.shards_checked == base_shards + len(summary.shards)  # groups' too
        # Reindex from the shard alone keeps it the group's.
        cat.reindex("train", summary.shards[0])
        assert cat.get("train", "k001")["txt"].decode() == "a photo of k001"
        assert list(cat.get("train", "k001")) == ["jpg", "cls", "txt"]
        # Streaming reads whole samples (tests/orchestration/test_group_reads.py has the rest).
        streamed = shardcat.read(cat, "train").compute(scheduler="sync")
        assert sorted(r["__key__"] for r in streamed) == [f"k{i:03d}" for i in range(20)]
        assert all(r["txt"] == f"a photo of {r['__key__']}" for r in streamed)
        assert cat.count("train") == 20
        cat.drop_group("train", "captions")
        gone = cat.groups("train")[0]
        assert gone.records == 0 and gone.dropped_version == cat.info("train").version
