"""shardcat.export: versions out as WebDataset tars, read back by webdataset and by index_tar."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import dask.bag as db
import numpy as np
import pytest
import webdataset as wds

import shardcat
import shardcat.config
from _handcluster import hand_cluster
from shardcat.catalog import internal
from shardcat.errors import (
    ChecksumError,
    DatasetExistsError,
    DestinationNotEmptyError,
    ExportNameError,
    JobInterrupted,
    WorkersLostError,
)
from shardcat.format.tar import Taridx, taridx_from_scans
from shardcat.orchestration import DaskCluster
from shardcat.orchestration.export_tars import SourcePiece, TarPlan, write_tar
from shardcat.reading import Catalog
from shardcat.reading.checks import scan_tar_url
from shardcat.storage import open_source, resolve

from .samples import make_samples

PARTS, PER_PART = 3, 30
REPLACED = [f"s/{1:03d}/{i:05d}" for i in range(5, 15)]
DELETED = [f"s/{2:03d}/{i:05d}" for i in range(20, 25)]


def _samples(partition: int) -> list[dict[str, Any]]:
    return make_samples(partition, PER_PART)


def _replacement(partition: int) -> list[dict[str, Any]]:
    return [
        {"__key__": k, "bin": f"new {k}".encode() * 40, "json": {"replaced": k}}
        for k in REPLACED
        if partition == 0
    ]


def _write_versions(root: Path, catalog: str, client: Any) -> None:
    """v1: 90 samples in 9 shards; v2: 10 of them replaced (zstd); v3: 5 deleted."""
    shardcat.write(
        db.from_sequence(range(PARTS), npartitions=PARTS).map(_samples).flatten(),
        str(root),
        catalog=catalog,
        dataset="src",
        max_records_per_shard=10,
        client=client,
        progress=False,
    )
    shardcat.write(
        db.from_sequence([0], npartitions=1).map(_replacement).flatten(),
        str(root),
        catalog=catalog,
        dataset="src",
        mode="append",
        on_duplicate="replace",
        compression="zstd",
        client=client,
        progress=False,
    )
    shardcat.delete_keys(catalog, "src", DELETED)


def _expected(version: int) -> dict[str, dict[str, Any]]:
    """What each version holds, from the samples written (not from shardcat's readers)."""
    out = {s["__key__"]: s for p in range(PARTS) for s in _samples(p)}
    if version >= 2:
        for s in _replacement(0):
            out[s["__key__"]] = s
    if version >= 3:
        for k in DELETED:
            del out[k]
    return out


def _raw(cat: Catalog, dataset: str, version: int | None) -> list[tuple[str, dict[str, bytes]]]:
    """The version's samples in read order, each entry's bytes as ``get`` returns them."""
    order = [
        s["__key__"]
        for s in shardcat.read(cat, dataset, decode=False, version=version).compute(
            scheduler="sync"
        )
    ]
    batch = cat.get_many(dataset, order, version=version)
    assert batch.missing == []
    return [(r.key, {n: e.data for n, e in r.items()}) for r in batch.records]


def _webdataset(urls: list[str]) -> list[tuple[str, dict[str, bytes]]]:
    return [
        (s["__key__"], {k: v for k, v in s.items() if not k.startswith("__")})
        for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False)
    ]


def _check_taridx(url: str) -> None:
    """The .taridx beside a tar is the one iTar (and shardcat's own taridx export) makes."""
    source = open_source(url, {})
    try:
        reference = taridx_from_scans([scan_tar_url(url, {})], sources=[source]).to_bytes()
    finally:
        source.close()
    assert Path(url.replace(".tar", ".taridx")).read_bytes() == reference


def _check_decoded(got: list[tuple[str, dict[str, bytes]]], version: int) -> None:
    want = _expected(version)
    assert sorted(k for k, _ in got) == sorted(want)
    for key, entries in got:
        sample = want[key]
        assert entries["bin"] == sample["bin"]
        assert json.loads(entries["json"]) == sample["json"]
        if "npy" in sample:
            np.testing.assert_array_equal(np.load(io.BytesIO(entries["npy"])), sample["npy"])
        assert set(entries) == {n for n in sample if n != "__key__"}


