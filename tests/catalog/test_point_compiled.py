"""The compiled point lookup (reading/_cpoint.c, reading/point.py) on real SQLite files.

It must return what the Python path returns, never a record the statement
does not see (uncommitted, deleted, removed: also while another process
commits and deletes), and hand every unusual case back to the Python path,
whose errors are then the ones raised.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import shardcat
from shardcat.catalog import internal
from shardcat.errors import (
    CodecUnavailableError,
    DatasetNotFoundError,
    FormatError,
    InvalidKeyError,
    KeyNotFoundError,
    ShardNotFoundError,
)
from shardcat.format import recordcodec
from shardcat.reading import Catalog, point

from .helpers import descriptors_of, make_dataset, needs_proc, shard_keys, write_shard
from .test_sqlite_file import mapped_at_most

pytestmark = pytest.mark.skipif(
    not point.available() or recordcodec.active() != "compiled",
    reason="the compiled point lookup is not available here",
)

_TIMEOUT = 60.0


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture
def cat(sqlite_url: str) -> Iterator[Catalog]:
    c = Catalog(sqlite_url)
    try:
        yield c
    finally:
        c.close()


def _fast(cat: Catalog, dataset: str, key: str) -> Any:
    """The compiled path alone: a record, or None (not handled)."""
    lookup = cat._lookup()
    assert point.is_compiled(lookup._point_lookup), "the compiled point lookup is off here"
    return lookup.fast_get(dataset, key, recordcodec.decode_spanned)


def _warm(cat: Catalog, dataset: str, key: str) -> None:
    """Load the lookup's shard cache and open the shard (the compiled path needs both)."""
    cat._lookup().get(dataset, key)


def _same(a: Any, b: Any) -> bool:
    return (
        a.key == b.key
        and (a.offset, a.length) == (b.offset, b.length)
        and {n: (e.content_type, bytes(e.data)) for n, e in a.entries.items()}
        == {n: (e.content_type, bytes(e.data)) for n, e in b.entries.items()}
    )


@pytest.fixture
def python_path() -> Iterator[None]:
    previous = point.use("python")
    try:
        yield
    finally:
        point.use(previous)


def test_both_paths_return_identical_records_for_every_key(sqlite_url, local_root):
    fast_cat = Catalog(sqlite_url)
    make_dataset(fast_cat, local_root, 3)
    previous = point.use("python")
    try:
        slow_cat = Catalog(sqlite_url)
        slow_cat._lookup()  # opened now: lookups follow the switch when they open
    finally:
        point.use(previous)
    try:
        assert not point.is_compiled(slow_cat._lookup()._point_lookup)
        keys = [k for i in range(3) for k in shard_keys(i)]
        for i in range(3):
            _warm(fast_cat, "train", shard_keys(i)[0])
        handled = 0
        for key in keys:
            fast = _fast(fast_cat, "train", key)
            assert fast is not None, key  # every shard cached and open: the C path answers
            handled += 1
            assert _same(fast, slow_cat.get("train", key)), key
            assert _same(fast_cat.get("train", key), fast), key
            assert fast.decode() == slow_cat.get("train", key).decode()
        assert handled == len(keys)
    finally:
        fast_cat.close()
        slow_cat.close()


def _maps_of(path: str) -> int:
    """How many memory maps of ``path`` this process holds (SQLite maps a file once per connection)."""
    with open("/proc/self/maps") as f:
        return sum(line.rstrip("\n").endswith(" " + path) for line in f)


@needs_proc
@pytest.mark.parametrize("size", ["2GiB", "0"])
def test_its_connection_maps_the_catalog_as_the_lookups_own_does(sqlite_url, local_root, size):
    """``sqlite_mmap_size`` reaches the compiled lookup's connection: the catalog file is
    mapped by it and by the lookup's Python connection, or (0) by neither."""
    path = sqlite_url.removeprefix("sqlite:///")
    with shardcat.config.set(sqlite_mmap_size=size):
        with Catalog(sqlite_url) as cat:
            make_dataset(cat, local_root, 1)
        assert _maps_of(path) == 0
        with Catalog(sqlite_url) as cat:
            key = shard_keys(0)[0]
            _warm(cat, "train", key)
            assert _fast(cat, "train", key) is not None
            (own,) = cat._lookup().raw.conn.execute("PRAGMA mmap_size").fetchone()
            assert own == (0 if size == "0" else mapped_at_most(2 << 30))  # SQLite caps it
            assert _maps_of(path) == (0 if size == "0" else 2)
        assert _maps_of(path) == 0  # closed with the catalog


