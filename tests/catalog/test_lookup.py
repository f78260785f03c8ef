"""Lookups: one SQL query plus one ranged read, counted; batches; exact keys.

Every test runs on a SQLite file, on in-memory SQLite (the StaticPool branch:
one connection shared by the lookups and the units of work) and on PostgreSQL.
"""

from __future__ import annotations

import os
import random

import pytest

from shardcat.errors import DatasetNotFoundError, KeyNotFoundError, ShardNotFoundError
from shardcat.reading import Catalog

from .helpers import (
    QueryCounter,
    descriptors_of,
    make_dataset,
    needs_proc,
    sample,
    shard_keys,
    write_shard,
)


@pytest.fixture(params=["sqlite", "sqlite-memory", "postgresql"])
def catalog_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    if request.param == "sqlite-memory":
        return "sqlite://"
    return str(request.getfixturevalue("postgres_url"))


# A catalog another process or a copy must open again cannot be in one process's memory.
shared_catalogs = pytest.mark.parametrize("catalog_url", ["sqlite", "postgresql"], indirect=True)


def _entry_bytes(record, name):
    return bytes(record[name].data)


def test_get_returns_the_sample_with_one_query_and_one_read(cat, store, reads):
    infos = make_dataset(cat, store["root"], 2, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    key = shard_keys(1)[7]
    cat.get("train", shard_keys(0)[0])  # warm: opens the connection, prepares statements
    reads.clear()
    with QueryCounter(cat) as q:
        record = cat.get("train", key)
    assert q.count == 1, q.statements
    assert reads.count == 1, reads.reads
    assert reads.other_requests == []  # S3: no HEAD or listing either
    loc = cat.locate("train", key)
    assert reads.reads[0][1:] == (loc.offset, loc.end)
    assert record.key == key
    assert record.decode() == {"__key__": key, **sample(key)}
    assert loc.url == infos[1].path
    # The shard open: one statement, the point lookup's.
    with QueryCounter(cat) as q:
        assert cat.get("train", shard_keys(1)[8]).key == shard_keys(1)[8]
    assert q.count == 1, q.statements


def test_get_one_entry_reads_only_that_entry(cat, store, reads):
    make_dataset(cat, store["root"], 1, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    key = shard_keys(0)[3]
    cat.get("train", shard_keys(0)[0], entries=["txt"])  # warm
    reads.clear()
    with QueryCounter(cat) as q:
        record = cat.get("train", key, entries=["json"])
    assert q.count == 1, q.statements
    assert list(record.entries) == ["json"]
    assert record["json"].decode() == {"key": key}
    payload = len(record["json"].data)
    assert reads.count == 1
    assert reads.nbytes == payload  # not one byte of the other entries or the record head
    # Two entries of the same record: still one read, covering just them.
    reads.clear()
    record = cat.get("train", key, entries=["json", "txt"])
    assert reads.count == 1
    assert sorted(record.entries) == ["json", "txt"]
    assert record["txt"].decode() == f"text of {key}"


def test_get_many_in_input_order_with_duplicates_and_missing(cat, store, reads):
    make_dataset(cat, store["root"], 3, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    all_keys = [k for i in range(3) for k in shard_keys(i)]
    rng = random.Random(3)
    asked = rng.sample(all_keys, 60)
    asked[5:5] = ["nope/1"]
    asked.append(asked[0])  # the same key twice
    asked.append("nope/2")
    cat.get_many("train", all_keys[:2])  # warm
    reads.clear()
    with QueryCounter(cat) as q:
        result = cat.get_many("train", asked)
    assert q.count == 1, q.statements
    assert len(result) == len(asked)
    assert result.missing == ["nope/1", "nope/2"]
    assert not result.ok
    for key, record in zip(asked, result):
        if key.startswith("nope"):
            assert record is None
        else:
            assert record.key == key
            assert _entry_bytes(record, "jpg") == sample(key)["jpg"]
    assert reads.count <= 60
    # Adjacent records of a shard are coalesced: one read per shard.
    reads.clear()
    adjacent = [k for i in range(3) for k in shard_keys(i)[10:20]]
    rng.shuffle(adjacent)
    with QueryCounter(cat) as q:
        together = cat.get_many("train", adjacent)
    assert q.count == 1
    assert [r.key for r in together] == adjacent
    assert reads.count == 3, reads.reads
    with pytest.raises(KeyNotFoundError, match="nope/1"):
        result.raise_for_missing()
    assert set(result.found()) == set(asked) - {"nope/1", "nope/2"}


def test_get_many_of_local_shards_keeps_only_the_records_bytes(cat, local_root, reads):
    # Every other record: the gaps (one record each, < 8 KiB) are read through by
    # one pread per shard, but the records land in buffers that hold them alone.
    make_dataset(cat, local_root, 2)
    asked = [k for i in range(2) for k in shard_keys(i)[::2]]
    reads.clear()
    result = cat.get_many("train", asked)
    assert [r.key for r in result] == asked
    assert reads.count == 2, reads.reads
    assert all(r["jpg"].data == sample(r.key)["jpg"] for r in result)
    wanted = sum(cat.locate("train", k).length for k in asked)
    # The buffers the records keep: a lazy record's (compiled codec), else its entries'.
    held = {
        id(b): len(b)
        for r in result
        for b in (
            [r._buf.obj] if hasattr(r, "_buf") else [e._stored.obj for e in r.entries.values()]
        )
    }
    assert sum(held.values()) == wanted


def test_get_many_entries_subset(cat, store, reads):
    make_dataset(cat, store["root"], 2, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    asked = [shard_keys(0)[1], shard_keys(1)[2], shard_keys(0)[30]]
    with QueryCounter(cat) as q:
        result = cat.get_many("train", asked, entries=["txt"])
    assert q.count == 1
    assert [r.key for r in result] == asked
    assert all(list(r.entries) == ["txt"] for r in result)
    assert [r["txt"].decode() for r in result] == [f"text of {k}" for k in asked]
    reads.clear()
    cat.get_many("train", asked, entries=["txt"])
    assert reads.nbytes < sum(len(f"text of {k}") for k in asked) + 2 * 64 * 1024


def test_get_many_of_nothing_and_of_only_missing_keys(cat, local_root):
    make_dataset(cat, local_root, 1)
    assert len(cat.get_many("train", [])) == 0
    result = cat.get_many("train", ["a", "b", "a"])
    assert result.records == [None, None, None]
    assert result.missing == ["a", "b"]


def test_get_many_larger_than_sqlite_parameter_limits(cat, local_root):
    cat.create_dataset("train", local_root)
    keys = [f"k{i:06d}" for i in range(40_000)]
    cat.register_shard(
        "train", write_shard(f"{local_root}/big.shard", keys, make=lambda k: {"txt": k})
    )
    asked = keys[::-1]
    with QueryCounter(cat) as q:
        result = cat.get_many("train", asked)
    assert q.count == 1
    assert result.ok
    assert [r.key for r in result] == asked


def test_hash_collision_never_returns_the_wrong_sample(cat, local_root, monkeypatch):
    """Two keys with the same xxh64: the catalog compares the key text too."""
    import xxhash

    import shardcat.format.writer as writer
    import shardcat.reading.lookup as lookup
    from shardcat.format.checksums import key_hash, signed_key_hash

    colliding = {b"cat/a", b"cat/b"}
    fixed = key_hash(b"cat/a")
    monkeypatch.setattr(writer, "key_hash", lambda kb: fixed if kb in colliding else key_hash(kb))
    monkeypatch.setattr(
        lookup,
        "signed_key_hash",
        lambda kb: signed_key_hash(b"cat/a") if kb in colliding else signed_key_hash(kb),
    )
    # The point lookup hashes inline (the same hash, big-endian bytes to a signed int).
    monkeypatch.setattr(
        lookup,
        "_xxh64_digest",
        lambda kb: xxhash.xxh64_digest(b"cat/a" if kb in colliding else kb),
    )
    cat.create_dataset("train", local_root)
    info = write_shard(f"{local_root}/a.shard", ["cat/a", "cat/b", "cat/c"])
    assert info.records["key_hash"][0] == info.records["key_hash"][1]
    cat.register_shard("train", info)
    assert cat.get("train", "cat/b").decode()["json"] == {"key": "cat/b"}
    assert cat.get("train", "cat/a").decode()["json"] == {"key": "cat/a"}
    assert cat.get("train", "cat/b", entries=["txt"])["txt"].decode() == "text of cat/b"
    result = cat.get_many("train", ["cat/b", "cat/a"])
    assert [r.key for r in result] == ["cat/b", "cat/a"]
    # A third key with the same hash that is not in the dataset is missing, not someone else's.
    colliding.add(b"cat/z")
    with pytest.raises(KeyNotFoundError):
        cat.get("train", "cat/z")
    assert cat.get_many("train", ["cat/z"]).missing == ["cat/z"]


def test_missing_key_and_unknown_dataset(cat, local_root):
    make_dataset(cat, local_root, 1)
    cat.create_dataset("valid", local_root)
    with pytest.raises(KeyNotFoundError, match=r"'img/none'.*'train'"):
        cat.get("train", "img/none")
    with pytest.raises(KeyError):  # KeyNotFoundError is a KeyError
        cat.locate("train", "img/none")
    with pytest.raises(DatasetNotFoundError, match=r"'tran'.*known datasets: 'train', 'valid'"):
        cat.get("tran", "img/000/00001")
    with pytest.raises(DatasetNotFoundError, match="'tran'"):
        cat.get_many("tran", ["img/000/00001"])
    with pytest.raises(DatasetNotFoundError):
        cat.shards("tran")


def test_lookups_from_several_threads(cat, local_root):
    from concurrent.futures import ThreadPoolExecutor

    make_dataset(cat, local_root, 2)
    keys = shard_keys(0) + shard_keys(1)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: cat.get("train", k).key, keys))
    assert got == keys


def test_in_memory_sqlite_catalog(local_root):
    with Catalog("sqlite://") as cat:
        make_dataset(cat, local_root, 1)
        assert cat.get("train", shard_keys(0)[5]).key == shard_keys(0)[5]
        assert cat.get_many("train", shard_keys(0)).ok


@shared_catalogs
def test_catalog_pickles_as_its_url(cat, local_root):
    import pickle

    make_dataset(cat, local_root, 1)
    clone = pickle.loads(pickle.dumps(cat))
    try:
        assert clone.get("train", shard_keys(0)[1]).key == shard_keys(0)[1]
    finally:
        clone.close()


@shared_catalogs
def test_a_forked_child_opens_its_own_connections(cat, local_root):
    import multiprocessing

    make_dataset(cat, local_root, 1)
    key = shard_keys(0)[3]
    assert cat.get("train", key).key == key  # the parent's lookup connection exists now
    parent_lookup = cat._lookup()

    def child(queue):
        try:
            record = cat.get("train", key)
            fresh = cat._lookup() is not parent_lookup
            queue.put((record.key, cat.info("train").name, fresh))
        except Exception as e:  # report, do not hang the parent
            queue.put(repr(e))

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(timeout=60)
    assert got == (key, "train", True)
    assert cat._lookup() is parent_lookup
    assert cat.get("train", key).key == key  # the parent's connections still work


# --- the shards a lookup keeps open ------------------------------------------


@needs_proc
def test_local_shards_are_opened_once_and_closed_with_the_catalog(
    catalog_url, local_root, monkeypatch
):
    import shardcat.storage.sources as sources

    opened: list[str] = []

    class CountingFileSource(sources.FileSource):
        def __init__(self, file, name=None):
            opened.append(str(file))
            super().__init__(file, name)

    monkeypatch.setattr(sources, "FileSource", CountingFileSource)
    cat = Catalog(catalog_url)
    infos = make_dataset(cat, local_root, 2)
    keys = shard_keys(0)[:5] + shard_keys(1)[:5]
    for _ in range(3):  # get and get_many read through the same open files: none reopened
        assert cat.get("train", keys[0]).key == keys[0]
        assert cat.get("train", keys[9], entries=["txt"]).key == keys[9]
        assert cat.get_many("train", keys).ok
        assert cat.get_many("train", keys, entries=["json"]).ok
    assert sorted(opened) == sorted(info.path for info in infos)
    assert [len(descriptors_of(info.path)) for info in infos] == [1, 1]
    cat.close()
    assert [descriptors_of(info.path) for info in infos] == [[], []]


@needs_proc
@shared_catalogs
def test_a_forked_child_closes_the_shards_it_inherited(cat, local_root):
    import multiprocessing

    (info,) = make_dataset(cat, local_root, 1)
    key = shard_keys(0)[3]
    assert cat.get("train", key).key == key  # the parent's lookup has the shard open
    assert len(descriptors_of(info.path)) == 1

    def child(queue):
        try:
            inherited = descriptors_of(info.path)
            record = cat.get("train", key)
            queue.put((inherited, record.key, len(descriptors_of(info.path))))
        except Exception as e:  # report, do not hang the parent
            queue.put(repr(e))

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    got = queue.get(timeout=60)
    proc.join(timeout=60)
    assert got == ([], key, 1)
    assert len(descriptors_of(info.path)) == 1  # the parent's stays open, and serves
    assert cat.get("train", key).key == key


def test_a_failed_batch_read_names_the_shard_as_data(cat, store):
    infos = make_dataset(cat, store["root"], 2, storage_options=store["storage_options"])
    cat.storage_options = store["storage_options"] or {}
    keys = [shard_keys(0)[1], shard_keys(1)[2]]
    assert cat.get_many("train", keys).ok
    if store["kind"] == "local":
        os.remove(infos[1].path)
    else:
        import fsspec

        fs, path = fsspec.core.url_to_fs(infos[1].path, **(store["storage_options"] or {}))
        fs.rm(path)
    with pytest.raises(ShardNotFoundError, match="shardcat verify") as err:
        cat.get_many("train", keys)
    assert err.value.path == infos[1].path
    assert cat.get_many("train", keys[:1]).ok  # the other shard still serves


def test_point_lookups_beside_a_commit_and_a_delete_see_only_committed_shards(cat, local_root):
    """A lookup thread runs while a job stages, commits and the dataset is deleted.

    The point statement (visibility in the one statement, issue 10) never
    returns a staged shard's record, always finds a committed one, and finds
    nothing once the delete has returned.
    """
    import threading
    import time

    cat.create_dataset("train", local_root)
    job = cat.begin_job("train")
    keys = shard_keys(0, 20) + shard_keys(1, 20)
    for i in range(2):
        url = f"{local_root}/train-{i:06d}.shard"
        cat.register_shard("train", write_shard(url, shard_keys(i, 20)), job=job)
    seen: list[tuple[float, float, str, str]] = []
    stop = threading.Event()

    def look() -> None:
        while not stop.is_set():
            for key in keys:
                start = time.monotonic()
                try:
                    outcome = "ok" if cat.get("train", key).key == key else "wrong"
                except (KeyNotFoundError, DatasetNotFoundError, ShardNotFoundError) as e:
                    outcome = type(e).__name__
                seen.append((start, time.monotonic(), key, outcome))

    def settle() -> None:
        """Until lookups started after now have finished (not a fixed sleep: a loaded machine)."""
        since = time.monotonic()
        deadline = since + 60
        while time.monotonic() < deadline and sum(s > since for s, *_ in seen[-5:]) < 3:
            time.sleep(0.01)

    reader = threading.Thread(target=look)
    reader.start()
    try:
        settle()
        commit_start = time.monotonic()
        cat.commit_job(job)
        commit_end = time.monotonic()
        settle()
        delete_start = time.monotonic()
        cat.delete_dataset("train")
        delete_end = time.monotonic()
        settle()
    finally:
        stop.set()
        reader.join()
    staged = [o for s, e, _, o in seen if e < commit_start]
    committed = [o for s, e, _, o in seen if s > commit_end and e < delete_start]
    deleted = [o for s, e, _, o in seen if s > delete_end]
    assert staged and set(staged) == {"KeyNotFoundError"}
    assert committed and set(committed) == {"ok"}
    assert deleted and set(deleted) == {"DatasetNotFoundError"}
    assert "wrong" not in {o for *_, o in seen}
