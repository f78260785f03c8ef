"""A versioned dataset's history lives beside its shards: the catalog is not a single point of failure.

Every commit writes a manifest of its version into ``<root>/_versions/``; with
the catalog's rows gone, ``rebuild_history`` (``shardcat reindex`` of the
folder) brings back every kept version, what each one reads and hides, and
the tags, on SQLite and PostgreSQL, local and S3. ``verify`` compares the
catalog with the manifests.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import pytest
from sqlalchemy import text

import shardcat
from shardcat import Catalog
from shardcat.catalog import deferred_indexes
from shardcat.errors import DatasetExistsError, HistoryWarning
from shardcat.format.manifest import ManifestError
from shardcat.orchestration.gc import delete_dataset

pytestmark = pytest.mark.timeout(300)

KEYS = [f"k{i:03d}" for i in range(110)]


def _samples(numbers: range, tag: str = "") -> list[dict[str, Any]]:
    return [{"__key__": f"k{i:03d}", "txt": f"v{i}{tag}".encode()} for i in numbers]


def _history(cat: Catalog, root: str, opts: dict[str, Any] | None, client: Any) -> None:
    """Every kind of commit: write, append, delete, replace, skip, compact, tag, expire, overwrite."""
    kw: dict[str, Any] = dict(
        catalog=cat,
        dataset="ds",
        progress=False,
        client=client,
        max_records_per_shard=10,
        storage_options=opts,
    )
    shardcat.write(_samples(range(30)), root, **kw)  # v1
    shardcat.write(_samples(range(30, 50)), root, mode="append", **kw)  # v2
    shardcat.delete_keys(cat, "ds", ["k001", "k035"])  # v3
    cat.tag("ds", 3, "after-delete")
    shardcat.write(_samples(range(5, 8), "b"), root, mode="append", on_duplicate="replace", **kw)
    shardcat.write(_samples(range(8, 12), "c"), root, mode="append", on_duplicate="skip", **kw)
    shardcat.delete_keys(cat, "ds", [f"k{i:03d}" for i in range(12, 19)])  # v6
    shardcat.compact(cat, "ds", client=client, storage_options=opts)  # v7
    cat.tag("ds", 7, "compacted")
    shardcat.write(_samples(range(100, 105)), root, mode="overwrite", **kw)  # v8
    shardcat.write(_samples(range(105, 110)), root, mode="append", **kw)  # v9
    cat.expire("ds", keep_last=3)  # keeps 7, 8, 9 and the tagged 3


def _snapshot(cat: Catalog) -> dict[str, Any]:
    versions = {}
    for v in cat.log("ds"):
        found = cat.get_many("ds", KEYS, version=v.number).found()
        versions[v.number] = (
            v.operation,
            v.total_records,
            v.total_bytes,
            v.tags,
            {k: bytes(r["txt"].data) for k, r in found.items()},
        )
    return versions


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Any) -> tuple[str, dict[str, Any] | None]:
    if request.param == "local":
        return str(tmp_path / "shards" / "ds"), None
    s3 = request.getfixturevalue("s3")
    return f"{s3['url']}/shards/ds", s3["storage_options"]


@pytest.mark.parametrize("store", ["local", "s3"], indirect=True)
def test_every_kept_version_and_tag_comes_back_from_the_bucket_alone(
    catalog_url: str, store: tuple[str, dict[str, Any] | None], client: Any
) -> None:
    root, opts = store
    with Catalog(catalog_url, storage_options=opts) as cat:
        with warnings.catch_warnings():
            warnings.simplefilter("error", HistoryWarning)
            _history(cat, root, opts, client)
        before = _snapshot(cat)
        assert sorted(before) == [3, 7, 8, 9]
        assert before[3][3] == ("after-delete",) and before[7][3] == ("compacted",)
        assert cat.verify("ds").ok
        # The catalog is lost: its rows go, the bucket stays.
        cat.delete_dataset("ds")
        cat.create_dataset("ds", root)
        rebuilt = cat.rebuild_history("ds", root)
        assert rebuilt.versions == [3, 7, 8, 9] and rebuilt.latest == 9
        assert rebuilt.tags == {"after-delete": 3, "compacted": 7}
        assert _snapshot(cat) == before
        report = cat.verify("ds")
        assert report.ok, [str(p) for p in report.problems]
        # The rebuilt catalog goes on: a new version, its manifest, and verify agrees.
        shardcat.write(
            _samples(range(40, 42), "d"),
            root,
            catalog=cat,
            dataset="ds",
            mode="append",
            on_duplicate="replace",
            progress=False,
            client=client,
            storage_options=opts,
        )
        assert cat.log("ds")[0].number == 10
        assert cat.verify("ds").ok


def test_a_history_rebuilt_in_bulk_builds_its_key_indexes_after_its_rows(
    sqlite_url: str, tmp_path: Any, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite drops records' key indexes for a large rebuild (catalog/deferred_indexes.py):
    every version reads what it read, and the indexes come back as they were."""
    root = str(tmp_path / "ds")
    with Catalog(sqlite_url) as cat:
        _history(cat, root, None, client)
        before = _snapshot(cat)
        cat.delete_dataset("ds")
        cat.create_dataset("ds", root)
        indexes = "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'records' ORDER BY name"
        with cat._uow() as s:
            schema = s.execute(text(indexes)).all()
        dropped: list[int] = []
        real = deferred_indexes._key_indexes
        monkeypatch.setattr(deferred_indexes, "DEFER_MIN_ROWS", 1)
        monkeypatch.setattr(
            deferred_indexes, "_key_indexes", lambda *a: dropped.append(1) or real(*a)
        )
        cat.rebuild_history("ds", root)
        assert dropped == [1]
        with cat._uow() as s:
            assert s.execute(text(indexes)).all() == schema
        assert _snapshot(cat) == before
        report = cat.verify("ds")
        assert report.ok, [str(p) for p in report.problems]