def test_missing_keys_datasets_and_invalid_keys_go_to_the_python_path(cat, local_root):
    make_dataset(cat, local_root, 1)
    _warm(cat, "train", shard_keys(0)[0])
    assert _fast(cat, "train", "nope") is None
    assert _fast(cat, "other", shard_keys(0)[0]) is None
    assert _fast(cat, "train", "bad\udcff") is None  # not UTF-8: the Python path names it
    with pytest.raises(KeyNotFoundError, match="no record with key 'nope'"):
        cat.get("train", "nope")
    with pytest.raises(DatasetNotFoundError, match="'other'"):
        cat.get("other", shard_keys(0)[0])
    with pytest.raises(InvalidKeyError, match="not valid UTF-8"):
        cat.get("train", "bad\udcff")
    assert cat._lookup().fast_get("train", 7, recordcodec.decode_spanned) is None
    with pytest.raises(InvalidKeyError):
        cat.get("train", 7)  # type: ignore[arg-type]


def test_an_uncommitted_shard_a_deleted_shard_and_a_removed_record_are_never_returned(
    cat, local_root
):
    make_dataset(cat, local_root, 1)
    live = shard_keys(0)
    _warm(cat, "train", live[0])
    # A staged shard: its rows exist, its keys must stay invisible.
    job = cat.begin_job("train")
    staged = write_shard(f"{local_root}/staged.shard", ["staged/1", "staged/2"])
    cat.register_shard("train", staged, job=job)
    _warm(cat, "train", live[1])  # reload the shard cache: the staged shard is in it now
    cat._lookup()._sources.source(staged.path)  # and its file open: only the statement hides it
    assert _fast(cat, "train", "staged/1") is None
    with pytest.raises(KeyNotFoundError):
        cat.get("train", "staged/1")
    # A removed record (delete_keys makes a new version without it).
    assert _fast(cat, "train", live[2]) is not None
    cat.delete_keys("train", [live[2]])
    assert _fast(cat, "train", live[2]) is None
    with pytest.raises(KeyNotFoundError):
        cat.get("train", live[2])
    # A replaced record: the new one, never the old.
    job2 = cat.begin_job("train")
    new = write_shard(f"{local_root}/new.shard", [live[3]], make=lambda k: {"txt": "new"})
    cat.register_shard("train", new, job=job2)
    cat.commit_job(job2, on_duplicate="replace")
    got = cat.get("train", live[3])
    assert got["txt"].decode() == "new"
    assert _fast(cat, "train", live[3])["txt"].decode() == "new"
    # A deleted (removed) shard, and a deleted dataset.
    assert _fast(cat, "train", live[4]) is not None
    cat.remove_shard("train", cat.locate("train", live[4]).url)
    assert _fast(cat, "train", live[4]) is None
    with pytest.raises(KeyNotFoundError):
        cat.get("train", live[4])
    assert _fast(cat, "train", live[3]) is not None
    cat.delete_dataset("train")
    assert _fast(cat, "train", live[3]) is None
    with pytest.raises(DatasetNotFoundError):
        cat.get("train", live[3])