def test_versions_round_trip_through_webdataset_and_index_tar(tmp_path, catalog_url, client):
    _write_versions(tmp_path / "src", catalog_url, client)
    cat = Catalog(catalog_url)
    assert cat.log("src")[0].number == 3
    # The replacements are stored compressed: exported decompressed, as get returns them.
    codecs = {
        codec
        for shard, _ in internal.visible_shards(cat, "src")[1]
        for row in internal.record_rows(cat, shard.id)
        for _, _, codec in row.entries
    }
    assert codecs == {"none", "zstd"}
    for version in (3, 1):
        dest = tmp_path / f"wds-v{version}"
        summary = shardcat.export(
            catalog_url,
            "src",
            str(dest),
            version=version,
            shard_size="40KB",
            client=client,
            register=f"back{version}",
        )
        want = _raw(cat, "src", version)
        assert summary.version == version
        assert summary.samples == len(want) == len(_expected(version))
        assert len(summary.tars) > 2
        assert summary.tars == sorted(str(p) for p in dest.glob("src-*.tar"))
        assert sorted(p.name for p in dest.glob("*.taridx")) == [
            Path(t).name.replace(".tar", ".taridx") for t in summary.tars
        ]
        got = _webdataset(summary.tars)
        assert got == want  # sample by sample, in read order
        _check_decoded(got, version)
        # The same tars, indexed by shardcat (register=) and read back with get.
        keys = [k for k, _ in want]
        back = cat.get_many(f"back{version}", keys)
        assert [(r.key, {n: e.data for n, e in r.items()}) for r in back.records] == want
        assert {s.kind for s in cat.shards(f"back{version}")} == {"tar"}
        assert cat.log(f"back{version}")[0].number == 1  # one commit


def test_tars_are_cut_at_the_size_and_never_split_a_sample(tmp_path, sqlite_url, client):
    _write_versions(tmp_path / "src", sqlite_url, client)
    limit = 12_000
    summary = shardcat.export(
        sqlite_url, "src", str(tmp_path / "out"), shard_size=limit, client=client
    )
    seen: dict[str, str] = {}
    order = []
    for url in summary.tars:
        with tarfile.open(url) as tf:
            members = tf.getmembers()
        keys = []
        for m in members:
            key = m.name.split("/")[-1].split(".", 1)[0]
            key = m.name[: len(m.name) - len(m.name.split("/")[-1])] + key
            if not keys or keys[-1] != key:
                keys.append(key)
        assert len(keys) == len(set(keys))  # a sample's members are adjacent
        for key in keys:
            assert key not in seen, f"{key} in {seen.get(key)} and {url}"
            seen[key] = url
        order.extend(keys)
        size = os.path.getsize(url)
        assert size <= limit or len(keys) == 1, (url, size, len(keys))
        _check_taridx(url)
    assert order == [k for k, _ in _raw(Catalog(sqlite_url), "src", None)]
    # A limit below one sample: every sample gets its own tar.
    alone = shardcat.export(sqlite_url, "src", str(tmp_path / "alone"), shard_size=1, client=client)
    assert len(alone.tars) == alone.samples


def _hostile(partition: int) -> list[dict[str, Any]]:
    deep = "/".join(f"d{i}" for i in range(70))  # 210 bytes of folders: ustar's prefix field
    return [
        {"__key__": "plain", "txt": "a"},
        {"__key__": "dots.in.folder/x", "seg.png": b"\x89PNG", "json": {"a": 1}},
        {"__key__": "ünïcødé/ключ", "txt": "unicode"},
        {"__key__": f"{deep}/leaf", "txt": "prefix field"},
        {"__key__": "long/" + "n" * 300, "txt": "pax path"},
        {"__key__": "__not_meta/x", "txt": "kept"},
    ]


def test_hostile_keys_round_trip_or_are_refused_before_anything_is_written(
    tmp_path, sqlite_url, client
):
    shardcat.write(
        db.from_sequence([0], npartitions=1).map(_hostile).flatten(),
        str(tmp_path / "src"),
        catalog=sqlite_url,
        dataset="hostile",
        client=client,
        progress=False,
    )
    cat = Catalog(sqlite_url)
    summary = shardcat.export(
        cat, "hostile", str(tmp_path / "out"), client=client, register="hostile_back"
    )
    want = _raw(cat, "hostile", None)
    assert _webdataset(summary.tars) == want
    assert [
        (r.key, {n: e.data for n, e in r.items()})
        for r in cat.get_many("hostile_back", [k for k, _ in want]).records
    ] == want
    _check_taridx(summary.tars[0])

    for key, entry, why in [
        ("a.b", "txt", "first dot"),
        ("x/v1.2", "txt", "first dot"),
        ("k", "JPG", "lower-cases"),
        ("/abs", "txt", "absolute"),
        ("a/../b", "txt", "'..'"),
        ("__meta__/x", "txt", "metadata"),
        ("empty", None, "no entries"),
    ]:
        bad = f"bad{abs(hash((key, entry)))}"
        with shardcat.DatasetWriter(cat, bad, str(tmp_path / bad)) as w:
            w.add("fine", {"txt": "ok"})
            w.add(key, {} if entry is None else {entry: b"x"})
        dest = tmp_path / f"out-{bad}"
        with pytest.raises(ExportNameError, match=why) as raised:
            shardcat.export(cat, bad, str(dest), client=client)
        assert (raised.value.key, raised.value.entry) == (key, entry or "")
        assert not dest.exists() or not any(dest.iterdir())


