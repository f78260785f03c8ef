"""``shardcat.index_tar`` on a real Dask cluster (two worker processes), local disk and S3.

One task per tar, one commit: a bad tar fails the job with nothing visible,
or is skipped and reported; every sample read back through the catalog
(lookups and ``shardcat.read``) equals what webdataset reads from the tar.
"""

from __future__ import annotations

import uuid

import fsspec
import pytest
from typer.testing import CliRunner

import shardcat
from shardcat.catalog import internal
from shardcat.cli.app import app
from shardcat.format.tar import NotATarError, TarChecksumError, TaridxError, read_taridx, scan_tar
from shardcat.reading import Catalog
from shardcat.testing.tars import record_as_sample as _as_dict
from shardcat.testing.tars import wds_samples, write_wds_tar


@pytest.fixture
def tars(tmp_path):
    folder = tmp_path / "wds"
    folder.mkdir()
    return [
        write_wds_tar(folder / f"train-{i:06d}.tar", n=30, seed=i, prefix=f"t{i}-")
        for i in range(3)
    ]


def test_index_a_brace_pattern_then_read_every_sample(client, catalog_url, tars):
    pattern = str(tars[0].parent / "train-{000000..000002}.tar")
    summary = shardcat.index_tar(pattern, catalog=catalog_url, dataset="wds", client=client)
    assert summary.records == 90 and len(summary.tars) == 3 and not summary.failed
    expected = [s for t in tars for s in wds_samples(t)]
    with Catalog(catalog_url) as cat:
        assert [s.url for s in cat.shards("wds")] == [str(t) for t in tars]
        assert [
            _as_dict(r) for r in cat.get_many("wds", [s["__key__"] for s in expected])
        ] == expected
        assert cat.verify("wds").ok
        bag = shardcat.read(cat, "wds", decode=False)
        got = sorted(
            (
                {
                    "__key__": r["__key__"],
                    **{k: bytes(v.data) for k, v in r.items() if k != "__key__"},
                }
                for r in bag.compute(scheduler="sync")
            ),
            key=lambda d: d["__key__"],
        )
    assert got == sorted(expected, key=lambda d: d["__key__"])


def test_shard_numbers_come_from_the_urls_trailing_digits_when_unique(client, sqlite_url, tmp_path):
    folder = tmp_path / "numbered"
    folder.mkdir()
    paths = [
        write_wds_tar(folder / name, n=3, seed=i, prefix=f"n{i}-")
        for i, name in enumerate(
            ["train-000007.tar", "train-000012.tar", "val-000012.tar", "extra.tar"]
        )
    ]
    shardcat.index_tar([str(p) for p in paths], catalog=sqlite_url, dataset="n", client=client)
    with Catalog(sqlite_url) as cat:
        got = {s.url: s.shard_number for s in cat.shards("n")}
    assert got == {str(paths[0]): 7, str(paths[1]): None, str(paths[2]): None, str(paths[3]): None}
    with Catalog(sqlite_url) as cat:
        assert cat.verify("n").ok  # the number is not the tar's bytes: not compared
        cat.reindex("n", [str(paths[0])], kind="tar")
        assert {s.url: s.shard_number for s in cat.shards("n")}[str(paths[0])] == 7


def test_tar_shard_numbers_rules():
    from shardcat.orchestration.index_tar import tar_shard_numbers

    urls = ["s3://b/a-000001.tar", "s3://b/a-000002.tar.gz", "s3://b/7/x.tar", "s3://b/b-1.tar"]
    assert tar_shard_numbers(urls) == [None, 2, None, None]
    assert tar_shard_numbers(["a/000010.tar", "a/shard11"]) == [10, 11]