def _churn(url: str, root: str, rounds: int, published: Any, removed: Any, done: Any) -> None:
    """Another process: replace the hot keys round after round, stage shards it never
    commits, then remove a shard and delete a dataset; ``published`` is the last round
    committed, set only after its commit returned."""
    try:
        with Catalog(url) as cat:
            hot = [f"hot/{j}" for j in range(8)]
            deadline = time.monotonic() + _TIMEOUT
            for i in range(1, rounds + 1):
                if time.monotonic() > deadline:
                    break
                staged = cat.begin_job("train")
                info = write_shard(f"{root}/staged-{i}.shard", [f"staged/{i}", *hot])
                cat.register_shard("train", info, job=staged)  # never committed
                job = cat.begin_job("train")
                info = write_shard(
                    f"{root}/hot-{i}.shard", hot, make=lambda k, i=i: {"txt": str(i)}
                )
                cat.register_shard("train", info, job=job)
                cat.commit_job(job, on_duplicate="replace")
                published.value = i
            cat.remove_shard("train", f"{root}/gone.shard")
            cat.delete_dataset("other")
            removed.value = 1
    finally:
        done.value = 1


def start_churn(cat: Catalog, sqlite_url: str, local_root: str, rounds: int) -> Any:
    """Datasets ``train`` (hot keys, ``gone/1``) and ``other``, and a process running :func:`_churn`.

    Returns ``(hot keys, process, published, removed, done)``; the process is started.
    """
    hot = [f"hot/{j}" for j in range(8)]
    cat.create_dataset("train", local_root)
    cat.register_shard(
        "train",
        write_shard(f"{local_root}/hot-0.shard", hot, make=lambda k: {"txt": "0"}),
    )
    cat.register_shard("train", write_shard(f"{local_root}/gone.shard", ["gone/1"]))
    other_root = os.path.join(local_root, "other")
    cat.create_dataset("other", other_root)
    cat.register_shard("other", write_shard(f"{other_root}/o.shard", ["o/1"]))
    for dataset, key in (("train", "gone/1"), ("train", hot[0]), ("other", "o/1")):
        _warm(cat, dataset, key)
    ctx = mp.get_context("spawn")
    published, removed, done = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)
    proc = ctx.Process(
        target=_churn, args=(sqlite_url, local_root, rounds, published, removed, done)
    )
    proc.start()
    return hot, proc, published, removed, done


def test_concurrent_commits_and_deletes_from_another_process(sqlite_url, local_root):
    cat = Catalog(sqlite_url)
    try:
        hot, proc, published, removed, done = start_churn(cat, sqlite_url, local_root, 30)
        seen = dict.fromkeys(hot, 0)
        handled = checks = 0
        deadline = time.monotonic() + _TIMEOUT
        while time.monotonic() < deadline and checks < 200_000:
            finished = done.value
            floor, gone = published.value, removed.value
            for key in hot:
                record = _fast(cat, "train", key)
                if record is None:
                    record = cat.get("train", key)  # the Python path (and it caches the shard)
                else:
                    handled += 1
                g = int(record["txt"].decode())
                # Committed before the lookup began: never an older (removed) record.
                assert g >= floor and g >= seen[key], (key, g, floor, seen[key])
                seen[key] = g
                checks += 1
            assert _fast(cat, "train", f"staged/{floor}") is None
            if gone:
                assert _fast(cat, "train", "gone/1") is None
                assert _fast(cat, "other", "o/1") is None
            elif _fast(cat, "train", "gone/1") is not None:
                handled += 1
            if finished:
                break
        proc.join(_TIMEOUT)
        assert proc.exitcode == 0
        assert removed.value == 1 and published.value > 0
        assert handled > 50  # the compiled path really answered while the other process wrote
        with pytest.raises(KeyNotFoundError):
            cat.get("train", "gone/1")
        with pytest.raises(DatasetNotFoundError):
            cat.get("other", "o/1")
        assert cat.get("train", hot[0])["txt"].decode() == str(published.value)
    finally:
        cat.close()