def test_s3_destination_and_an_in_process_memory_one(tmp_path, postgres_url, s3, client):
    _write_versions(tmp_path / "src", postgres_url, client)
    cat = Catalog(postgres_url)
    want = _raw(cat, "src", None)
    there = f"{s3['url']}/exports/src"
    summary = shardcat.export(
        cat,
        "src",
        there,
        shard_size="30KB",
        destination_options=s3["storage_options"],
        client=client,
        register="on_s3",
    )
    fs, _ = resolve(there, s3["storage_options"])
    local = tmp_path / "downloaded"
    local.mkdir()
    for url in summary.tars:
        (local / url.rsplit("/", 1)[-1]).write_bytes(fs.cat_file(url))
    assert _webdataset(sorted(str(p) for p in local.glob("*.tar"))) == want
    with Catalog(postgres_url, storage_options=s3["storage_options"]) as on_s3:
        got = on_s3.get_many("on_s3", [k for k, _ in want])
        assert [(r.key, {n: e.data for n, e in r.items()}) for r in got.records] == want
        # Back from S3: the tars registered there, read from their catalog rows, to local tars.
        back = shardcat.export(
            on_s3, "on_s3", str(tmp_path / "back"), destination_options={}, client=client
        )
    assert len(back.tars) == 1 and _webdataset(back.tars) == want
    # memory:// lives in this process: the export runs on threads here (no client given).
    mem = shardcat.export(cat, "src", "memory://exports/src", shard_size="30KB")
    import fsspec

    memfs = fsspec.filesystem("memory")
    for url in mem.tars:
        (tmp_path / "mem").mkdir(exist_ok=True)
        (tmp_path / "mem" / url.rsplit("/", 1)[-1]).write_bytes(memfs.cat_file(url))
    assert _webdataset(sorted(str(p) for p in (tmp_path / "mem").glob("*.tar"))) == want
    memfs.rm("/exports", recursive=True)


def test_a_failed_or_interrupted_export_leaves_no_tar_under_a_final_name(
    tmp_path, sqlite_url, client
):
    _write_versions(tmp_path / "src", sqlite_url, client)
    cat = Catalog(sqlite_url)
    # Damage one payload byte of the last uncompressed shard: its tar's task fails its CRC
    # check, after (one worker runs the tasks in order) earlier tars were published.
    shard, hidden = internal.visible_shards(cat, "src")[1][-2]
    row = next(r for r in internal.record_rows(cat, shard.id) if r.offset not in hidden)
    victim = Path(shard.url)
    good = victim.read_bytes()
    data = bytearray(good)
    data[row.offset + row.spans[0][0]] ^= 0xFF
    victim.write_bytes(bytes(data))
    dest = tmp_path / "failed"
    done: list[int] = []
    with pytest.raises(ChecksumError):
        shardcat.export(
            cat,
            "src",
            str(dest),
            shard_size="20KB",
            client=DaskCluster(workers=1),
            retries=0,
            progress=lambda n, total: done.append(n),
        )
    assert max(done) >= 2  # tars were published before the failure...
    assert sorted(p.name for p in dest.iterdir()) == []  # ...and removed; no temp file left
    Path(victim).write_bytes(good)

    calls: list[int] = []

    def stop_after_two(done: int, total: int) -> None:
        calls.append(done)
        if done == 2:
            raise KeyboardInterrupt

    dest = tmp_path / "interrupted"
    with pytest.raises(JobInterrupted, match="were removed"):
        shardcat.export(
            cat,
            "src",
            str(dest),
            shard_size="20KB",
            client=DaskCluster(workers=1),
            progress=stop_after_two,
        )
    assert 2 in calls
    assert sorted(p.name for p in dest.iterdir()) == []


