"""``index-files`` refuses shardcat's own shards: a dataset's folder is no folder of sample files.

Indexed in place, a ``*.shard`` file would become a sample of entry
``shard`` (its records hidden inside it). A folder of shards only, or any
folder holding a file that is a shardcat shard (a dataset's folder inside
it), is refused with a typed error that names the folders and says what to
do: ``shardcat reindex`` to register a dataset's shards, or a pattern that
leaves them out. A user's own files named ``*.shard`` are data like any
other; a dataset's history (``_versions/``) and an in-place dataset's group
shards (``_groups/``, tests/orchestration/test_groups_in_place.py) are
never listed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import SourceIsShardsError
from shardcat.reading import Catalog

from .samples import write_sample_files


def _dataset(folder: Path, catalog: str, name: str = "pets") -> None:
    with shardcat.DatasetWriter(catalog, name, str(folder)) as w:
        for i in range(6):
            w.add(f"cats/{i:04d}", {"jpg": b"JPEG %d" % i, "json": {"label": i % 2}})


def test_a_dataset_folder_is_refused_with_the_way_to_register_its_shards(sqlite_url, tmp_path):
    folder = tmp_path / "pets"
    _dataset(folder, sqlite_url)
    assert (folder / "_versions").is_dir()  # a dataset's folder: shards and their history
    with pytest.raises(SourceIsShardsError) as raised:
        shardcat.index_files(str(folder), catalog=sqlite_url, dataset="again")
    e = raised.value
    assert "holds shardcat's own shards (1 file named *.shard, e.g. pets-" in str(e)
    assert "a shardcat dataset's folder, not files to index in place" in str(e)
    assert "nothing was indexed" in str(e) and "Catalog(...).reindex(NAME" in str(e)
    assert "`shardcat reindex NAME FOLDER`" in e.render("cli")
    with Catalog(sqlite_url) as cat:
        assert "again" not in {d.name for d in cat.datasets()}
    # The CLI says the same, in one line, and follows its own advice.
    new = f"sqlite:///{tmp_path / 'new.db'}"
    cli = [sys.executable, "-m", "shardcat", "-c", new]
    p = subprocess.run(
        [*cli, "index-files", str(folder), "again"], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 1, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "shardcat dataset's folder" in p.stderr and "`shardcat reindex NAME FOLDER`" in p.stderr
    result = CliRunner().invoke(app, ["-c", new, "reindex", "pets", str(folder)])
    assert result.exit_code == 0, result.output
    with Catalog(new) as cat:
        assert bytes(cat.get("pets", "cats/0003")["jpg"].data) == b"JPEG 3"


def test_a_folder_holding_a_dataset_folder_is_refused_naming_it(sqlite_url, tmp_path):
    root = tmp_path / "data"
    write_sample_files(root / "images", {f"{i:03d}": {"jpg": b"img"} for i in range(3)})
    write_sample_files(root / "labels", {f"{i:03d}": {"json": b"{}"} for i in range(3)})
    _dataset(root / "packed", sqlite_url)
    with pytest.raises(SourceIsShardsError, match=r"e\.g\. packed/pets-.*, in packed\)"):
        shardcat.index_files(str(root), catalog=sqlite_url, dataset="mixed")
    # The pattern the hint suggests leaves the dataset's folder out, and indexes the rest.
    summary = shardcat.index_files(
        str(root / "{images,labels}/"), catalog=sqlite_url, dataset="mixed", client=_one_worker()
    )
    assert (summary.records, summary.files) == (6, 6)


def test_files_of_ones_own_named_shard_are_indexed_as_any_file(sqlite_url):
    fs = fsspec.filesystem("memory")
    fs.pipe_file("memory://ownshards/a/x.shard", os.urandom(64))  # not a shardcat shard
    fs.pipe_file("memory://ownshards/a/x.json", b"{}")
    fs.pipe_file("memory://ownshards/a/y.txt", b"text")
    try:
        summary = shardcat.index_files("memory://ownshards", catalog=sqlite_url, dataset="own")
    finally:
        fs.rm("memory://ownshards", recursive=True)
    assert (summary.records, summary.files) == (2, 3)


def _one_worker() -> shardcat.orchestration.DaskCluster:
    """One worker process: enough for a folder of three files."""
    return shardcat.orchestration.DaskCluster(workers=1)
