"""Folder indexing's tasks read many files each, and folder lookups decode with the record codec.

A task reads its group's files in parts of ``_READ_FILES`` samples (an
object store's in one concurrent batch per part, a local folder's file by
file), so unreadable files in every part and every group must still each be
reported once, with their sample indexed without them or left out, and a
declared field read only from a sample's readable label. A local folder's
point lookup checks and decodes its files with the record codec's
``tar_record`` (compiled where built), and on a mismatch names the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import shardcat
from shardcat.errors import ChecksumError, ShardNotFoundError, TruncatedError
from shardcat.format import recordcodec
from shardcat.format.checksums import crc32c
from shardcat.format.folder import FolderSample, folder_info
from shardcat.format.spans import pack_spans
from shardcat.orchestration.files import from_files, list_source
from shardcat.orchestration.index_files import _READ_FILES
from shardcat.reading import Catalog
from shardcat.reading.folder import read_local_record
from shardcat.storage.local_listing import ScandirFileSystem

from .samples import write_sample_files

SAMPLES = 3 * _READ_FILES + 10  # several parts per task, several tasks


def _folder(root: Path) -> dict[str, dict[str, bytes]]:
    samples = {
        f"p{i % 3}/{i:05d}": {
            "bin": bytes([i % 256]) * (i % 7 + 1),
            "json": json.dumps({"label": i}).encode(),
        }
        for i in range(SAMPLES)
    }
    write_sample_files(root, samples)
    return samples


def _unreadable(path: Path) -> None:
    """Listed (a symlink is a file to the listing), but reading it fails: its target is gone."""
    path.unlink()
    os.symlink(path.parent / f"gone-{path.name}", path)


def test_every_unreadable_file_in_every_part_and_group_is_reported_once(
    client, sqlite_url, tmp_path
):
    root = tmp_path / "data"
    samples = _folder(root)
    keys = sorted(samples)
    # Labels lost in the first, a middle and the last part of tasks; one sample lost whole.
    no_label = [keys[0], keys[_READ_FILES - 1], keys[_READ_FILES], keys[-1]]
    for key in no_label:
        _unreadable(root / f"{key}.json")
    gone = keys[2 * _READ_FILES + 1]
    for entry in ("bin", "json"):
        _unreadable(root / f"{gone}.{entry}")
    summary = shardcat.index_files(
        str(root),
        catalog=sqlite_url,
        dataset="d",
        client=client,
        on_error="skip",
        fields={"label": int},
        group_files=2 * (_READ_FILES + 20),  # groups of 84 samples: parts of 64 and 20
    )
    got = sorted((f.key, f.entry, f.sample_left_out) for f in summary.failed)
    want = sorted(
        [(k, "json", False) for k in no_label] + [(gone, e, True) for e in ("bin", "json")]
    )
    assert got == want
    assert summary.samples_left_out == 1
    assert summary.records == SAMPLES - 1
    assert summary.files == 2 * SAMPLES - len(no_label) - 2
    assert summary.groups == 3
    with Catalog(sqlite_url) as cat:
        for key in keys:
            if key == gone:
                with pytest.raises(shardcat.KeyNotFoundError):
                    cat.get("d", key)
                continue
            want_files = {"bin": samples[key]["bin"]}
            if key not in no_label:
                want_files["json"] = samples[key]["json"]
            record = cat.get("d", key)
            assert {n: bytes(e.data) for n, e in record.entries.items()} == want_files
        # A field only where the label was read: exactly the samples that kept theirs.
        chosen = cat.select("d", "label >= 0")
        labelled = sorted(k for ks in chosen.keys.values() for k in ks)
        assert labelled == [k for k in keys if k not in no_label and k != gone]
        assert cat.verify("d").ok


def test_the_fast_local_listing_lists_what_find_lists(tmp_path):
    root = tmp_path / "data"
    _folder(root)
    os.symlink(root / "p0/00000.bin", root / "p1/link.bin")
    os.symlink(root / "nowhere", root / "p2/dangling.bin")
    fs = ScandirFileSystem()
    found = fs.find(str(root), detail=True)
    assert fs.file_sizes(str(root)) == {p: (i["size"], i["mtime"]) for p, i in found.items()}
    with pytest.raises(NotADirectoryError):
        fs.file_sizes(str(root / "p0/00000.bin"))
    # list_source takes it for a plain folder: the samples and sizes of the general listing.
    listing = list_source(from_files(str(root)))
    assert listing.files == len(found)
    assert listing.bytes == sum(i["size"] for i in found.values())
    by_key = {s.key: s for s in listing.samples}
    assert by_key["p0/00000"].files == (
        ("bin", str(root / "p0/00000.bin")),
        ("json", str(root / "p0/00000.json")),
    )
    assert by_key["p1/link"].size == 1  # a symlink is sized as its target, as fsspec does


def test_an_entry_named_like_a_missing_file_sorts_its_sample_entries(tmp_path):
    # --no-ext-entry: README is entry txt of key README, README.md entry md: sorted by entry.
    (tmp_path / "README").write_bytes(b"r")
    (tmp_path / "README.md").write_bytes(b"md")
    listing = list_source(from_files(str(tmp_path), no_ext_entry="txt"))
    (sample,) = listing.samples
    assert [entry for entry, _ in sample.files] == ["md", "txt"]
    assert sample.size == 3


@pytest.fixture(params=["compiled", "python"])
def codec(request):
    if request.param not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    previous = recordcodec.use(request.param)
    yield request.param
    recordcodec.use(previous)


def test_a_local_folder_record_is_checked_by_either_codec_and_names_the_bad_file(tmp_path, codec):
    folder = tmp_path / "f"
    folder.mkdir()
    files = {"jpg": b"\xff\xd8 image bytes", "json": b'{"label": 1}'}
    for entry, data in files.items():
        (folder / f"k.{entry}").write_bytes(data)
    info = folder_info(
        f"{folder}/#files-j1-000000",
        [FolderSample("k", tuple((e, len(d), crc32c(d)) for e, d in files.items()))],
    )
    specs = info.specs
    (spans,) = pack_spans(info.entries, info.records["entry_count"]).tolist()

    def read():
        return read_local_record(info.path, str(folder), "k", specs, spans, 0)

    record = read()
    assert {n: bytes(e.data) for n, e in record.entries.items()} == files
    assert [e.content_type for e in record.entries.values()] == ["image/jpeg", "application/json"]
    (folder / "k.json").write_bytes(b'{"label": 2}')  # same size, other bytes
    with pytest.raises(ChecksumError, match="json") as e:
        read()
    assert e.value.path == str(folder / "k.json")
    (folder / "k.json").write_bytes(files["json"] + b"\n")  # grew: its first bytes unchanged
    with pytest.raises(ChecksumError, match="longer than"):
        read()
    (folder / "k.json").write_bytes(files["json"][:-1])
    with pytest.raises(TruncatedError):
        read()
    (folder / "k.json").unlink()
    with pytest.raises(ShardNotFoundError) as gone:
        read()
    assert gone.value.path == str(folder / "k.json")


@pytest.mark.parametrize("form", ["relative", "path", "file-url"])
def test_a_skipped_local_files_url_is_the_folder_as_stored_and_its_key_and_entry(
    client, sqlite_url, tmp_path, monkeypatch, form
):
    root = tmp_path / "data"
    write_sample_files(root, {"a/x": {"bin": b"1", "json": b"{}"}, "a/y": {"bin": b"2"}})
    _unreadable(root / "a/x.json")
    monkeypatch.chdir(tmp_path)
    source = {"relative": "data", "path": str(root), "file-url": f"file://{root}"}[form]
    summary = shardcat.index_files(
        source, catalog=sqlite_url, dataset="d", client=client, on_error="skip"
    )
    # Whatever form the folder was given in, a local folder is stored as its absolute path
    # (what lookups open), and a failure names the file as FOLDER/KEY.ENTRY under it.
    assert summary.folder == str(root)
    assert [(f.url, f.key, f.entry) for f in summary.failed] == [
        (f"{root}/a/x.json", "a/x", "json")
    ]


def test_a_skipped_files_url_on_a_store_is_the_folders_url_and_its_key_and_entry(
    sqlite_url, monkeypatch
):
    import importlib

    import fsspec

    # The module (shardcat.orchestration.index_files is the function of that name).
    module = importlib.import_module("shardcat.orchestration.index_files")
    fs = fsspec.filesystem("memory")
    for name in ("a/x.bin", "a/x.json", "a/y.bin"):
        fs.pipe_file(f"memory://idxfail/{name}", b"1")
    read = module.read_files

    def lose_one(paths, options):  # a store's read that fails for one file (memory runs here)
        got = read(paths, options)
        return {p: FileNotFoundError(p) if p.endswith("x.json") else v for p, v in got.items()}

    monkeypatch.setattr(module, "read_files", lose_one)
    try:
        summary = shardcat.index_files(
            "memory://idxfail", catalog=sqlite_url, dataset="d", on_error="skip"
        )
    finally:
        fs.rm("memory://idxfail", recursive=True)
    # A store's folder is stored as its URL, the failure named under it (as a local one is).
    assert summary.folder == "memory:///idxfail"
    assert [(f.url, f.key, f.entry) for f in summary.failed] == [
        ("memory:///idxfail/a/x.json", "a/x", "json")
    ]