def test_verify_finds_a_missing_or_altered_manifest_and_write_history_restores_it(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = str(tmp_path / "ds")
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(20)), root, **kw)
        shardcat.delete_keys(cat, "ds", ["k003"])
        folder = os.path.join(root, "_versions", "ds")
        os.remove(os.path.join(folder, "000000000002.json"))
        with open(os.path.join(folder, "000000000001.json"), "r+b") as f:
            doc = json.load(f)
            doc["manifest"]["total_records"] = 21
            f.seek(0)
            f.truncate()
            f.write(json.dumps(doc).encode())
        problems = {p.kind: p for p in cat.verify("ds").problems}
        assert set(problems) == {"history-missing", "history-corrupt"}
        assert "verify --write-history" in problems["history-missing"].message
        assert "checksum does not match" in problems["history-corrupt"].message
        # A rebuild refuses an altered history, naming the file; nothing is committed.
        cat.create_dataset("copy", root)
        with pytest.raises(ManifestError, match=r"000000000001\.json"):
            cat.rebuild_history("copy", root)
        assert cat.shards("copy") == []
        os.remove(os.path.join(folder, "000000000001.json"))
        written = cat.write_history("ds")
        assert written.written == [1, 2]
        assert cat.verify("ds").ok


def test_a_history_with_a_gap_or_a_nonempty_dataset_is_refused(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = str(tmp_path / "ds")
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(10)), root, **kw)
        shardcat.write(_samples(range(10, 20)), root, mode="append", **kw)
        shardcat.write(_samples(range(20, 30)), root, mode="append", **kw)
        with pytest.raises(DatasetExistsError, match="empty dataset"):
            cat.rebuild_history("ds", root)
        os.remove(os.path.join(root, "_versions", "ds", "000000000002.json"))
        cat.create_dataset("again", root)
        with pytest.raises(ManifestError, match="lacks the manifest of version 2"):
            cat.rebuild_history("again", root)


def test_a_commit_whose_manifest_cannot_be_written_warns_and_stays_committed(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = tmp_path / "ds"
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(10)), str(root), **kw)
        # The folder for manifests cannot be written (a file where the folder should be).
        (root / "_versions" / "ds").rename(root / "_moved")
        (root / "_versions" / "ds").write_bytes(b"")
        with pytest.warns(HistoryWarning, match=r"verify --write-history ds"):
            shardcat.delete_keys(cat, "ds", ["k001"])
        assert cat.log("ds")[0].number == 2
        assert cat.count("ds") == 9


def test_a_moved_dataset_takes_its_history_and_a_deleted_one_leaves_none(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(20)), str(old), **kw)
        shardcat.delete_keys(cat, "ds", ["k004"])
        cat.tag("ds", 1, "first")
        shardcat.copy_dataset(cat, "ds", str(new), move=True, client=client)
        assert not (old / "_versions").exists()  # files gone, and the folders they left empty
        assert sorted(p.name for p in (new / "_versions" / "ds").iterdir()) == [
            "000000000001.json",
            "000000000002.json",
            "000000000003.json",
            "refs.json",
        ]
        assert cat.verify("ds").ok
        before = _snapshot(cat)
        cat.delete_dataset("ds")  # the catalog's rows only
        cat.create_dataset("ds", str(new))
        cat.rebuild_history("ds", str(new))
        assert _snapshot(cat) == before
        # Another name rebuilds from the only history there is.
        cat.create_dataset("twin", str(new))
        assert cat.rebuild_history("twin", str(new)).folder.endswith("_versions/ds")
        report = delete_dataset(cat, "ds")
        assert report.kept  # the shard stays: twin's rows name it
        assert not (new / "_versions" / "ds").exists()


