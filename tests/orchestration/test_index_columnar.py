"""``shardcat.index_directory`` (MDS, LitData) on a real Dask cluster, local disk and S3.

The directories under tests/data/inplace/ were written by ``mosaicml-streaming``
and ``litdata`` themselves (scripts/make_inplace_fixtures.py), with every
sample as the library reads it back (``expected-*.json``). Indexed in place,
every sample shardcat reads decodes to the same values; a file damaged
after indexing is a ChecksumError and a ``verify`` problem; a damaged or
truncated file fails indexing with a typed error naming it (or is skipped);
compressed shards are refused naming the compression; ``gc`` and ``delete``
never delete the files.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.cli.app import app
from shardcat.errors import ChecksumError, DuplicateKeyError
from shardcat.format.columnar import ColumnarError, ColumnarTruncatedError, CompressedShardsError
from shardcat.orchestration.gc import delete_dataset, gc
from shardcat.reading import Catalog

Image = pytest.importorskip("PIL.Image")

DATA = Path(__file__).parents[1] / "data" / "inplace"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A copy of the fixtures the test may damage."""
    out = tmp_path / "inplace"
    shutil.copytree(DATA, out)
    return out


def _expected(name: str) -> list[dict[str, Any]]:
    return json.loads((DATA / f"expected-{name}.json").read_text())


def _same(entry: shardcat.Entry, want: Any) -> bool:
    """Whether an entry read by shardcat decodes to what the library read back."""
    if isinstance(want, dict) and "sha256" in want:
        img = Image.open(io.BytesIO(bytes(entry.data)))
        rgb = img.convert("RGB").tobytes()
        return list(img.size) == want["image"] and hashlib.sha256(rgb).hexdigest() == want["sha256"]
    if isinstance(want, dict) and "base64" in want:
        return bytes(entry.data) == base64.b64decode(want["base64"])
    value = entry.decode()
    if isinstance(want, dict) and "array" in want:
        return value.dtype.str == want["dtype"] and value.tolist() == want["array"]
    return bool(value == want)