def test_a_truncated_tar_is_a_typed_error_naming_the_file_and_offset(client, sqlite_url, tars):
    from shardcat.format.tar import TarTruncatedError

    size = tars[0].stat().st_size
    tars[0].write_bytes(tars[0].read_bytes()[: size // 2])
    summary = shardcat.index_tar(
        [str(t) for t in tars], catalog=sqlite_url, dataset="wds", client=client, on_error="skip"
    )
    (failure,) = summary.failed
    assert failure.url == str(tars[0]) and failure.error == TarTruncatedError.__name__
    assert str(tars[0]) in failure.message and "offset" in failure.message
    with pytest.raises(TarTruncatedError) as err:
        shardcat.index_tar([str(tars[0])], catalog=sqlite_url, dataset="other", client=client)
    assert err.value.path == str(tars[0]) and err.value.offset is not None


def test_a_bad_tar_fails_the_job_and_leaves_nothing_visible(client, catalog_url, tars):
    data = bytearray(tars[1].read_bytes())
    data[100] ^= 0x40  # inside the first header: its checksum no longer matches
    tars[1].write_bytes(bytes(data))
    with pytest.raises(TarChecksumError) as err:
        shardcat.index_tar(
            [str(t) for t in tars], catalog=catalog_url, dataset="wds", client=client
        )
    assert str(tars[1]) in str(err.value) and err.value.offset == 0
    with Catalog(catalog_url) as cat:
        # The failed first job created the dataset: it goes; the tars are never touched.
        assert cat.datasets() == []
        assert all(t.exists() for t in tars)
        # A dataset that existed before the job stays, as it was.
        shardcat.index_tar(str(tars[0]), catalog=cat, dataset="wds", client=client)
        with pytest.raises(TarChecksumError):
            shardcat.index_tar(str(tars[1]), catalog=cat, dataset="wds", client=client)
        assert [d.name for d in cat.datasets()] == ["wds"]
        assert cat.count("wds") == 30
        assert [j.state for j in cat.jobs("wds")] == ["committed", "aborted"]


def test_on_error_skip_reports_and_leaves_bad_tars_out(client, sqlite_url, tars):
    tars[2].write_bytes(b"not a tar at all" * 10)
    summary = shardcat.index_tar(
        str(tars[0].parent / "*.tar"),
        catalog=sqlite_url,
        dataset="wds",
        client=client,
        on_error="skip",
    )
    assert [f.url for f in summary.failed] == [str(tars[2])]
    assert summary.failed[0].error == NotATarError.__name__
    assert summary.records == 60
    with Catalog(sqlite_url) as cat:
        assert [s.url for s in cat.shards("wds")] == [str(t) for t in tars[:2]]


def test_index_tars_on_s3(client, sqlite_url, s3, tars):
    fs = fsspec.filesystem("s3", **s3["storage_options"])
    for t in tars:
        fs.put_file(str(t), f"{s3['bucket']}/wds/{t.name}")
    pattern = f"{s3['url']}/wds/train-{{000000..000002}}.tar"
    summary = shardcat.index_tar(
        pattern,
        catalog=sqlite_url,
        dataset="wds",
        storage_options=s3["storage_options"],
        client=client,
    )
    assert summary.records == 90
    with Catalog(sqlite_url, storage_options=s3["storage_options"]) as cat:
        for t in tars:
            for s in wds_samples(t):
                assert _as_dict(cat.get("wds", s["__key__"])) == s
        assert cat.verify("wds").ok


def test_cli_index_tar_and_taridx_export_import(client, sqlite_url, tars, tmp_path):
    runner = CliRunner()
    pattern = str(tars[0].parent / "train-{000000..000002}.tar")
    address = client.scheduler.address
    result = runner.invoke(
        app,
        ["--catalog", sqlite_url, "index-tar", pattern, "-d", "wds", "--scheduler", address, "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "90 samples in 3 tars" in result.output
    out = tmp_path / "wds.taridx"
    result = runner.invoke(app, ["--catalog", sqlite_url, "taridx", "export", "wds", str(out)])
    assert result.exit_code == 0, result.output
    index = read_taridx(str(out))
    # iTar's rows: each member's, and the pax header's webdataset writes before each member.
    assert len(index.rows) == 2 * sum(len(scan_tar(t).entries) for t in tars)
    assert sorted(set(index.rows["fid"].tolist())) == [0, 1, 2]
    # Import into another dataset of another catalog: the same rows, checked against each tar.
    other = f"sqlite:///{tmp_path / 'other.db'}"
    from shardcat.orchestration.taridx_io import import_taridx

    seen: list[tuple[int, int]] = []
    summary = import_taridx(
        other, str(out), pattern, dataset="again", client=client,
        progress=lambda done, total: seen.append((done, total)),
    )  # fmt: skip
    assert summary.records == 90
    assert seen == [(0, 3), (1, 3), (2, 3), (3, 3)]  # before any tar, then after each
    # The command takes --no-progress as write does (and draws the same bar without it).
    result = runner.invoke(
        app,
        ["--catalog", f"sqlite:///{tmp_path / 'fourth.db'}", "taridx", "import", str(out),
         "--tars", pattern, "-d", "again", "--scheduler", address, "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with Catalog(other) as cat:
        for t in tars:
            for s in wds_samples(t):
                assert _as_dict(cat.get("again", s["__key__"])) == s
    # An index of other tars is refused, nothing committed.
    third = f"sqlite:///{tmp_path / 'third.db'}"
    swapped = str(tars[0].parent / "train-{000001,000000,000002}.tar")
    with pytest.raises(TaridxError, match="not of this tar"):
        import_taridx(third, str(out), swapped, dataset="bad", client=client)
    with Catalog(third) as cat:
        assert cat.datasets() == []  # the failed first job's dataset went with it


def test_taridx_import_refuses_a_fid_past_the_pattern(sqlite_url, tars, tmp_path):
    from shardcat.format.tar import taridx_from_scans
    from shardcat.orchestration.taridx_io import import_taridx

    index = taridx_from_scans([scan_tar(t) for t in tars])
    path = tmp_path / "x.taridx"
    path.write_bytes(index.to_bytes())
    with pytest.raises(TaridxError, match="fid 2"):
        import_taridx(sqlite_url, str(path), [str(t) for t in tars[:2]], dataset="x")


def test_a_worker_killed_while_scanning_a_tar_still_indexes_every_sample_once(
    client, sqlite_url, tars
):
    from .killtar import PROTOCOL, register

    register()
    client.run(register)
    urls = [f"{PROTOCOL}://{t}" for t in tars]
    summary = shardcat.index_tar(urls, catalog=sqlite_url, dataset="wds", client=client)
    assert (tars[0].parent / "killed").exists()  # the kill really happened
    assert summary.records == 90
    expected = [s for t in tars for s in wds_samples(t)]
    with Catalog(sqlite_url) as cat:
        shards = cat.shards("wds")
        assert [s.url for s in shards] == urls
        assert sum(s.record_count for s in shards) == 90
        assert [
            _as_dict(r) for r in cat.get_many("wds", [s["__key__"] for s in expected])
        ] == expected
        assert cat.verify("wds").ok


def test_tars_from_webdataset_shardwriter_by_glob(client, sqlite_url, tmp_path):
    import webdataset as wds

    folder = tmp_path / "sw"
    folder.mkdir()
    with wds.ShardWriter(str(folder / "part-%06d.tar"), maxcount=25) as sink:
        for i in range(60):
            sink.write({"__key__": f"k{i:04d}", "txt": f"text {i}", "npy.bin": bytes([i]) * i})
    written = sorted(folder.glob("*.tar"))
    assert len(written) == 3
    summary = shardcat.index_tar(
        str(folder / "*.tar"), catalog=sqlite_url, dataset="sw", client=client
    )
    assert summary.records == 60 and summary.tars == [str(p) for p in written]
    with Catalog(sqlite_url) as cat:
        for p in written:
            for s in wds_samples(p):
                assert _as_dict(cat.get("sw", s["__key__"])) == s


def test_read_of_a_tar_shard_streams_checked_samples_and_only_asked_entries(sqlite_url, tmp_path):
    from shardcat.errors import ChecksumError
    from shardcat.orchestration import iter_tar_shard

    path = write_wds_tar(tmp_path / "r.tar", n=30)
    expected = wds_samples(path)
    with Catalog(sqlite_url) as cat:
        cat.create_dataset("r", str(tmp_path))
        row = cat.register_shard("r", scan_tar(path))
        rows = internal.record_rows(cat, row.id)
        got = list(iter_tar_shard(str(path), rows, decode=False))
        assert [
            {"__key__": g["__key__"], **{k: bytes(v.data) for k, v in g.items() if k != "__key__"}}
            for g in got
        ] == expected
        decoded = list(iter_tar_shard(str(path), rows, entries=["cls", "json"]))
        assert [(d["__key__"], set(d) - {"__key__"}) for d in decoded] == [
            (s["__key__"], {"cls", "json"}) for s in expected
        ]
        assert decoded[3]["json"] == {"i": 3}
        info = scan_tar(path)
        last = info.samples()[-1].entries[0]
        data = bytearray(path.read_bytes())
        data[last.payload_offset] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(ChecksumError):
            list(iter_tar_shard(str(path), rows, decode=False))


def test_two_catalogs_on_one_cluster_never_share_task_results(client, tmp_path):
    # Both jobs are job 1 of their catalog, run back to back: the scheduler may still
    # hold the first job's results when the second submits (releasing them is
    # asynchronous), so task keys must differ between runs, not only between job ids.
    first = [write_wds_tar(tmp_path / f"a{i}.tar", n=4, prefix=f"a{i}-") for i in range(3)]
    second = [write_wds_tar(tmp_path / f"b{i}.tar", n=6, prefix=f"b{i}-") for i in range(3)]
    for _ in range(3):
        one, two = (f"sqlite:///{tmp_path}/{uuid.uuid4().hex}.db" for _ in range(2))
        a = shardcat.index_tar([str(t) for t in first], catalog=one, dataset="d", client=client)
        b = shardcat.index_tar([str(t) for t in second], catalog=two, dataset="d", client=client)
        assert a.job_id == b.job_id == 1
        assert a.tars == [str(t) for t in first] and a.records == 12
        assert b.tars == [str(t) for t in second] and b.records == 18