@pytest.mark.slow
def test_an_export_whose_workers_are_all_lost_stops_typed_and_removes_its_tars(tmp_path):
    from distributed import Client

    catalog = f"sqlite:///{tmp_path / 'c.db'}"
    with shardcat.DatasetWriter(catalog, "src", str(tmp_path / "src")) as w:
        for i in range(200):
            w.add(f"k/{i:04d}", {"bin": bytes([i % 256]) * 4000})
    dest = tmp_path / "out"
    with (
        hand_cluster(tmp_path / "cluster", workers=1) as cluster,
        Client(cluster.address) as client,
    ):
        done: list[int] = []

        def kill_after_the_first_tar(n: int, total: int) -> None:
            done.append(n)
            if n == 1:
                cluster.kill_workers()

        with (
            shardcat.config.set(dask_no_workers_timeout=1),
            pytest.raises(WorkersLostError) as raised,
        ):
            shardcat.export(
                catalog,
                "src",
                str(dest),
                shard_size="20KB",
                client=client,
                progress=kill_after_the_first_tar,
            )
    assert max(done) >= 1  # tars were published before the workers went (and then removed)
    text = raised.value.render("cli")
    assert "export of dataset 'src' stopped: it was aborted, and the files it had" in text
    assert text.endswith("run the command again")
    assert sorted(p.name for p in dest.iterdir()) == []


def test_destination_with_tars_is_refused_unless_overwrite(tmp_path, sqlite_url, client):
    _write_versions(tmp_path / "src", sqlite_url, client)
    dest = tmp_path / "out"
    first = shardcat.export(sqlite_url, "src", str(dest), shard_size="10KB", client=client)
    with pytest.raises(DestinationNotEmptyError, match="overwrite=True"):
        shardcat.export(sqlite_url, "src", str(dest), client=client)
    # Overwrite with bigger tars: the earlier export's tars and indexes are all replaced.
    (dest / "notes.txt").write_text("kept")
    again = shardcat.export(sqlite_url, "src", str(dest), overwrite=True, client=client)
    assert len(again.tars) == 1 < len(first.tars)
    assert sorted(p.name for p in dest.iterdir()) == [
        "notes.txt",
        "src-000000.tar",
        "src-000000.taridx",
    ]
    assert _webdataset(again.tars) == _raw(Catalog(sqlite_url), "src", None)
    # Tars of another name are never removed: overwrite refuses them.
    (dest / "other-000000.tar").write_bytes(b"")
    with pytest.raises(DestinationNotEmptyError, match="another name"):
        shardcat.export(sqlite_url, "src", str(dest), overwrite=True, client=client)
    # A tar dataset exported with overwrite onto the tars it reads is refused.
    (dest / "other-000000.tar").unlink()
    shardcat.index_tar(again.tars, catalog=sqlite_url, dataset="tars", client=client)
    with pytest.raises(DestinationNotEmptyError, match="this export reads"):
        shardcat.export(sqlite_url, "tars", str(dest), name="src", overwrite=True, client=client)
    assert _webdataset(again.tars) == _raw(Catalog(sqlite_url), "src", None)
    # An empty version exports nothing (and registers nothing).
    shardcat.delete_keys(
        sqlite_url, "tars", [k for k, _ in _raw(Catalog(sqlite_url), "tars", None)]
    )
    empty = shardcat.export(
        sqlite_url, "tars", str(tmp_path / "empty"), register="none", client=client
    )
    assert (empty.tars, empty.samples, empty.registered) == ([], 0, None)
    # A registration name that exists is refused before anything is written.
    with pytest.raises(DatasetExistsError):
        shardcat.export(sqlite_url, "src", str(tmp_path / "reg"), register="src", client=client)
    assert not (tmp_path / "reg").exists()


def test_a_retried_task_keeps_its_own_published_tar_and_refuses_another(tmp_path, sqlite_url):
    with Catalog(sqlite_url) as cat:
        with shardcat.DatasetWriter(cat, "d", str(tmp_path / "src")) as w:
            for i in range(5):
                w.add(f"k{i}", {"txt": f"v{i}" * 100})
        (shard,) = cat.shards("d")
        rows = tuple(internal.record_rows(cat, shard.id))
    piece = SourcePiece(shard.url, "native", (shard.file_id, shard.footer_crc), rows, True)
    size = 1024 + sum(512 + 512 * -(-len(f"v{i}" * 100) // 512) for i in range(5))
    url = str(tmp_path / "t-000000.tar")
    plan = TarPlan(url, url.replace(".tar", ".taridx"), (piece,), 5, size)
    first = write_tar(plan, {}, {})
    again = write_tar(plan, {}, {})  # an earlier attempt published it: the same bytes
    assert (first.published, again.published, first.bytes) == (True, False, size)
    assert Taridx.from_bytes(Path(plan.index_url).read_bytes()).n_stems == 5
    Path(url).write_bytes(Path(url).read_bytes()[:-1] + b"\1")
    with pytest.raises(DestinationNotEmptyError, match="other bytes"):
        write_tar(plan, {}, {})