def test_corrupted_bytes_give_the_python_paths_error(cat, local_root):
    (info,) = make_dataset(cat, local_root, 1)
    key = shard_keys(0)[5]
    _warm(cat, "train", shard_keys(0)[0])
    loc = cat.locate("train", key)
    with open(info.path, "r+b") as f:  # flip a byte of the record's head (its entries' table)
        f.seek(loc.offset + 40)
        b = f.read(1)
        f.seek(loc.offset + 40)
        f.write(bytes([b[0] ^ 0xFF]))
    assert _fast(cat, "train", key) is None
    with pytest.raises(FormatError) as fast_error:
        cat.get("train", key)
    previous = point.use("python")
    try:
        slow = Catalog(cat.url)
        slow._lookup()  # opened now: it follows the switch
    finally:
        point.use(previous)
    with slow:
        assert not point.is_compiled(slow._lookup()._point_lookup)
        with pytest.raises(FormatError) as slow_error:
            slow.get("train", key)
    assert type(fast_error.value) is type(slow_error.value)
    assert str(fast_error.value) == str(slow_error.value)
    assert cat.get("train", shard_keys(0)[6]).key == shard_keys(0)[6]  # the rest still reads


def test_a_moved_shard_is_found_at_its_new_place_and_a_lost_one_is_reported(cat, local_root):
    (info,) = make_dataset(cat, local_root, 1)
    key = shard_keys(0)[4]
    _warm(cat, "train", key)
    before = _fast(cat, "train", key)
    assert before is not None
    # A copy, the catalog moved to it, the old file deleted: the cached URL's
    # descriptor has no name left, the Python path finds the new URL.
    new_root = os.path.join(local_root, "moved")
    os.makedirs(new_root)
    new_path = os.path.join(new_root, os.path.basename(info.path))
    shutil.copyfile(info.path, new_path)
    (row,) = cat.shards("train")
    internal.move_shards(
        cat,
        "train",
        {row.url: (new_path, row.file_id)},
        expected_version=cat.info("train").version,
        root_url=new_root,
    )
    os.remove(info.path)
    assert _fast(cat, "train", key) is None
    assert _same(cat.get("train", key), before)
    _warm(cat, "train", key)
    assert _same(_fast(cat, "train", key), before)
    # The file gone with no new place: ShardNotFoundError, as on the Python path.
    os.remove(new_path)
    assert _fast(cat, "train", key) is None
    with pytest.raises(ShardNotFoundError):
        cat.get("train", key)


def test_a_forked_child_uses_its_own_connection(cat, local_root):
    make_dataset(cat, local_root, 1)
    key = shard_keys(0)[3]
    _warm(cat, "train", key)
    parent_fast = cat._lookup().fast_get
    assert parent_fast("train", key, recordcodec.decode_spanned) is not None

    def child() -> Any:
        # The parent's connection, inherited: refused (not handled).
        inherited = parent_fast("train", key, recordcodec.decode_spanned)
        record = cat.get("train", key)
        _warm(cat, "train", key)
        mine = _fast(cat, "train", key)
        return inherited, record.key, mine is not None and mine.key == key

    assert in_forked_child(child) == (None, key, True)
    assert _fast(cat, "train", key).key == key  # the parent's connection still serves


def in_forked_child(fn: Any) -> Any:
    """``fn()`` in a forked child: its result, or the repr of what it raised (never a hang)."""

    def run(queue: Any) -> None:
        try:
            queue.put(fn())
        except Exception as e:
            queue.put(repr(e))

    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=run, args=(queue,))
    proc.start()
    got = queue.get(timeout=_TIMEOUT)
    proc.join(timeout=_TIMEOUT)
    assert proc.exitcode == 0
    return got


def test_many_threads_at_once(cat, local_root):
    make_dataset(cat, local_root, 2)
    keys = shard_keys(0) + shard_keys(1)
    errors: list[str] = []
    handled = [0] * 8
    lookups: list[Any] = []

    def worker(n: int) -> None:
        try:
            lookups.append(cat._lookup())
            _warm(cat, "train", keys[0])
            _warm(cat, "train", keys[-1])
            for i in range(300):
                key = keys[(i * 7 + n) % len(keys)]
                fast = _fast(cat, "train", key)
                if fast is not None:
                    handled[n] += 1
                    assert fast.key == key
                assert cat.get("train", key).key == key
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(_TIMEOUT)
    assert errors == []
    assert all(h == 300 for h in handled), handled
    assert len({id(lk) for lk in lookups}) == 8  # one per thread
    # Each was closed when its thread ended (its connection, files and buffers).
    assert all(lk.closed for lk in lookups) and not cat._lookups


