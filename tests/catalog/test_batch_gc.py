"""What a batch lookup's records cost the cyclic garbage collector, and that they still behave.

``Catalog.get_many`` of 10,000 local keys with the compiled codec must leave
the collector O(1) new objects to walk, even once every record's entries were
read (``.data``, ``len``, ``decode``): records, their entries and the lists
that cache them stay outside it (``format/ccodec/lazy.c``, "sealed entries"). The
pure-Python reference's records are ordinary tracked objects; the same count
shows the difference, so the property is measured, not assumed.
"""

from __future__ import annotations

import copy
import gc
import json
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

import shardcat
from shardcat.format import recordcodec
from shardcat.reading import Catalog

N = 10_000
SHARDS = 3


def key(i: int) -> str:
    return f"img/{i:05d}"


def payload(i: int) -> bytes:
    return bytes([i % 251]) * (600 + i % 400)


@pytest.fixture(scope="module")
def catalog_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A local SQLite catalog of N keys in SHARDS shards (written once for the module)."""
    root = tmp_path_factory.mktemp("batch-gc")
    url = f"sqlite:///{root}/catalog.db"
    with Catalog(url) as cat:
        cat.create_dataset("train", str(root))
        per = -(-N // SHARDS)
        for s in range(SHARDS):
            with shardcat.ShardWriter(f"{root}/train-{s:06d}.shard", shard_number=s) as w:
                for i in range(s * per, min(N, (s + 1) * per)):
                    w.add(key(i), {"bin": payload(i), "json": {"i": i}})
            cat.register_shard("train", w.close())
    return url


@pytest.fixture(params=["compiled", "python"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    previous = recordcodec.use(request.param)
    try:
        yield request.param
    finally:
        recordcodec.use(previous)


@pytest.fixture
def compiled() -> Iterator[None]:
    """The compiled record codec, whose read pool these tests are about (skipped where not built)."""
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    previous = recordcodec.use("compiled")
    try:
        yield
    finally:
        recordcodec.use(previous)


def tracked_growth(cat: Catalog, keys: list[str]) -> tuple[int, list[Any]]:
    """Objects the collector tracks after one batch whose entries were all read, and the records."""
    gc.collect()
    gc.disable()  # a collection meanwhile would untrack tuples and dicts and blur the count
    try:
        before = len(gc.get_objects())
        records = cat.get_many("train", keys).records
        for rec in records:
            assert rec is not None
            assert len(rec["bin"]) == len(rec["bin"].data) and rec["json"].data
        return len(gc.get_objects()) - before, records
    finally:
        gc.enable()


# The count runs in a process of its own: in a pytest worker, threads other tests left
# behind (a Dask cluster's event loop) make and drop objects while it counts.
_COUNT_ALONE = """
import importlib.util, json, sys
from shardcat.format import recordcodec
from shardcat.reading import Catalog
spec = importlib.util.spec_from_file_location("batch_gc", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
recordcodec.use(sys.argv[3])
keys = [module.key(i) for i in range(module.N)]
with Catalog(sys.argv[2]) as cat:
    module.tracked_growth(cat, keys[:100])  # warm: layouts, statements, open shards
    growth, records = module.tracked_growth(cat, keys)
    assert [r.key for r in records] == keys
print(json.dumps(growth))
"""


def test_a_batch_adds_no_tracked_object_per_record(catalog_url: str, codec: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_ALONE, __file__, catalog_url, codec],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    growth = json.loads(done.stdout)
    if codec == "compiled":
        assert growth < 100, f"{growth} objects tracked for {N} records"
    else:  # the reference's Record, entries dict and entries: several per record
        assert growth >= 3 * N
    keys = [key(i) for i in range(N)]
    with Catalog(catalog_url) as cat:
        _, records = tracked_growth(cat, keys)
        assert [r.key for r in records] == keys
        # Plain values out: decode() builds no entries dict, nor puts records under the GC.
        decoded = records[7].decode()
        assert decoded == {"__key__": key(7), "bin": payload(7), "json": {"i": 7}}
        if codec == "compiled":
            assert not gc.is_tracked(records[7])


def test_both_codecs_give_equal_batches(catalog_url: str) -> None:
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    keys = [key(i) for i in range(0, N, 7)]
    results = {}
    for name in ("compiled", "python"):
        previous = recordcodec.use(name)
        try:
            with Catalog(catalog_url) as cat:
                results[name] = cat.get_many("train", keys).records
        finally:
            recordcodec.use(previous)
    ours, ref = results["compiled"], results["python"]
    assert ours == ref and ref == ours
    for a, b in zip(ours, ref):
        assert (a.key, a.offset, a.length, list(a)) == (b.key, b.offset, b.length, list(b))
        assert bytes(a["bin"].view) == b["bin"].data and a["json"].decode() == b["json"].decode()
        assert repr(a) == repr(b)


def test_records_outlive_the_catalog_and_copies_share_their_entries(
    catalog_url: str, codec: str
) -> None:
    keys = [key(i) for i in range(0, N, 13)]
    with Catalog(catalog_url) as cat:
        records = cat.get_many("train", keys).records
        entries = [rec["bin"] for rec in records[:50]]  # made before the close
    # The catalog and its open shards are gone; the read buffers are not.
    for rec, k in zip(records, keys):
        assert rec.key == k and rec["bin"].data == payload(int(k[4:]))
        assert bytes(rec["json"].view) == f'{{"i":{int(k[4:])}}}'.encode()
    del records
    gc.collect()
    assert [e.data for e in entries] == [payload(int(k[4:])) for k in keys[:50]]
    with Catalog(catalog_url) as cat:
        rec = cat.get_many("train", [key(5)]).records[0]
    assert rec is not None
    twin = copy.copy(rec)
    assert twin == rec and twin["bin"].data == payload(5)
    twin.key = "other"  # a copy is its own record
    assert rec.key == key(5)


def test_point_lookups_make_ordinary_entries(catalog_url: str, codec: str) -> None:
    # One record at a time, mostly dropped before the next: no source to pay for.
    with Catalog(catalog_url) as cat:
        rec = cat.get("train", key(3))
    entry = rec["bin"]
    assert entry.data == payload(3)
    if codec == "compiled":
        assert gc.is_tracked(entry) and rec._source is False  # type: ignore[attr-defined]


def test_the_memory_of_dropped_records_is_freed(catalog_url: str, codec: str) -> None:
    keys = [key(i) for i in range(N)]
    with Catalog(catalog_url) as cat:
        gc.collect()
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            held = left = 0
            for _ in range(3):
                records = cat.get_many("train", keys).records
                views = [rec["bin"].view for rec in records]  # type: ignore[index]
                held = max(held, tracemalloc.get_traced_memory()[0] - base)
                del records, views
                gc.collect()
                left = tracemalloc.get_traced_memory()[0] - base
            pool = sum(map(len, cat._lookup()._read_pool))
        finally:
            tracemalloc.stop()
    payloads = sum(len(payload(i)) for i in range(N))
    assert held > payloads  # the read buffers, at least
    # What stays: caches that live as long as the catalog and, with the
    # compiled codec, the read buffers it lends the next batch, no more than
    # one batch's and at most 64 MiB; repeated batches do not add to them.
    if codec == "compiled":
        assert 0 < pool <= held
    else:
        assert pool == 0
    assert left - pool < payloads // 50, f"{left - pool:,} bytes left of {held:,}"


def _bytes_of(records: list[Any]) -> set[int]:
    """The ids of the buffers a batch's records lie in."""
    return {id(rec._buf.obj) for rec in records}


def _pooled(records: list[Any]) -> set[int]:
    """The ids of the pool's buffers (1 MiB each) a batch's records lie in; not its small last one."""
    return {id(rec._buf.obj) for rec in records if len(rec._buf.obj) == 1 << 20}


def test_a_batch_reads_into_the_buffers_of_dropped_batches_and_never_into_live_ones(
    catalog_url: str, compiled: None
) -> None:
    """The compiled read's pool lends a buffer again only once nothing refers to it."""
    keys = [key(i) for i in range(N)]
    with Catalog(catalog_url) as cat:
        first = cat.get_many("train", keys).records
        pool = cat._lookup()._read_pool
        assert pool and _pooled(first) == {id(b) for b in pool}
        # Records alive: the next batch gets other buffers, and theirs stay as read.
        second = cat.get_many("train", keys).records
        assert not _bytes_of(first) & _bytes_of(second)
        assert all(rec["bin"].data == payload(i) for i, rec in enumerate(first))
        # Dropped: their buffers are read into again (no new memory)...
        was = _pooled(first)
        del first
        third = cat.get_many("train", keys).records
        assert _pooled(third) == was
        # ...except one that a single view, or the bytes object itself, still holds.
        kept_view = second[0]["bin"].view
        kept_obj = next(r._buf.obj for r in reversed(second) if len(r._buf.obj) == 1 << 20)
        kept_hash = hash(kept_obj)
        held = {id(kept_view.obj), id(kept_obj)}
        del second
        for _ in range(3):
            again = cat.get_many("train", list(reversed(keys))).records
            assert not _bytes_of(again) & held
            assert again[0].key == keys[-1] and again[0]["bin"].data == payload(N - 1)
            del again
        assert bytes(kept_view) == payload(0)
        assert hash(kept_obj) == kept_hash
        assert len(pool) <= 64
    assert pool == []  # closing the catalog lets the pool go


def test_a_small_batch_keeps_buffers_of_its_own_size(catalog_url: str) -> None:
    """A batch (or its last buffer) under half of a pool buffer is read into new, exact buffers."""
    with Catalog(catalog_url) as cat:
        cat.get_many("train", [key(i) for i in range(N)])  # fills the pool (compiled codec)
        asked = [key(i) for i in range(0, N, 997)]
        records = cat.get_many("train", asked).records
        held = {id(r._buf.obj): len(r._buf.obj) for r in records}
        assert sum(held.values()) == sum(cat.locate("train", k).length for k in asked)


def test_a_buffer_lent_again_has_no_stale_hash(catalog_url: str, compiled: None) -> None:
    with Catalog(catalog_url) as cat:
        first = cat.get_many("train", [key(i) for i in range(N // 2)]).records
        pool = cat._lookup()._read_pool
        # The first buffer the next batch takes, hashed (the hash is cached in it);
        # no reference is kept, which would keep it from being lent again.
        hashed, old = id(pool[0]), hash(pool[0])
        del first
        # Other records, so other bytes in the same buffer.
        second = cat.get_many("train", [key(i) for i in range(N // 2, N)]).records
        again = next(r._buf.obj for r in second if id(r._buf.obj) == hashed)
        assert hash(again) == hash(bytes(bytearray(again))) != old  # bytes(again) is again


def test_a_threads_read_buffers_go_with_the_thread(catalog_url: str, compiled: None) -> None:
    """A thread's lookup stays listed until the catalog closes, but not its pool of read buffers."""
    keys = [key(i) for i in range(N)]
    with Catalog(catalog_url) as cat:
        cat.get_many("train", keys)
        mine = cat._lookup()._read_pool
        pools: list[tuple[list[bytes], int]] = []

        def work() -> None:
            cat.get_many("train", keys)
            pool = cat._lookup()._read_pool
            pools.append((pool, len(pool)))

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        [(theirs, filled)] = pools
        assert theirs is not mine and filled > 0  # the thread's batch filled its own pool
        gc.collect()
        assert theirs == []  # gone with the thread
        assert mine  # this thread's is kept for its next batch