def test_versions_that_expired_without_their_manifests_are_stood_in_for_by_a_checkpoint(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    """A manifest lost (a store blip at its commit), then its version expired: the next kept
    version gets a checkpoint, and the rebuild still hides what the lost version deleted."""
    root = tmp_path / "ds"
    folder = root / "_versions" / "ds"
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(20)), str(root), **kw)  # v1
        shardcat.delete_keys(cat, "ds", ["k002", "k003"])  # v2: its manifest is lost
        (folder / "000000000002.json").unlink()
        shardcat.write(_samples(range(20, 30)), str(root), mode="append", **kw)  # v3
        shardcat.write(
            _samples(range(3, 5), "b"), str(root), mode="append", on_duplicate="replace", **kw
        )
        cat.expire("ds", keep_last=2)  # keeps 3 and 4
        problems = cat.verify("ds").problems
        assert [(p.kind, p.url.rsplit("/", 1)[-1]) for p in problems] == [
            ("history-missing", "000000000003.checkpoint.json")
        ]
        assert "expired without their manifests" in problems[0].message
        assert cat.write_history("ds").written == [3]
        assert cat.verify("ds").ok
        before = _snapshot(cat)
        assert "k002" not in before[3][4] and before[4][4]["k003"] == b"v3b"
        cat.delete_dataset("ds")
        cat.create_dataset("ds", str(root))
        cat.rebuild_history("ds", str(root))
        assert _snapshot(cat) == before
        assert cat.verify("ds").ok
        # Without the checkpoint the gap is refused, naming what to do.
        (folder / "000000000003.checkpoint.json").unlink()
        cat.create_dataset("again", str(root))
        with pytest.raises(ManifestError, match="version 3 after it has no checkpoint"):
            cat.rebuild_history("again", str(root))


def test_a_dataset_made_before_manifests_gets_its_history_written(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = tmp_path / "ds"
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(20)), str(root), **kw)
        shardcat.delete_keys(cat, "ds", ["k001"])
        shardcat.write(_samples(range(20, 25)), str(root), mode="append", **kw)
        cat.expire("ds", keep_last=1)
        for p in (root / "_versions" / "ds").iterdir():
            p.unlink()
        problems = cat.verify("ds").problems
        assert [p.kind for p in problems] == ["history-missing"]
        assert "keeps no history of dataset 'ds'" in problems[0].message
        cat.write_history("ds")
        assert sorted(p.name for p in (root / "_versions" / "ds").iterdir()) == [
            "000000000003.checkpoint.json",
            "refs.json",
        ]
        before = _snapshot(cat)
        cat.delete_dataset("ds")
        cat.create_dataset("ds", str(root))
        cat.rebuild_history("ds", str(root))
        assert _snapshot(cat) == before and cat.verify("ds").ok


def test_the_history_in_bucket_setting_turns_it_off(catalog_url: str, tmp_path: Any) -> None:
    root = tmp_path / "ds"
    with shardcat.config.set(history_in_bucket=False), Catalog(catalog_url) as cat:
        cat.create_dataset("ds", str(root))
        root.mkdir()
        with shardcat.ShardWriter(str(root / "a.shard")) as w:
            w.add("k", {"txt": "v"})
        cat.register_shard("ds", w.close())
        cat.delete_keys("ds", ["k"])
        assert not (root / "_versions").exists()
        assert cat.verify("ds").ok


def test_a_new_dataset_in_the_folder_of_a_forgotten_one_sets_its_history_aside(
    catalog_url: str, tmp_path: Any, client: Any
) -> None:
    root = tmp_path / "ds"
    with Catalog(catalog_url) as cat:
        kw: dict[str, Any] = dict(catalog=cat, dataset="ds", progress=False, client=client)
        shardcat.write(_samples(range(10)), str(root), **kw)
        cat.delete_dataset("ds")  # forgotten by the catalog; its files stay
        with pytest.warns(HistoryWarning, match="held the history of an earlier dataset"):
            shardcat.write(_samples(range(10, 20)), str(root), **kw)
        aside = [p.name for p in (root / "_versions").iterdir() if p.name.startswith("ds~")]
        assert len(aside) == 1
        assert sorted(p.name for p in (root / "_versions" / aside[0]).iterdir()) == [
            "000000000001.json"
        ]
        assert cat.verify("ds").ok
        cat.delete_dataset("ds")
        cat.create_dataset("ds", str(root))
        assert cat.rebuild_history("ds", str(root)).versions == [1]
        assert cat.count("ds") == 10