@needs_proc
def test_close_finalizes_and_nothing_leaks_per_lookup(sqlite_url, local_root):
    cat = Catalog(sqlite_url)
    make_dataset(cat, local_root, 1)
    keys = shard_keys(0)
    _warm(cat, "train", keys[0])
    lookup = cat._lookup()
    c_point = lookup._point_lookup
    assert point.is_compiled(c_point)
    fast = lookup.fast_get
    decode = recordcodec.decode_spanned
    dataset, key = "train", keys[9]
    for _ in range(200):
        fast(dataset, key, decode)
        fast(dataset, "nope", decode)
    db = sqlite_url.removeprefix("sqlite:///")
    # The lookup's Python connection and the compiled one's, beside any the engine's pool keeps.
    pooled = cat._engine.pool.checkedin() if cat._engine is not None else 0
    assert len(descriptors_of(db)) == 2 + pooled
    refs = (sys.getrefcount(dataset), sys.getrefcount(key), sys.getrefcount(decode))
    blocks = sys.getallocatedblocks()
    for _ in range(5000):
        fast(dataset, key, decode)
        fast(dataset, "nope", decode)
    assert (sys.getrefcount(dataset), sys.getrefcount(key), sys.getrefcount(decode)) == refs
    assert sys.getallocatedblocks() - blocks < 100  # no object left behind per call
    assert len(descriptors_of(db)) == 2 + pooled  # none opened per call
    cat.close()
    assert c_point.closed
    assert fast(dataset, key, decode) is None  # closed: not handled
    assert descriptors_of(db) == []
    c_point.close()  # idempotent


def test_the_switches_turn_it_off(sqlite_url, local_root, python_path):
    with Catalog(sqlite_url) as cat:
        make_dataset(cat, local_root, 1)
        assert not point.is_compiled(cat._lookup()._point_lookup)
        assert cat.get("train", shard_keys(0)[1]).key == shard_keys(0)[1]
    point.use("auto")
    previous = recordcodec.use("python")
    try:
        with Catalog(sqlite_url) as cat:
            # The reference codec: the Python twin.
            assert not point.is_compiled(cat._lookup()._point_lookup)
    finally:
        recordcodec.use(previous)
    with Catalog("sqlite://") as memory:  # in memory: no file another connection could open
        assert not point.is_compiled(memory._lookup()._point_lookup)
    with pytest.raises(ValueError, match=point.ENV_VAR):
        point.use("fast")
    point.use("compiled")
    assert point.active() == "compiled"
    with Catalog(sqlite_url) as cat:
        assert point.is_compiled(cat._lookup()._point_lookup)


def test_without_sqlites_functions_the_fast_path_is_off(sqlite_url, local_root):
    ccodec = importlib.import_module("shardcat.format._ccodec")
    with Catalog(sqlite_url) as before:
        make_dataset(before, local_root, 1)
        _warm(before, "train", shard_keys(0)[0])
        old_fast = before._lookup().fast_get
        assert point.is_compiled(before._lookup()._point_lookup)
        try:
            # A loaded library without SQLite in it (nor in what it links).
            assert point.load(ccodec.__file__) is False
            assert not point.available()
            with pytest.raises(CodecUnavailableError, match="point lookup"):
                point.use("compiled")
            with Catalog(sqlite_url) as after:
                assert not point.is_compiled(after._lookup()._point_lookup)
                assert after.get("train", shard_keys(0)[2]).key == shard_keys(0)[2]
            # A lookup opened before keeps the functions it was opened with.
            assert old_fast("train", shard_keys(0)[2], recordcodec.decode_spanned) is not None
            assert point.load("/nonexistent/libsqlite3.so") is False
        finally:
            assert point.load() is True
        point.use("auto")
        with Catalog(sqlite_url) as again:
            assert point.is_compiled(again._lookup()._point_lookup)
