"""``taridx export`` / ``taridx import`` against the files iTar wrote, local and on S3.

The three cases of tests/data/taridx_reference/: tars indexed by
``shardcat index-tar`` export to the reference's ``.taridx`` byte for byte,
and the reference's file imports them with shardcat's own keys (WebDataset's:
``train/0007`` and ``val/0007`` stay two samples) through a real Dask
cluster, on SQLite and PostgreSQL; a file of other tars is refused, naming
the member.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.catalog import internal
from shardcat.cli.app import app
from shardcat.format.tar import TaridxError, scan_tar
from shardcat.orchestration.taridx_io import export_taridx, import_taridx
from shardcat.reading import Catalog

REFERENCE = Path(__file__).parents[1] / "data" / "taridx_reference"
CASES = ("flat", "folders", "mixed")


def _keys(catalog: str, dataset: str, storage_options: dict | None = None) -> list[list[str]]:
    with Catalog(catalog, storage_options=storage_options) as cat:
        shards = sorted(cat.shards(dataset), key=lambda s: s.url)
        return [[r.key for r in internal.record_rows(cat, s.id)] for s in shards]


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    """A writable copy of the reference folders."""
    for case in CASES:
        shutil.copytree(REFERENCE / case, tmp_path / case)
    return tmp_path


@pytest.mark.parametrize("case", CASES)
def test_export_is_the_reference_file_and_import_registers_its_tars(
    client, catalog_url, cases, case
):
    tars = sorted((cases / case).glob("*.tar"))
    pattern = str(cases / case / "*.tar")
    shardcat.index_tar(pattern, catalog=catalog_url, dataset="wds", client=client)
    out = cases / f"{case}.out.taridx"
    done = export_taridx(catalog_url, "wds", str(out))
    assert out.read_bytes() == (cases / case / f"{case}.taridx").read_bytes()
    assert done.tars == [str(t) for t in tars]
    assert (done.shared_samples, done.shared_stems) == ((2, 1) if case == "mixed" else (0, 0))
    summary = import_taridx(
        catalog_url, str(cases / case / f"{case}.taridx"), pattern, dataset="again", client=client
    )
    want = [scan_tar(t).keys for t in tars]
    assert summary.records == sum(len(k) for k in want)
    assert _keys(catalog_url, "again") == want
    with Catalog(catalog_url) as cat:
        assert cat.verify("again").ok
        if case == "mixed":
            assert want == [["a/b.c/x0001", "train/0007", "val/0007", "top"]]
            assert cat.get("again", "val/0007")["cls"] != cat.get("again", "train/0007")["jpg"]


def test_import_of_another_tars_file_is_refused_naming_the_member(client, catalog_url, cases):
    # Both tars disagree; the one whose task fails first is named.
    with pytest.raises(
        TaridxError, match=r"member 0 of tar [01] \('img/00[02]0.jpg'\).*not of this"
    ):
        import_taridx(
            catalog_url,
            str(cases / "flat" / "flat.taridx"),
            str(cases / "folders" / "*.tar"),
            dataset="bad",
            client=client,
        )
    with Catalog(catalog_url) as cat:
        assert "bad" not in [d.name for d in cat.datasets()]  # went with its failed first job


@pytest.mark.parametrize("case", CASES)
def test_export_and_import_on_s3(client, sqlite_url, s3, case):
    fs = fsspec.filesystem("s3", **s3["storage_options"])
    opts = s3["storage_options"]
    tars = sorted((REFERENCE / case).glob("*.tar"))
    for t in [*tars, REFERENCE / case / f"{case}.taridx"]:
        fs.put_file(str(t), f"{s3['bucket']}/{case}/{t.name}")
    pattern = f"{s3['url']}/{case}/{case}-*.tar"
    shardcat.index_tar(
        pattern, catalog=sqlite_url, dataset="wds", storage_options=opts, client=client
    )
    out = f"{s3['url']}/{case}/out.taridx"
    export_taridx(sqlite_url, "wds", out, storage_options=opts)
    assert fs.cat_file(out) == (REFERENCE / case / f"{case}.taridx").read_bytes()
    summary = import_taridx(
        sqlite_url,
        f"{s3['url']}/{case}/{case}.taridx",
        pattern,
        dataset="again",
        storage_options=opts,
        client=client,
    )
    want = [scan_tar(t).keys for t in tars]
    assert summary.records == sum(len(k) for k in want)
    assert _keys(sqlite_url, "again", opts) == want


def test_cli_export_says_how_many_samples_share_a_stem(client, sqlite_url, cases):
    runner = CliRunner()
    address = client.scheduler.address
    pattern = str(cases / "mixed" / "*.tar")
    args = ["--catalog", sqlite_url, "index-tar", pattern, "-d", "m", "--scheduler", address]
    assert runner.invoke(app, args).exit_code == 0
    out = cases / "m.taridx"
    result = runner.invoke(app, ["--catalog", sqlite_url, "taridx", "export", "m", str(out)])
    assert result.exit_code == 0, result.output
    assert "2 samples share a stem with another sample (1 stem(s))" in result.output
    assert out.read_bytes() == (cases / "mixed" / "mixed.taridx").read_bytes()
    result = runner.invoke(
        app, ["--catalog", sqlite_url, "--json", "taridx", "export", "m", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert '"samples_sharing_a_stem": 2' in result.output
