"""``shardcat.index_files`` on a real Dask cluster (two worker processes), local disk and S3.

A folder of real image files (PNG and JPEG written by Pillow) and JSON
labels is registered where it lies: ``a/x.jpg`` and ``a/x.json`` are one
sample, each entry a whole file whose CRC32C was computed at indexing.
Every lookup returns the files' bytes; a file changed afterwards is a
ChecksumError and a ``verify`` problem; indexing again gives a new version
with the files added and removed since, older versions still reading
theirs; ``gc`` and ``delete`` never delete the user's files.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
from pathlib import Path

import fsspec
import pytest
import sqlalchemy as sa
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import ChecksumError, FormatError, ShardNotFoundError
from shardcat.format.folder import FOLDER_MARK, FolderSample, entry_path, folder_info, folder_of
from shardcat.orchestration.gc import delete_dataset, gc
from shardcat.orchestration.verify import verify as verify_job
from shardcat.reading import Catalog
from shardcat.storage import resolve

from .samples import write_sample_files

Image = pytest.importorskip("PIL.Image")


def _image(i: int, fmt: str) -> bytes:
    img = Image.new("RGB", (8 + i, 6), color=(i * 13 % 256, i * 7 % 256, 200))
    out = io.BytesIO()
    img.save(out, format=fmt)
    return out.getvalue()


def _write_folder(root: Path, n: int = 12) -> dict[str, dict[str, bytes]]:
    """``n`` samples in two sub-folders: an image (PNG or JPEG) and a JSON label each."""
    samples: dict[str, dict[str, bytes]] = {}
    for i in range(n):
        key = f"{'cats' if i % 2 else 'dogs'}/{i:04d}"
        ext, fmt = ("png", "PNG") if i % 3 else ("jpg", "JPEG")
        samples[key] = {ext: _image(i, fmt), "json": json.dumps({"label": i % 3, "i": i}).encode()}
    write_sample_files(root, samples)
    return samples


def _bytes(record: shardcat.Record) -> dict[str, bytes]:
    return {name: bytes(entry.data) for name, entry in record.entries.items()}


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, dict[str, dict[str, bytes]]]:
    root = tmp_path / "images"
    return root, _write_folder(root)


def test_a_folder_indexed_in_place_reads_back_its_files(client, catalog_url, folder):
    root, samples = folder
    summary = shardcat.index_files(
        str(root),
        catalog=catalog_url,
        dataset="pets",
        client=client,
        fields={"label": int},
        group_files=8,  # several groups, several tasks
    )
    assert (summary.records, summary.files, summary.failed) == (12, 24, [])
    assert summary.groups == 3
    assert summary.bytes == sum(len(b) for files in samples.values() for b in files.values())
    with Catalog(catalog_url) as cat:
        shards = cat.shards("pets")
        assert {s.kind for s in shards} == {"files"}
        assert {folder_of(s.url) for s in shards} == {str(root)}
        for key, files in samples.items():
            assert _bytes(cat.get("pets", key)) == files
        keys = sorted(samples)
        assert [_bytes(r) for r in cat.get_many("pets", keys)] == [samples[k] for k in keys]
        only = cat.get_many("pets", keys, entries=["json"])
        assert [_bytes(r) for r in only] == [{"json": samples[k]["json"]} for k in keys]
        assert _bytes(cat.get("pets", "dogs/0000", entries=["jpg"])) == {
            "jpg": samples["dogs/0000"]["jpg"]
        }
        assert cat.read_part("pets", "cats/0001", "json", 0, 1) == b"{"
        chosen = cat.select("pets", "label = 1")
        assert sorted(k for ks in chosen.keys.values() for k in ks) == [
            k for k in keys if json.loads(samples[k]["json"])["label"] == 1
        ]
        assert cat.verify("pets").ok
        streamed = shardcat.read(cat, "pets", decode=False).compute(scheduler="sync")
    got = {
        r["__key__"]: {k: bytes(v.data) for k, v in r.items() if k != "__key__"} for r in streamed
    }
    assert got == samples


def test_a_row_whose_spans_do_not_fit_its_layout_says_index_the_folder_again(
    client, sqlite_url, folder
):
    root, _ = folder
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    engine = sa.create_engine(sqlite_url)
    try:
        with engine.begin() as conn:  # 5 bytes: no whole span of either entry
            conn.execute(sa.text("UPDATE records SET spans = :spans"), {"spans": b"\x00" * 5})
    finally:
        engine.dispose()
    inconsistent = "catalog row is inconsistent: spans of 5 bytes do not describe 2 entries"
    with Catalog(sqlite_url) as cat:
        with pytest.raises(FormatError, match=f"{inconsistent}; index the folder again") as e:
            cat.get("pets", "cats/0001")
        assert FOLDER_MARK in str(e.value.path)  # the group's URL, as on every path
        with pytest.raises(FormatError, match=f"{inconsistent}; index the folder again"):
            cat.get_many("pets", ["cats/0001"])
        with pytest.raises(FormatError, match=f"{inconsistent}; rebuild it with reindex"):
            cat.get("pets", "cats/0001", entries=["json"])


def test_a_file_changed_after_indexing_is_a_checksum_error_and_a_verify_problem(
    client, sqlite_url, folder
):
    root, samples = folder
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    changed = root / "cats/0001.png"
    data = bytearray(changed.read_bytes())
    data[-5] ^= 0xFF  # the same size, one byte flipped
    changed.write_bytes(bytes(data))
    (root / "dogs/0002.json").unlink()
    with Catalog(sqlite_url) as cat:
        with pytest.raises(ChecksumError, match="cats/0001") as e:
            cat.get("pets", "cats/0001")
        assert e.value.path == str(changed)
        with pytest.raises(ChecksumError):
            cat.get_many("pets", ["cats/0001", "cats/0003"])
        with pytest.raises(ShardNotFoundError, match="index-files") as gone:
            cat.get("pets", "dogs/0002")
        assert gone.value.path == str(root / "dogs/0002.json")
        assert _bytes(cat.get("pets", "cats/0003")) == samples["cats/0003"]
        report = cat.verify("pets")
        # The Dask job reads a folder group's files by the rows its tasks load: the same report.
        assert verify_job(cat, "pets", client=client).problems == report.problems
    assert not report.ok
    kinds = {(p.kind, k) for p in report.problems for k in p.keys}
    assert ("row-not-in-footer", "cats/0001") in kinds
    missing = [p for p in report.problems if p.kind == "missing"]
    assert [p.url for p in missing] == [str(root / "dogs/0002.json")]


def test_a_file_that_only_grew_fails_every_read_though_its_indexed_bytes_match(
    client, catalog_url, folder
):
    root, samples = folder
    shardcat.index_files(str(root), catalog=catalog_url, dataset="pets", client=client)
    grown = root / "cats/0001.json"
    with Catalog(catalog_url) as cat:
        assert _bytes(cat.get("pets", "cats/0001")) == samples["cats/0001"]  # its file kept open
        with grown.open("ab") as f:
            f.write(b"\n")  # the indexed bytes unchanged: their CRC32C still matches
        grown_error = "longer than its .* bytes when it was indexed"
        with pytest.raises(ChecksumError, match=grown_error) as e:
            cat.get("pets", "cats/0001")
        assert e.value.path == str(grown)
        with pytest.raises(ChecksumError, match=grown_error):
            cat.get("pets", "cats/0001", entries=["json"])
        with pytest.raises(ChecksumError, match=grown_error):
            cat.get_many("pets", ["cats/0001", "cats/0003"])
        with pytest.raises(ChecksumError, match=grown_error):
            cat.get_many("pets", ["cats/0001", "cats/0003"], entries=["json"])
        with pytest.raises(ChecksumError, match=grown_error):
            list(shardcat.read(cat, "pets", decode=False).compute(scheduler="sync"))
        # A part before the file's indexed end still reads: those bytes are as indexed.
        assert cat.read_part("pets", "cats/0001", "json", 0, 1) == b"{"
        assert _bytes(cat.get("pets", "cats/0003")) == samples["cats/0003"]
        report = cat.verify("pets")
    assert {k for p in report.problems for k in p.keys} == {"cats/0001"}


def test_a_file_replaced_or_rewritten_after_a_lookup_is_read_again_not_from_its_old_descriptor(
    client, catalog_url, folder
):
    root, samples = folder
    shardcat.index_files(str(root), catalog=catalog_url, dataset="pets", client=client)
    label = root / "dogs/0002.json"
    image = root / "dogs/0004.png"
    with Catalog(catalog_url) as cat:
        for _ in range(2):  # the second lookup reads the descriptors the first one opened
            assert _bytes(cat.get("pets", "dogs/0002")) == samples["dogs/0002"]
            assert _bytes(cat.get("pets", "dogs/0004")) == samples["dogs/0004"]
        # Replaced by another file (a new inode; the old one deleted), same size.
        new = bytearray(samples["dogs/0002"]["json"])
        new[1] ^= 0x01
        tmp = root / "dogs/.0002.json.tmp"
        tmp.write_bytes(bytes(new))
        os.replace(tmp, label)
        with pytest.raises(ChecksumError) as e:
            cat.get("pets", "dogs/0002")
        assert e.value.path == str(label)
        # Rewritten in place (the same inode, the descriptor still valid), same size.
        data = bytearray(samples["dogs/0004"]["png"])
        data[-3] ^= 0xFF
        with image.open("r+b") as f:
            f.write(bytes(data))
        with pytest.raises(ChecksumError):
            cat.get("pets", "dogs/0004")
        # Put back as indexed: read again, whole.
        label.write_bytes(samples["dogs/0002"]["json"])
        image.write_bytes(samples["dogs/0004"]["png"])
        assert _bytes(cat.get("pets", "dogs/0002")) == samples["dogs/0002"]
        assert _bytes(cat.get("pets", "dogs/0004")) == samples["dogs/0004"]
        image.unlink()
        with pytest.raises(ShardNotFoundError) as gone:
            cat.get("pets", "dogs/0004")
        assert gone.value.path == str(image)


def test_indexing_again_is_a_new_version_with_the_files_added_and_removed(
    client, catalog_url, folder
):
    root, samples = folder
    shardcat.index_files(str(root), catalog=catalog_url, dataset="pets", client=client)
    for entry in samples["cats/0005"]:
        (root / f"cats/0005.{entry}").unlink()
    (root / "birds").mkdir()
    (root / "birds/0100.json").write_bytes(b'{"label": 7}')
    replaced = root / "dogs/0004.json"
    replaced.write_bytes(b'{"label": 9, "i": 4}')
    summary = shardcat.index_files(str(root), catalog=catalog_url, dataset="pets", client=client)
    assert summary.records == 12  # 12 - 1 + 1
    with Catalog(catalog_url) as cat:
        assert cat.info("pets").version == 2
        assert _bytes(cat.get("pets", "birds/0100")) == {"json": b'{"label": 7}'}
        assert cat.get("pets", "dogs/0004")["json"].decode() == {"label": 9, "i": 4}
        with pytest.raises(shardcat.KeyNotFoundError):
            cat.get("pets", "cats/0005")
        # Version 1 still reads its files where they are still there.
        assert _bytes(cat.get("pets", "cats/0003", version=1)) == samples["cats/0003"]
        with pytest.raises(shardcat.KeyNotFoundError):
            cat.get("pets", "birds/0100", version=1)
        with pytest.raises(ShardNotFoundError):
            cat.get("pets", "cats/0005", version=1)  # its files are gone
        with pytest.raises(ChecksumError):
            cat.get("pets", "dogs/0004", version=1)  # its label was rewritten
        assert cat.verify("pets", version=2).ok
        assert not cat.verify("pets", version=1).ok


def test_copy_refuses_a_folder_dataset_and_says_how_to_pack_or_copy_it(
    client, sqlite_url, tmp_path, folder
):
    root, _ = folder
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    with pytest.raises(ValueError, match="folder of files indexed in place") as e:
        shardcat.copy_dataset(sqlite_url, "pets", str(tmp_path / "copy"), name="pets2")
    assert str(root) in str(e.value) and "shardcat write" in str(e.value)
    assert not (tmp_path / "copy").exists()
    with Catalog(sqlite_url) as cat:
        assert "pets2" not in {d.name for d in cat.datasets()}


def test_gc_and_delete_never_delete_the_folders_files(client, sqlite_url, tmp_path, folder):
    root, _ = folder
    (root / "weights.shard").write_bytes(b"the user's own file, named like a shard")
    before = sorted(p for p in root.rglob("*") if p.is_file())
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    (root / "cats/0001.png").unlink()
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    before.remove(root / "cats/0001.png")
    with Catalog(sqlite_url) as cat:
        cat.expire("pets", keep_last=1)
        assert cat.shards("pets", state="deleted")  # the first version's groups are garbage
    report = gc(sqlite_url, dataset="pets", grace=dt.timedelta(0))
    assert report.deleted_shards == [] and report.orphans == []
    assert any(FOLDER_MARK in k and "never the file" in k for k in report.kept)
    delete_dataset(sqlite_url, "pets", delete_tars=True)
    assert sorted(p for p in root.rglob("*") if p.is_file()) == before


def test_on_error_skip_leaves_out_only_the_unreadable_files_and_fail_commits_nothing(
    client, sqlite_url, folder
):
    root, samples = folder
    os.symlink(root / "nowhere.jpg", root / "cats/0999.jpg")  # listed, but cannot be read
    label = root / "cats/0001.json"  # one file of a sample whose image is fine
    label.unlink()
    os.symlink(root / "nowhere.json", label)
    with pytest.raises(ShardNotFoundError, match=r"cats/0(001|999)"):
        shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    with Catalog(sqlite_url) as cat:
        assert "pets" not in {d.name for d in cat.datasets()}  # the failed first job left nothing
    summary = shardcat.index_files(
        str(root), catalog=sqlite_url, dataset="pets", client=client, on_error="skip"
    )
    got = sorted((f.key, f.entry, f.error, f.sample_left_out) for f in summary.failed)
    assert got == [
        ("cats/0001", "json", "ShardNotFoundError", False),
        ("cats/0999", "jpg", "ShardNotFoundError", True),
    ]
    assert summary.samples_left_out == 1
    assert summary.records == len(samples)  # cats/0001 without its label; cats/0999 left out
    assert summary.files == 2 * len(samples) - 1
    assert "2 unreadable files skipped: 1 sample indexed without them, 1 left out" in str(summary)
    with Catalog(sqlite_url) as cat:
        with pytest.raises(shardcat.KeyNotFoundError):
            cat.get("pets", "cats/0999")
        assert _bytes(cat.get("pets", "cats/0001")) == {"png": samples["cats/0001"]["png"]}
        assert cat.verify("pets").ok
    # The CLI says what it skipped, file by file.
    args = ["-c", sqlite_url, "index-files", str(root), "pets", "--on-error", "skip"]
    args += ["--scheduler", client.scheduler.address, "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1 sample indexed without them, 1 left out" in result.output
    assert "cats/0001.json: ShardNotFoundError" in result.output


def test_a_folder_on_s3_indexed_in_place(client, sqlite_url, s3, tmp_path):
    samples = _write_folder(tmp_path / "up", n=6)
    fs = fsspec.filesystem("s3", **s3["storage_options"])
    for key, files in samples.items():
        for entry, data in files.items():
            fs.pipe_file(f"{s3['bucket']}/raw/{key}.{entry}", data)
    source = f"{s3['url']}/raw/{{cats,dogs}}/"  # a brace pattern, as `shardcat write SRC` takes
    summary = shardcat.index_files(
        source,
        catalog=sqlite_url,
        dataset="raw",
        client=client,
        storage_options=s3["storage_options"],
    )
    assert (summary.records, summary.files) == (6, 12)
    with Catalog(sqlite_url, storage_options=s3["storage_options"]) as cat:
        assert {folder_of(s.url) for s in cat.shards("raw")} == {f"{s3['url']}/raw"}
        keys = sorted(samples)
        assert [_bytes(r) for r in cat.get_many("raw", keys)] == [samples[k] for k in keys]
        assert _bytes(cat.get("raw", "cats/0001")) == samples["cats/0001"]
        assert cat.verify("raw").ok
        fs.pipe_file(f"{s3['bucket']}/raw/cats/0001.json", b'{"label": 0, "i": 1}')
        with pytest.raises(ChecksumError):
            cat.get("raw", "cats/0001")
        assert not cat.verify("raw").ok
    # Nothing written beside the files but the version manifests (_versions/, as for tars).
    written = [p for p in fs.find(f"{s3['bucket']}/raw") if "/_versions/" not in p]
    assert len(written) == 12


@pytest.mark.parametrize("store", ["azure", "gcs"])
def test_a_folder_on_azure_and_gcs_indexed_in_place(client, catalog_url, tmp_path, request, store):
    where = request.getfixturevalue(store)  # Azurite, gcp-storage-emulator: fresh container
    opts = where["storage_options"]
    samples = _write_folder(tmp_path / "up", n=6)
    fs, _ = resolve(where["url"], opts)
    base = fs._strip_protocol(where["url"])
    for key, files in samples.items():
        for entry, data in files.items():
            fs.pipe_file(f"{base}/raw/{key}.{entry}", data)
    summary = shardcat.index_files(
        f"{where['url']}/raw/", catalog=catalog_url, dataset="raw", client=client,
        storage_options=opts, fields={"label": int},
    )  # fmt: skip
    assert (summary.records, summary.files, summary.failed) == (6, 12, [])
    with Catalog(catalog_url, storage_options=opts) as cat:
        # The folder as the store's filesystem names it (adlfs: abfs://, not az://).
        assert {folder_of(s.url).split("://")[1] for s in cat.shards("raw")} == {f"{base}/raw"}
        keys = sorted(samples)
        assert [_bytes(r) for r in cat.get_many("raw", keys)] == [samples[k] for k in keys]
        assert _bytes(cat.get("raw", "dogs/0000")) == samples["dogs/0000"]
        assert _bytes(cat.get("raw", "cats/0001", entries=["json"])) == {
            "json": samples["cats/0001"]["json"]
        }
        assert sorted(k for ks in cat.select("raw", "label = 0").keys.values() for k in ks) == [
            k for k in keys if json.loads(samples[k]["json"])["label"] == 0
        ]
        assert cat.verify("raw").ok
        # A file that only grew: the read one byte past its indexed end finds it here too.
        fs.pipe_file(f"{base}/raw/cats/0001.json", samples["cats/0001"]["json"] + b" ")
        with pytest.raises(ChecksumError, match="longer than"):
            cat.get("raw", "cats/0001")
        with pytest.raises(ChecksumError, match="longer than"):
            cat.get_many("raw", ["cats/0001"], entries=["json"])
        assert not cat.verify("raw").ok
        fs.rm_file(f"{base}/raw/dogs/0002.json")
        with pytest.raises(ShardNotFoundError, match="dogs/0002"):
            cat.get("raw", "dogs/0002")


def test_the_cli_indexes_a_folder(client, sqlite_url, folder):
    root, samples = folder
    address = client.scheduler.address
    result = CliRunner().invoke(
        app,
        [
            "--catalog",
            sqlite_url,
            "--json",
            "index-files",
            str(root),
            "pets",
            "--scheduler",
            address,
            "--field",
            "label:int",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["dataset"], doc["records"], doc["files"]) == ("pets", 12, 24)
    with Catalog(sqlite_url) as cat:
        assert _bytes(cat.get("pets", "dogs/0000")) == samples["dogs/0000"]


def test_a_group_summary_lays_its_samples_end_to_end():
    samples = [
        FolderSample("a/1", (("jpg", 10, 1), ("json", 3, 2))),
        FolderSample("a/2", (("json", 0, 0),)),  # an empty file still has a place of its own
        FolderSample("b/3", (("jpg", 5, 3),)),
    ]
    info = folder_info("/data/imgs/#files-j1-000000", samples)
    assert info.records["offset"].tolist() == [0, 13, 14]
    assert info.records["length"].tolist() == [13, 0, 5]
    assert info.entries["offset"].tolist() == [0, 10, 0, 0]
    assert [s.name for s in info.specs] == ["jpg", "json"]
    assert (info.size, info.folder) == (18, "/data/imgs")
    assert entry_path(info.folder, "a/1", "json") == "/data/imgs/a/1.json"
    with pytest.raises(ValueError, match="not the URL of a folder group"):
        folder_of("/data/imgs/train-000000.tar")


def test_a_folder_dataset_streams_and_exports_as_webdataset(client, sqlite_url, tmp_path, folder):
    from shardcat.readers import SampleStream, plan_tasks

    root, samples = folder
    shardcat.index_files(str(root), catalog=sqlite_url, dataset="pets", client=client)
    with Catalog(sqlite_url) as cat:
        stream = SampleStream(
            tuple(plan_tasks(cat, "pets", "key LIKE 'cats/%'", None)),
            catalog=cat.handle(),
            shuffle=False,
        )
    got = {s.pop("__key__"): s for s in stream.iter_reader(0)}
    cats = {k: v for k, v in samples.items() if k.startswith("cats/")}
    assert got == {k: {**v, "json": json.loads(v["json"])} for k, v in cats.items()}
    shardcat.export(sqlite_url, "pets", str(tmp_path / "wds"), register="pets_tars", client=client)
    with Catalog(sqlite_url) as cat:
        keys = sorted(samples)
        assert [_bytes(r) for r in cat.get_many("pets_tars", keys)] == [samples[k] for k in keys]