def _flat(sample: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """LitData's leaves by path (``meta.a``), as the entries are named."""
    out: dict[str, Any] = {}
    for name, value in sample.items():
        if isinstance(value, dict) and not {"sha256", "base64", "array"} & set(value):
            out.update(_flat(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def _check(record: shardcat.Record, want: dict[str, Any]) -> None:
    assert sorted(record) == sorted(want), record.key
    for name, value in want.items():
        assert _same(record[name], value), (record.key, name)


def test_an_mds_directory_reads_back_as_streaming_reads_it(client, catalog_url, data):
    expected = _expected("mds")
    summary = shardcat.index_directory(
        data / "mds",
        format="mds",
        catalog=catalog_url,
        dataset="mds",
        key_column="id",
        client=client,
    )
    assert (summary.records, len(summary.files), summary.failed) == (12, 6, [])
    assert summary.bytes == sum(p.stat().st_size for p in (data / "mds").glob("*.mds"))
    with Catalog(catalog_url) as cat:
        shards = cat.shards("mds")
        assert {s.kind for s in shards} == {"mds"}
        assert sorted(s.url for s in shards) == sorted(str(p) for p in (data / "mds").glob("*.mds"))
        keys = [s["id"] for s in expected]
        for key, sample in zip(keys, expected):
            want = {k: v for k, v in sample.items() if k != "id"}  # the key column is no entry
            _check(cat.get("mds", key), want)
        for record, sample in zip(cat.get_many("mds", keys), expected):
            assert record.key == sample["id"]
            _check(record, {k: v for k, v in sample.items() if k != "id"})
        only = cat.get_many("mds", keys, entries=["label", "meta"])
        assert [r.decode() for r in only] == [
            {"__key__": s["id"], "label": s["label"], "meta": s["meta"]} for s in expected
        ]
        caption = expected[5]["caption"].encode()
        assert cat.read_part("mds", "sample-005", "caption", 0, 7) == caption[:7]
        described = {e.name: e.content_type for e in cat.describe("mds", "sample-005")}
        assert described["label"] == "application/x-raw-array; dtype=<i8"
        assert described["vec"] == "application/x-raw-array; dtype=<f4; shape=3"
        assert described["image"] == "image/jpeg" and described["meta"] == "application/json"
        assert cat.verify("mds").ok
        streamed = shardcat.read(cat, "mds", decode=False).compute(scheduler="sync")
        got = {
            r["__key__"]: {k: bytes(v.data) for k, v in r.items() if k != "__key__"}
            for r in streamed
        }
        assert got == {k: {n: bytes(e.data) for n, e in cat.get("mds", k).items()} for k in keys}


def test_mds_keys_default_to_the_sample_index(client, sqlite_url, data):
    expected = _expected("mds")
    shardcat.index_directory(
        data / "mds", format="mds", catalog=sqlite_url, dataset="mds", client=client
    )
    with Catalog(sqlite_url) as cat:
        assert cat.count("mds") == 12
        for i, sample in enumerate(expected):
            _check(cat.get("mds", str(i)), sample)  # every column an entry, id included


def test_a_litdata_directory_reads_back_as_litdata_reads_it(client, catalog_url, data):
    expected = [_flat(s) for s in _expected("litdata")]
    summary = shardcat.index_directory(
        str(data / "litdata"), format="litdata", catalog=catalog_url, dataset="lit", client=client
    )
    assert (summary.records, len(summary.files), summary.failed) == (12, 3, [])
    with Catalog(catalog_url) as cat:
        assert {s.kind for s in cat.shards("lit")} == {"litdata"}
        for i, sample in enumerate(expected):
            _check(cat.get("lit", str(i)), sample)
        records = cat.get_many("lit", [str(i) for i in range(12)])
        for record, sample in zip(records, expected):
            _check(record, sample)
        assert cat.get("lit", "4", entries=["meta.b"]).decode() == {"__key__": "4", "meta.b": "b4"}
        assert cat.verify("lit").ok


def test_litdata_keys_from_a_text_leaf_the_format_read_from_the_index(client, sqlite_url, data):
    shardcat.index_directory(
        data / "litdata",
        catalog=sqlite_url,
        dataset="lit",
        key_column="text",
        client=client,
    )
    with Catalog(sqlite_url) as cat:
        record = cat.get("lit", "text 3")
        assert "text" not in record and record["index"].decode() == 3
        assert cat.verify("lit").ok


def test_a_key_column_must_exist_and_be_text_or_integer(sqlite_url, data):
    with pytest.raises(ColumnarError, match="no column 'nope'"):
        shardcat.index_directory(
            data / "mds", format="mds", catalog=sqlite_url, dataset="m", key_column="nope"
        )
    with pytest.raises(ColumnarError, match="float32"):
        shardcat.index_directory(
            data / "mds", format="mds", catalog=sqlite_url, dataset="m", key_column="score"
        )
    with pytest.raises(DuplicateKeyError):  # label repeats: nothing is committed
        shardcat.index_directory(
            data / "mds", format="mds", catalog=sqlite_url, dataset="m", key_column="label"
        )
    with Catalog(sqlite_url) as cat:
        assert "m" not in {d.name for d in cat.datasets()}


def test_compressed_shards_are_refused_naming_the_compression(sqlite_url, data):
    with pytest.raises(CompressedShardsError, match=r"compressed \(gz\)") as e:
        shardcat.index_directory(data / "mds-gz", catalog=sqlite_url, dataset="gz")
    assert e.value.path == str(data / "mds-gz" / "index.json")
    (data / "index.json").write_text('{"version": 2}')
    with pytest.raises(ColumnarError, match="neither an MDS nor a LitData index"):
        shardcat.index_directory(data, catalog=sqlite_url, dataset="x")
    with pytest.raises(ColumnarError, match="not a LitData index"):
        shardcat.index_directory(data / "mds", format="litdata", catalog=sqlite_url, dataset="x")
    with pytest.raises(ColumnarError, match="not an MDS index"):
        shardcat.index_directory(data / "litdata", format="mds", catalog=sqlite_url, dataset="x")


def test_a_file_damaged_after_indexing_is_a_checksum_error_and_a_verify_problem(
    client, sqlite_url, data
):
    shardcat.index_directory(
        data / "mds", format="mds", catalog=sqlite_url, dataset="mds", key_column="id"
    )
    shard = data / "mds" / "shard.00001.mds"  # samples 2 and 3
    raw = bytearray(shard.read_bytes())
    raw[-3] ^= 0xFF  # inside sample 3's last column, the same size
    shard.write_bytes(bytes(raw))
    with Catalog(sqlite_url) as cat:
        assert cat.get("mds", "sample-002").key == "sample-002"  # its neighbour is intact
        for read in (
            lambda: cat.get("mds", "sample-003"),
            lambda: cat.get_many("mds", ["sample-001", "sample-003"]),
        ):
            with pytest.raises(ChecksumError, match="the MDS shard was changed") as e:
                read()
            assert e.value.path == str(shard)
        report = cat.verify("mds")
    assert not report.ok
    assert {k for p in report.problems for k in p.keys} == {"sample-003"}
    shard.write_bytes(bytes(raw[:-10]))  # cut short: verify says so
    with Catalog(sqlite_url) as cat:
        report = cat.verify("mds")
    assert [(p.url, p.kind) for p in report.problems] == [(str(shard), "corrupt")]
    assert "index.json says" in report.problems[0].message


def test_damaged_and_truncated_files_fail_the_job_or_are_skipped(client, catalog_url, data):
    chunk = data / "litdata" / "chunk-0-1.bin"
    raw = chunk.read_bytes()
    chunk.write_bytes(raw[: len(raw) - 100])
    with pytest.raises(ColumnarTruncatedError, match="last sample ends") as e:
        shardcat.index_directory(
            data / "litdata", format="litdata", catalog=catalog_url, dataset="lit", client=client
        )
    assert e.value.path == str(chunk)
    with Catalog(catalog_url) as cat:
        assert "lit" not in {d.name for d in cat.datasets()}  # nothing committed
    summary = shardcat.index_directory(
        data / "litdata",
        format="litdata",
        catalog=catalog_url,
        dataset="lit",
        client=client,
        on_error="skip",
    )
    assert [(f.url, f.error) for f in summary.failed] == [(str(chunk), "ColumnarTruncatedError")]
    assert summary.records == 7
    with Catalog(catalog_url) as cat, pytest.raises(shardcat.KeyNotFoundError):
        cat.get("lit", "5")
    shard = data / "mds" / "shard.00002.mds"
    raw = bytearray(shard.read_bytes())
    raw[8:12] = (1 << 30).to_bytes(4, "little")  # sample 1's start, past the file's end
    shard.write_bytes(bytes(raw))
    with pytest.raises(ColumnarError, match="not in order") as e:
        shardcat.index_directory(
            data / "mds", format="mds", catalog=catalog_url, dataset="mds", client=client
        )
    assert e.value.path == str(shard)


def test_gc_and_delete_never_delete_the_directorys_files(client, sqlite_url, data):
    before = sorted(p for p in data.rglob("*") if p.is_file())
    shardcat.index_directory(
        data / "mds", format="mds", catalog=sqlite_url, dataset="mds", client=client
    )
    shardcat.index_directory(
        data / "litdata", format="litdata", catalog=sqlite_url, dataset="lit", client=client
    )
    with Catalog(sqlite_url) as cat:
        cat.delete_keys("mds", ["0"])
    gc(sqlite_url, grace=dt.timedelta(0))
    report = delete_dataset(sqlite_url, "mds", delete_tars=True)
    assert report.removed == [] and any("never its files" in k for k in report.kept)
    delete_dataset(sqlite_url, "lit", delete_tars=True)
    after = sorted(p for p in data.rglob("*") if p.is_file() and "_versions" not in p.parts)
    assert after == before


def test_mds_and_litdata_on_s3_indexed_in_place(client, catalog_url, s3):
    fs = fsspec.filesystem("s3", **s3["storage_options"])
    for name in ("mds", "litdata"):
        for path in (DATA / name).iterdir():
            fs.pipe_file(f"{s3['bucket']}/{name}/{path.name}", path.read_bytes())
    opts = s3["storage_options"]
    mds = shardcat.index_directory(
        f"{s3['url']}/mds/", format="mds", catalog=catalog_url, dataset="mds", client=client,
        key_column="id", storage_options=opts,
    )  # fmt: skip
    lit = shardcat.index_directory(
        f"{s3['url']}/litdata", format="litdata", catalog=catalog_url, dataset="lit", client=client,
        storage_options=opts,
    )  # fmt: skip
    assert (mds.records, lit.records) == (12, 12)
    expected = _expected("mds")
    with Catalog(catalog_url, storage_options=opts) as cat:
        assert {s.url for s in cat.shards("mds")} == {
            f"{s3['url']}/mds/shard.{i:05d}.mds" for i in range(6)
        }
        keys = [s["id"] for s in expected]
        for record, sample in zip(cat.get_many("mds", keys), expected):
            _check(record, {k: v for k, v in sample.items() if k != "id"})
        _check(cat.get("mds", "sample-007"), {k: v for k, v in expected[7].items() if k != "id"})
        for i, sample in enumerate(_expected("litdata")):
            _check(cat.get("lit", str(i)), _flat(sample))
        assert cat.verify("mds").ok and cat.verify("lit").ok
        fs.pipe_file(f"{s3['bucket']}/mds/shard.00000.mds", b"\0" * 2002)
        with pytest.raises(ChecksumError):
            cat.get("mds", "sample-000")
        assert not cat.verify("mds").ok


def test_the_cli_indexes_an_mds_and_a_litdata_directory(client, sqlite_url, data):
    address = client.scheduler.address
    common = ["--scheduler", address, "--no-progress"]
    mds = ["index-mds", str(data / "mds"), "mds", "--key-column", "id"]
    result = CliRunner().invoke(app, ["--catalog", sqlite_url, "--json", *mds, *common])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["dataset"], doc["kind"], doc["records"], len(doc["files"])) == ("mds", "mds", 12, 6)
    result = CliRunner().invoke(
        app, ["--catalog", sqlite_url, "index-litdata", str(data / "litdata"), "lit", *common]
    )
    assert result.exit_code == 0, result.output
    assert "indexed 12 samples in 3 LitData chunks" in result.output
    got = CliRunner().invoke(app, ["--catalog", sqlite_url, "--json", "get", "mds", "sample-001"])
    entries = json.loads(got.output)["entries"]
    assert (entries["label"]["value"], entries["score"]["value"]) == (1, 0.125)  # numbers shown
    with Catalog(sqlite_url) as cat:
        assert cat.get("mds", "sample-001")["caption"].decode() == "caption 1 \u00e9"
        assert np.isclose(cat.get("lit", "9")["score"].decode(), 9 / 8)


def test_the_quick_verify_reads_the_size_of_each_file(client, sqlite_url, data):
    """verify(quick=True) of files indexed in place: each file's size against its row."""
    for kind in ("mds", "litdata"):
        shardcat.index_directory(
            data / kind, format=kind, catalog=sqlite_url, dataset=kind, client=client
        )
    with Catalog(sqlite_url) as cat:
        for kind in ("mds", "litdata"):
            report = cat.verify(kind, quick=True)
            assert report.ok and report.quick, report
            assert report.records_checked == cat.count(kind)
        grown = cat.dataset("mds").shards()[0].url
        with open(grown, "ab") as f:
            f.write(b"\0")
        problems = cat.verify("mds", quick=True).problems
    assert [(p.url, p.kind) for p in problems] == [(grown, "shard-mismatch")]
    assert "size_bytes" in problems[0].message
