"""copy_dataset: local -> S3 -> local, across catalogs, interrupted and rerun, and moves."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import dask.bag as db
import pytest

import shardcat
from shardcat.catalog import internal
from shardcat.errors import ChecksumError, DatasetExistsError, DestinationNotEmptyError
from shardcat.reading import Catalog

from .samples import numbered_sample

N = 120


def _write(root: Path, catalog: str, client: Any, dataset: str = "src") -> None:
    shardcat.write(
        db.from_sequence(range(N), npartitions=3).map(numbered_sample),
        str(root),
        catalog=catalog,
        dataset=dataset,
        max_records_per_shard=20,
        client=client,
        progress=False,
    )


def _records(cat: Catalog, dataset: str) -> list[tuple[str, bytes, Any]]:
    batch = cat.get_many(dataset, [f"n/{i:05d}" for i in range(N)])
    assert batch.missing == []
    return [(r.key, r["bin"].data, r["json"].decode()) for r in batch.records]


def test_copy_local_to_s3_to_local_across_sqlite_and_postgres(
    tmp_path, sqlite_url, postgres_url, s3, client
):
    _write(tmp_path / "src", sqlite_url, client)
    src = Catalog(sqlite_url)
    expected = _records(src, "src")
    there = f"{s3['url']}/copies/src"
    summary = shardcat.copy_dataset(
        sqlite_url,
        "src",
        there,
        to_catalog=postgres_url,
        destination_options=s3["storage_options"],
        client=client,
    )
    assert (summary.shards, summary.copied, summary.records) == (6, 6, N)
    pg = Catalog(postgres_url)
    assert pg.info("src").root_url == there
    assert all(s.url.startswith(there + "/") for s in pg.shards("src"))
    assert pg.job(summary.job_id).state == "committed"
    back = shardcat.copy_dataset(
        pg,
        "src",
        str(tmp_path / "back"),
        to_catalog=src,
        name="back",
        storage_options=s3["storage_options"],
        destination_options={},
        client=client,
    )
    assert back.copied == 6
    assert _records(src, "back") == expected
    assert _records(src, "src") == expected  # the source is untouched
    assert src.verify("back").ok  # every CRC, against the catalog


def test_interrupted_copy_leaves_nothing_visible_and_a_rerun_copies_only_the_rest(
    tmp_path, sqlite_url, client
):
    _write(tmp_path / "src", sqlite_url, client)
    cat = Catalog(sqlite_url)
    expected = _records(cat, "src")
    bad = cat.shards("src")[3].url
    original = Path(bad).read_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0xFF  # this shard's copy fails its verification
    Path(bad).write_bytes(bytes(damaged))
    dest = tmp_path / "dest"
    with pytest.raises(ChecksumError):
        shardcat.copy_dataset(cat, "src", str(dest), name="copy", client=client, retries=0)
    assert [d.name for d in cat.datasets()] == ["src"]  # the copy is invisible
    # Good copies made before the failure stay, unregistered (the failure cancels the rest).
    present = len(list(dest.rglob("*.shard")))
    assert present <= 5
    assert cat.count("src") == N
    Path(bad).write_bytes(original)  # repaired: the rerun copies only what is missing
    summary = shardcat.copy_dataset(cat, "src", str(dest), name="copy", client=client)
    # A task still running when the copy failed may publish its copy after the count above:
    # the rerun copies at most what was missing then, and at least the shard that failed.
    assert summary.shards == 6 and 1 <= summary.copied <= 6 - present
    assert _records(cat, "copy") == expected


def test_move_repoints_the_dataset_then_removes_the_sources(tmp_path, sqlite_url, client):
    _write(tmp_path / "src", sqlite_url, client)
    cat = Catalog(sqlite_url)
    expected = _records(cat, "src")
    before = cat.info("src").version
    old = {s.url for s in cat.shards("src")}
    keys = [f"n/{i:05d}" for i in range(0, N, 7)]
    points = [(k, cat.get("src", k)["bin"].data) for k in keys]  # the lookup caches the old URLs
    summary = shardcat.copy_dataset(cat, "src", str(tmp_path / "moved"), move=True, client=client)
    assert summary.moved and summary.sources_left == []
    assert not any(Path(u).exists() for u in old)
    # Its cached URLs name files that are gone: it asks the catalog again and reads the copies.
    assert [(k, cat.get("src", k)["bin"].data) for k in keys] == points
    assert cat.info("src").root_url == str(tmp_path / "moved")
    assert cat.info("src").version > before
    assert all(s.url.startswith(str(tmp_path / "moved")) for s in cat.shards("src"))
    assert _records(cat, "src") == expected
    assert cat.shards("src", state="deleted") == []  # the removed sources' rows are purged
    # A rerun of a move that committed (cut short before recording the root) only records it.
    moved_version = cat.info("src").version
    again = shardcat.copy_dataset(cat, "src", str(tmp_path / "moved"), move=True, client=client)
    assert again.job_id is None and again.copied == 0
    assert cat.info("src").version == moved_version  # nothing committed
    assert _records(cat, "src") == expected
    with pytest.raises(ValueError, match="keeps the dataset's name"):
        shardcat.copy_dataset(cat, "src", str(tmp_path / "x"), move=True, name="y", client=client)


def test_name_collisions_and_a_destination_that_is_not_empty(tmp_path, sqlite_url, client):
    _write(tmp_path / "src", sqlite_url, client)
    _write(tmp_path / "other", sqlite_url, client, dataset="other")
    cat = Catalog(sqlite_url)
    with pytest.raises(DatasetExistsError, match="onto itself"):
        shardcat.copy_dataset(cat, "src", str(tmp_path / "a"), client=client)
    with pytest.raises(DatasetExistsError, match="with records already"):
        shardcat.copy_dataset(cat, "src", str(tmp_path / "a"), name="other", client=client)
    with pytest.raises(DestinationNotEmptyError, match="keeps its shards"):
        shardcat.copy_dataset(cat, "src", str(tmp_path / "src"), name="same", client=client)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("someone else's")
    with pytest.raises(DestinationNotEmptyError, match="1 objects that are not shards"):
        shardcat.copy_dataset(cat, "src", str(busy), name="copy", client=client)
    assert [d.name for d in cat.datasets()] == ["other", "src"]  # nothing was created
    assert not list(busy.rglob("*.shard"))


def test_a_worker_killed_mid_copy_loses_nothing(tmp_path, sqlite_url):
    import os
    import signal
    import threading

    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        shardcat.write(
            db.from_sequence(range(N), npartitions=3).map(numbered_sample),
            str(tmp_path / "src"),
            catalog=sqlite_url,
            dataset="src",
            max_records_per_shard=3,  # 42 shards: the copy takes a while
            client=client,
            progress=False,
        )
        cat = Catalog(sqlite_url)
        expected = _records(cat, "src")
        dest = tmp_path / "dest"
        outcome: list[Any] = []

        def run() -> None:
            try:
                outcome.append(
                    shardcat.copy_dataset(cat, "src", str(dest), name="copy", client=client)
                )
            except BaseException as e:
                outcome.append(e)

        copying = threading.Thread(target=run)
        copying.start()
        for _ in range(2000):  # bounded: up to 100 s for the first copy to land
            if list(dest.glob("*.shard")) or not copying.is_alive():
                break
            time.sleep(0.05)
        assert copying.is_alive(), "the copy ended before a worker could be killed"
        pids = client.run(os.getpid)
        os.kill(next(iter(pids.values())), signal.SIGKILL)  # the nanny starts a new worker
        copying.join(timeout=300)
    (summary,) = outcome
    assert isinstance(summary, shardcat.orchestration.CopySummary), summary
    # Tasks lost with the worker ran again; each found its verified copy or made it anew.
    assert summary.shards == len(cat.shards("src")) == 42
    assert len(list(dest.glob("*.shard"))) == 42
    assert _records(cat, "copy") == expected
    assert cat.verify("copy").ok


def test_tar_shards_registered_in_place_are_refused_not_copied_half(tmp_path, sqlite_url, client):
    import webdataset as wds

    tar = tmp_path / "tars" / "train-000000.tar"
    tar.parent.mkdir()
    with wds.TarWriter(str(tar)) as sink:
        sink.write({"__key__": "s0", "cls": "1"})
    shardcat.index_tar(str(tar), catalog=sqlite_url, dataset="wds", client=client)
    with pytest.raises(ValueError, match="tar shard"):
        shardcat.copy_dataset(sqlite_url, "wds", str(tmp_path / "copy"), name="c", client=client)
    assert not (tmp_path / "copy").exists()


def _hide_three(root: Path, cat: Catalog, client: Any) -> dict[str, Any]:
    """Delete two keys and replace one of ``src``: its shards then hold 3 records it does not serve."""
    shardcat.delete_keys(cat, "src", ["n/00001", "n/00002"])
    shardcat.write(
        db.from_sequence([{"__key__": "n/00005", "bin": b"new", "json": {"i": -5}}]),
        str(root / "src"),  # an append goes to the dataset's own folder
        catalog=cat,
        dataset="src",
        mode="append",
        on_duplicate="replace",
        client=client,
        progress=False,
    )
    return _served(cat, "src")


def _served(cat: Catalog, dataset: str) -> dict[str, Any]:
    batch = cat.get_many(dataset, [f"n/{i:05d}" for i in range(N)])
    assert sorted(batch.missing) == ["n/00001", "n/00002"]
    return {r.key: (r["bin"].data, r["json"].decode()) for r in batch.records if r is not None}


def test_records_deleted_or_replaced_stay_hidden_in_a_copy_and_a_move(
    tmp_path, sqlite_url, postgres_url, client
):
    """Copies are whole files: the copy's commit hides what the source's versions hid."""
    _write(tmp_path / "src", sqlite_url, client)
    cat = Catalog(sqlite_url)
    served = _hide_three(tmp_path, cat, client)
    assert served["n/00005"] == (b"new", {"i": -5})
    for to in (sqlite_url, postgres_url):
        summary = shardcat.copy_dataset(
            cat, "src", str(tmp_path / f"dest-{to[:5]}"), to_catalog=to, name="copy", client=client
        )
        assert (summary.shards, summary.records) == (7, N - 2)
        dest = Catalog(to)
        assert _served(dest, "copy") == served
        assert dest.count("copy") == N - 2
        assert sum(len(h) for _, h in internal.visible_shards(dest, "copy")[1]) == 3
        assert [v.total_records for v in dest.log("copy")] == [N - 2]
        assert dest.verify("copy").ok
    first = {r.key: r["bin"].data for r in cat.get_many("src", ["n/00001", "n/00005"], version=1)}
    moved = shardcat.copy_dataset(cat, "src", str(tmp_path / "moved"), move=True, client=client)
    assert (moved.shards, moved.records, moved.job_id) == (7, N - 2, None)
    assert _served(cat, "src") == served and cat.count("src") == N - 2
    assert cat.log("src")[0].operation == "move"
    assert cat.log("src")[0].total_records == N - 2
    # Every kept version moved with it: version 1 still serves the deleted and replaced keys.
    assert not (tmp_path / "src").exists() or not any((tmp_path / "src").iterdir())
    assert all(s.url.startswith(str(tmp_path / "moved")) for s in cat.shards("src", state=None))
    assert {
        r.key: r["bin"].data for r in cat.get_many("src", ["n/00001", "n/00005"], version=1)
    } == first
    assert cat.verify("src").ok
    assert cat.verify("src", version=1).ok


@pytest.mark.parametrize("store", ["local", "s3"])
def test_a_source_gone_before_its_copy_is_a_typed_error(tmp_path, store, request):
    """A shard expired and gc'd while a copy or move of it ran: ShardNotFoundError.

    Before, the store's own FileNotFoundError escaped untyped (found by the
    concurrent-history checker: a move racing expire + gc, tests/reliability/test_history.py).
    """
    from shardcat.errors import ShardNotFoundError
    from shardcat.orchestration.copy import copy_shard

    if store == "s3":
        s3 = request.getfixturevalue("s3")
        base, opts = s3["url"], s3["storage_options"]
    else:
        base, opts = str(tmp_path), {}
    with pytest.raises(ShardNotFoundError, match=r"gone\.shard"):
        copy_shard(f"{base}/src/gone.shard", f"{base}/dst/gone.shard", "id", 0, opts, opts)
    fs, path = shardcat.storage.resolve(f"{base}/dst", opts)
    assert not fs.exists(f"{path}/gone.shard")  # nothing published


@pytest.mark.parametrize("store", ["local", "s3"])
def test_missing_source_shards_are_named_before_anything_is_copied(
    tmp_path, sqlite_url, client, store, request
):
    """Shards deleted outside shardcat: one typed error naming them and `verify`, nothing copied."""
    from shardcat.errors import ShardNotFoundError

    if store == "s3":
        s3 = request.getfixturevalue("s3")
        base, opts = f"{s3['url']}/missing-{tmp_path.name}", s3["storage_options"]
    else:
        base, opts = str(tmp_path), {}
    shardcat.write(
        db.from_sequence(range(N), npartitions=3).map(numbered_sample),
        f"{base}/src",
        catalog=sqlite_url,
        dataset="src",
        max_records_per_shard=20,
        client=client,
        progress=False,
        storage_options=opts,
    )
    cat = Catalog(sqlite_url, storage_options=opts)
    gone = sorted(s.url for s in cat.shards("src"))[1:3]
    fs, _ = shardcat.storage.resolve(base, opts)
    for url in gone:
        fs.rm_file(shardcat.storage.resolve(url, opts)[1])
    with pytest.raises(ShardNotFoundError) as err:
        shardcat.copy_dataset(
            cat, "src", f"{base}/copy", name="copy", storage_options=opts, client=client
        )
    text = str(err.value)
    assert "2 shards of its 6 are missing" in text and "shardcat verify src" in text
    assert all(url.rsplit("/", 1)[-1] in text for url in gone)
    assert not fs.exists(shardcat.storage.resolve(f"{base}/copy", opts)[1])
    assert "copy" not in [d.name for d in cat.datasets()]


def _chosen(cat: Catalog, dataset: str, where: str, **kw: Any) -> list[str]:
    chosen = cat.select(dataset, where, **kw)
    return sorted(k for keys in chosen.keys.values() for k in keys)


def test_a_copy_keeps_the_declared_fields_and_their_latest_values(
    tmp_path, sqlite_url, postgres_url, client
):
    """Found by a new user: `shardcat copy` gave a dataset whose where= filters knew no field.

    The copy's one version carries the fields the source's latest version reads (written
    with the samples, or set by update_fields since), lists them in its manifest, and its
    history brings them back from its bucket.
    """
    from shardcat.readers import index_fields

    _write(tmp_path / "src", sqlite_url, client)
    cat = Catalog(sqlite_url)
    index_fields(cat, "src", {"i": int})
    cat.declare_fields("src", {"split": str})
    cat.update_fields("src", {"n/00003": {"split": "val"}, "n/00004": {"split": "val"}})
    cat.update_fields("src", {"n/00004": {"split": "test", "i": 1000}})
    cat.delete_keys("src", ["n/00005"])
    for target, there in ((sqlite_url, "dst"), (postgres_url, "src")):
        shardcat.copy_dataset(
            cat,
            "src",
            str(tmp_path / f"copy-{there}"),
            to_catalog=target,
            name=there,
            client=client,
        )
        dst = Catalog(target)
        assert dst.fields(there) == {"i": "number", "split": "text"}
        assert [v.operation for v in dst.log(there)] == ["copy"]
        assert _chosen(dst, there, "split = 'val'") == ["n/00003"]
        assert _chosen(dst, there, "split = 'test' AND i = 1000") == ["n/00004"]
        assert _chosen(dst, there, "i < 3") == ["n/00000", "n/00001", "n/00002"]
        assert _chosen(dst, there, "i = 5") == []  # deleted in the source: hidden in the copy
        assert len(_chosen(dst, there, "i >= 0")) == N - 1
        report = dst.verify(there)
        assert report.ok, [str(p) for p in report.problems]
        # The copy's catalog is lost: its bucket brings the values back with its version.
        dst.delete_dataset(there)
        dst.create_dataset(there, str(tmp_path / f"copy-{there}"))
        assert dst.rebuild_history(there, str(tmp_path / f"copy-{there}")).versions == [1]
        assert _chosen(dst, there, "split = 'test' AND i = 1000") == ["n/00004"]
        assert len(_chosen(dst, there, "i >= 0")) == N - 1
        assert dst.verify(there).ok
