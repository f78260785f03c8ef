"""Column groups on datasets indexed in place: tars and folders of files (docs/GROUPS.md).

The base stays the user's files; a group's shards go in the dataset's ``_groups/``
folder, which indexing the folder again (or packing it) does not take for data.
Groups belong to keys: indexing again keeps the entries of keys still there and
drops those of keys whose files are gone, and older versions read what they read.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

import shardcat
from shardcat.errors import DatasetRootError
from shardcat.reading import Catalog
from shardcat.storage import GROUPS_FOLDER, is_group_shard


def _tars(root: Path) -> list[str]:
    root.mkdir()
    keys = []
    for part in range(2):
        with tarfile.open(root / f"part-{part:04d}.tar", "w") as tf:
            for i in range(5):
                key = f"s{part}_{i:03d}"
                keys.append(key)
                for ext, data in (("jpg", bytes([i]) * 100), ("cls", str(i).encode())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    tf.addfile(info, io.BytesIO(data))
    return keys


def _folder(root: Path) -> list[str]:
    (root / "a").mkdir(parents=True)
    for i in range(4):
        (root / "a" / f"k{i}.txt").write_text("x" * (i + 1))
    return [f"a/k{i}" for i in range(4)]


def _captions(keys: list[str]) -> list[dict[str, Any]]:
    return [{"__key__": k, "caption.txt": f"caption of {k}".encode()} for k in keys]


def _caption(keys: list[str], catalog: str, dataset: str, client: Any) -> None:
    shardcat.add_entries(
        _captions(keys), catalog=catalog, dataset=dataset, group="cap", client=client,
        progress=False,
    )  # fmt: skip


def _group_files(root: Path) -> list[str]:
    return sorted(os.listdir(root / GROUPS_FOLDER))


def test_a_tar_dataset_gets_a_group_beside_its_tars(client, catalog_url, tmp_path):
    root = tmp_path / "tars"
    keys = _tars(root)
    shardcat.index_tar(str(root), catalog=catalog_url, dataset="t", client=client)
    _caption(keys[:3], catalog_url, "t", client)
    (shard,) = _group_files(root)
    assert is_group_shard(str(root / GROUPS_FOLDER / shard))
    assert sorted(p.name for p in root.glob("*.tar")) == ["part-0000.tar", "part-0001.tar"]
    with Catalog(catalog_url) as cat:
        got = cat.get("t", keys[1])
        assert list(got) == ["jpg", "cls", "caption.txt"]
        assert got["caption.txt"].decode() == f"caption of {keys[1]}"
        assert got["jpg"].data == bytes([1]) * 100
        assert list(cat.get("t", keys[5])) == ["jpg", "cls"]
        many = cat.get_many("t", keys[:4], entries=["caption.txt"])
        assert [r["caption.txt"].decode() for r in many.records[:3]] == [
            f"caption of {k}" for k in keys[:3]
        ]
        assert cat.verify("t").ok


def test_indexing_a_folder_again_keeps_the_captions_of_the_keys_still_there(
    client, catalog_url, tmp_path
):
    root = tmp_path / "pets"
    keys = _folder(root)
    shardcat.index_files(str(root), catalog=catalog_url, dataset="f", client=client)
    _caption(keys[:3], catalog_url, "f", client)
    assert len(_group_files(root)) == 1
    # Again, unchanged: the group's shard is not a sample, and every caption stays.
    again = shardcat.index_files(str(root), catalog=catalog_url, dataset="f", client=client)
    assert again.records == 4 and again.files == 4
    with Catalog(catalog_url) as cat:
        assert sorted(cat.keys("f")) == keys
        assert cat.get("f", "a/k1")["caption.txt"].decode() == "caption of a/k1"
        assert [g.records for g in cat.groups("f")] == [3]
        kept = cat.info("f").version
    # A sample's file is gone: its caption goes with it, from the new version on.
    (root / "a" / "k1.txt").unlink()
    shardcat.index_files(str(root), catalog=catalog_url, dataset="f", client=client)
    with Catalog(catalog_url) as cat:
        assert sorted(cat.keys("f")) == ["a/k0", "a/k2", "a/k3"]
        assert cat.get("f", "a/k2")["caption.txt"].decode() == "caption of a/k2"
        assert list(cat.get("f", "a/k3")) == ["txt"]
        assert [g.records for g in cat.groups("f")] == [2]
        # The older version still has the caption (its file of the base is gone, though).
        old = cat.get("f", "a/k1", version=kept, entries=["caption.txt"])
        assert old["caption.txt"].decode() == "caption of a/k1"


def test_packing_a_folder_leaves_out_the_group_shards_in_it(client, sqlite_url, tmp_path):
    root = tmp_path / "pets"
    keys = _folder(root)
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="f", client=client)
    _caption(keys, sqlite_url, "f", client)
    summary = shardcat.write(
        shardcat.from_files(str(root)), str(tmp_path / "packed"), catalog=sqlite_url,
        dataset="packed", client=client, progress=False,
    )  # fmt: skip
    assert summary.records == 4
    with Catalog(sqlite_url) as cat:
        assert sorted(cat.keys("packed")) == keys


def test_a_group_cannot_be_written_outside_the_dataset_s_folders(client, sqlite_url, tmp_path):
    """The group's own folder is allowed to a group's write only: a plain append is refused."""
    root = tmp_path / "pets"
    _folder(root)
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="f", client=client)
    with pytest.raises(DatasetRootError, match="one dataset lives in one folder"):
        shardcat.write(
            [{"__key__": "b/new", "txt": b"x"}], str(root / GROUPS_FOLDER), catalog=sqlite_url,
            dataset="f", mode="append", client=client, progress=False,
        )  # fmt: skip
