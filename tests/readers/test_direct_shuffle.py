"""Packed batches through the shuffle buffer, read straight from shard bytes (readers/direct.py)."""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from shardcat.errors import ChecksumError, TruncatedError  # noqa: E402
from shardcat.format import recordcodec  # noqa: E402
from shardcat.readers import PackedBatch, direct, direct_batch, pack_samples, packed  # noqa: E402
from shardcat.reading import Catalog  # noqa: E402
from shardcat.torch import ShardIterableDataset, ShardLoader  # noqa: E402

from .conftest import make_bytes_dataset, make_mixed_dataset, make_tar_dataset, stop_and_resume  # noqa: E402
from .test_direct import _payload_and_head  # noqa: E402
from .test_packed import contents  # noqa: E402

pytestmark = pytest.mark.skipif(not packed._SHARED, reason="shared blocks need memfd_create")


@pytest.fixture(params=["mapped", "preadv"])
def reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Records gathered from the shards' mappings (the default) or with one ``preadv`` each."""
    if request.param == "preadv":
        monkeypatch.setattr(direct, "_map", lambda shard: None)
    return str(request.param)


@pytest.fixture
def gathered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the samples of shuffled batches made straight from shard bytes (in this process)."""
    made: list[int] = []

    class Counted(direct_batch.BlockFill):
        def __init__(self, first: Any, sizes: np.ndarray, span: int) -> None:
            made.append(len(sizes))
            super().__init__(first, sizes, span)

    monkeypatch.setattr(direct_batch, "BlockFill", Counted)
    return made


def dataset(url: str, *, direct_: bool = True, **kw: Any) -> ShardIterableDataset:
    kw.setdefault("batch_size", 5)
    kw.setdefault("shuffle_buffer", 10)
    kw.setdefault("seed", 7)
    ds = ShardIterableDataset(url, "train", collate=pack_samples, **kw)
    ds.stream = dataclasses.replace(ds.stream, direct=direct_)
    return ds


def copies(batches: Any) -> list[list[dict[str, Any]]]:
    out = []
    for b in batches:
        assert isinstance(b, PackedBatch)
        out.append(b.copy())
    return out


def keys(batches: list[Any]) -> list[str]:
    return [s["__key__"] for b in batches for s in b]


@pytest.mark.parametrize("buffer", [2, 10, 1000])
@pytest.mark.parametrize("batch_size", [1, 5, 64])
@pytest.mark.parametrize("entries", [None, ["bin"], ["json", "txt"]])
def test_same_batches_as_the_record_path(
    bytes_dataset, codec, reads, gathered, buffer, batch_size, entries
):
    """The direct path draws the same order from the same seed: the same batches, byte for byte."""
    url, expected = bytes_dataset
    kw = {"batch_size": batch_size, "entries": entries, "shuffle_buffer": buffer}
    for epoch in (0, 1):
        ref_ds, ds = dataset(url, direct_=False, **kw), dataset(url, **kw)
        ref_ds.set_epoch(epoch)
        ds.set_epoch(epoch)
        ref = copies(ref_ds)
        assert not gathered
        got = copies(ds)
        assert got == ref
        assert sum(gathered) == len(expected)
        gathered.clear()
    if entries is None:
        assert {s["__key__"]: s["bin"] for b in got for s in b} == expected


def test_orders_by_seed_and_epoch(bytes_dataset, gathered):
    url, expected = bytes_dataset
    ds = dataset(url, shuffle_buffer=1000)
    first = keys(list(ds))
    assert keys(list(dataset(url, shuffle_buffer=1000))) == first  # same seed, same order
    assert keys(list(dataset(url, shuffle_buffer=1000, seed=8))) != first
    ds.set_epoch(1)
    second = keys(list(ds))
    assert second != first and sorted(second) == sorted(first) == sorted(expected)
    # Not the file order, nor only shards shuffled: samples of several shards interleave.
    assert first != sorted(first)
    assert sum(gathered) == 4 * len(expected)


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_each_sample_once_per_epoch_over_two_ranks(bytes_dataset, gathered, workers):
    url, expected = bytes_dataset
    for epoch in (0, 1):
        seen: dict[str, bytes] = {}
        for rank in (0, 1):
            ds = dataset(url, batch_size=4, rank=rank, world_size=2)
            ds.set_epoch(epoch)
            got = contents(list(ShardLoader(ds, num_workers=workers)))
            assert len(got) == len(ds)
            assert not set(got) & set(seen)
            seen.update(got)
        assert seen == expected
    if workers == 0:
        assert sum(gathered) == 2 * len(expected)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_each_sample_once_through_worker_processes(bytes_dataset, method):
    url, expected = bytes_dataset
    ds = dataset(url, batch_size=4, shuffle_buffer=1000)
    loader = ShardLoader(ds, num_workers=2, multiprocessing_context=method)
    orders = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        batches = list(loader)
        orders.append(keys(batches))
        assert contents(batches) == expected
    assert orders[0] != orders[1]
    ref = dataset(url, batch_size=4, shuffle_buffer=1000, direct_=False)
    ref.set_epoch(1)
    assert orders[1] == keys(list(ShardLoader(ref, num_workers=2)))
    del loader
    gc.collect()


@pytest.mark.parametrize(
    ("workers", "method", "stop"), [(0, None, 3), (2, "fork", 1), (2, "fork", 5), (2, "spawn", 4)]
)
def test_resume_mid_epoch_is_exact(bytes_dataset, workers, method, stop):
    url, _ = bytes_dataset

    def make() -> ShardIterableDataset:
        ds = dataset(url, seed=3, batch_size=4, shuffle_buffer=20)
        ds.set_epoch(1)
        return ds

    loader: dict[str, Any] = {"num_workers": workers}
    if method:
        loader["multiprocessing_context"] = method
    full, resumed = stop_and_resume(make, stop, **loader)
    assert [[s["__key__"] for s in b] for b in resumed] == [[s["__key__"] for s in b] for b in full]
    assert [[bytes(s["bin"]) for s in b] for b in resumed] == [
        [bytes(s["bin"]) for s in b] for b in full
    ]


def test_shards_close_as_their_last_sample_goes(bytes_dataset, monkeypatch):
    url, _ = bytes_dataset
    opened: list[direct.DirectShard] = []
    closed: list[direct.DirectShard] = []
    real_open, real_close = direct.open_direct, direct.DirectShard.close

    def spy_open(*args: Any) -> direct.DirectShard:
        opened.append(real_open(*args))
        return opened[-1]

    def spy_close(shard: direct.DirectShard) -> None:
        closed.append(shard)
        real_close(shard)

    monkeypatch.setattr(direct, "open_direct", spy_open)
    monkeypatch.setattr(direct.DirectShard, "close", spy_close)
    ds = dataset(url, batch_size=3, shuffle_buffer=6)
    tasks = ds.stream.reader_tasks(0)
    order = ds.stream.order(0, (0, 0), sum(t.count for t in tasks))
    at_once = direct.shards_needed_at_once([t.count for t in tasks], order, 3)
    assert 1 < at_once < len(tasks)
    fds = len(os.listdir("/proc/self/fd"))
    most = 0
    for _ in ds:
        most = max(most, len(opened) - len(closed))
    assert most == at_once
    assert len(opened) == len(tasks)  # each shard opened once, and closed once
    assert sorted(map(id, closed)) == sorted(map(id, opened))
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= fds


def test_a_buffer_over_too_many_shards_takes_the_record_path(bytes_dataset, gathered, monkeypatch):
    url, expected = bytes_dataset
    ref = copies(dataset(url, direct_=False, shuffle_buffer=1000))
    monkeypatch.setattr(direct, "MAX_OPEN_SHARDS", 2)
    assert copies(dataset(url, shuffle_buffer=1000)) == ref
    assert not gathered
    # A small buffer over the same shards needs few at once: direct again.
    assert sum(len(b) for b in dataset(url, shuffle_buffer=2, batch_size=2)) == len(expected)
    assert sum(gathered) == len(expected)


def test_shards_needed_at_once() -> None:
    order = np.arange(10)
    assert direct.shards_needed_at_once([5, 5], order, 5) == 1
    assert direct.shards_needed_at_once([5, 5], order, 4) == 2  # batch 1 takes from both
    assert direct.shards_needed_at_once([5, 5], np.array([0, 5, 1, 6, 2, 7, 3, 8, 4, 9]), 1) == 2
    assert direct.shards_needed_at_once([5, 5], order[:0], 4) == 0
    assert direct.shards_needed_at_once([3, 0, 3], np.arange(6), 6) == 2  # empty shards count not


def test_hidden_records_and_compressed_shards(tmp_path, codec, gathered, monkeypatch):
    decoded: list[int] = []
    real = direct.pack_records

    def spy(records: Any) -> PackedBatch:
        decoded.append(len(records))
        return real(records)

    monkeypatch.setattr(direct, "pack_records", spy)
    url, expected = make_mixed_dataset(tmp_path)
    kw = {"batch_size": 7, "shuffle_buffer": 15}
    ref = copies(dataset(url, direct_=False, **kw))
    got = copies(dataset(url, **kw))
    assert got == ref
    assert len(keys(got)) == len(expected) + 9 and set(expected) <= set(keys(got))
    # Batches holding a sample of the zstd shard were decoded from records; the rest, direct.
    assert sum(gathered) + sum(decoded) == len(expected) + 9
    assert sum(gathered) > 0 and sum(decoded) >= 9


@pytest.mark.parametrize("buffer", [1, 10])
def test_where_and_decode_take_the_record_path(bytes_dataset, gathered, buffer):
    url, expected = bytes_dataset
    where = {"where": "key < :k", "params": {"k": "s/00040"}, "shuffle_buffer": buffer}
    ref = copies(dataset(url, direct_=False, **where))
    got = copies(dataset(url, **where))
    assert got == ref
    assert sorted(keys(got)) == sorted(k for k in expected if k < "s/00040")
    # A mapping decode runs per entry: those batches come from records (decoded samples).
    decode = {"txt": str.upper}
    got = copies(dataset(url, decode=decode, shuffle_buffer=buffer))
    assert got == copies(dataset(url, direct_=False, decode=decode, shuffle_buffer=buffer))
    assert {s["txt"] for b in got for s in b} == {f"T{int(k[2:])}" for k in expected}
    assert not gathered


def test_tar_shards_take_the_record_path(tmp_path, gathered):
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url) as cat:
        make_tar_dataset(cat, tmp_path / "tars", name="train")
        n = sum(d.record_count for d in cat.shards("train"))
    kw = {"shuffle_buffer": 10, "batch_size": 4, "entries": ["jpg", "cls"]}  # in every sample
    got = keys(list(dataset(url, **kw)))
    assert got == keys(list(dataset(url, direct_=False, **kw)))
    assert len(set(got)) == len(got) == n
    assert not gathered


def test_remote_shards_without_cache_stream_and_with_cache_gather(s3, tmp_path, gathered):
    opts = s3["storage_options"]
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url, storage_options=opts) as cat:
        expected = make_bytes_dataset(
            cat, f"{s3['url']}/train", sizes=(6, 10), storage_options=opts
        )
    ref = copies(dataset(url, direct_=False, storage_options=opts))
    assert copies(dataset(url, storage_options=opts)) == ref
    assert not gathered  # streamed with read-ahead, from records
    assert copies(dataset(url, storage_options=opts, cache_dir=tmp_path / "cache")) == ref
    assert sum(gathered) == len(expected)


@pytest.mark.parametrize("where", ["payload", "head"])
def test_a_damaged_record_raises_checksum_error(bytes_dataset, codec, reads, where):
    url, _ = bytes_dataset
    with Catalog(url) as cat:
        path = cat.shards("train")[0].url
    at = _payload_and_head(path)[0 if where == "payload" else 1]
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(ChecksumError, match="CRC32C mismatch") as e:
        list(dataset(url, shuffle_buffer=1000))
    assert e.value.path == path
    with pytest.raises(ChecksumError, match="CRC32C mismatch"):
        list(ShardLoader(dataset(url, shuffle_buffer=1000), num_workers=1))


def test_a_shard_cut_short_after_its_plan_raises_truncated(
    bytes_dataset, codec, reads, monkeypatch
):
    """The file shrinks between planning (footer read) and reading its records.

    Mapped, the size check before each batch finds it (a mapped read past the new end would
    kill the process with SIGBUS) and the batch is read with ``preadv``, which reports it.
    """
    url, _ = bytes_dataset
    real = direct.open_direct

    def then_truncate(*args: Any) -> direct.DirectShard:
        shard = real(*args)
        with open(shard.reader.path, "r+b") as f:
            f.truncate(int(shard.plan.start[len(shard.plan.start) // 2]) + 3)
        return shard

    monkeypatch.setattr(direct, "open_direct", then_truncate)
    with pytest.raises(TruncatedError, match="ends inside the record"):
        list(dataset(url, shuffle_buffer=1000))


def test_scatter_read_runs_reference_matches_the_compiled_one(tmp_path):
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled codec was not built")
    from shardcat.format import _ccodec, scatter

    rng = np.random.default_rng(0)
    data = [rng.integers(0, 256, 3000, dtype=np.uint8).tobytes() for _ in range(2)]
    paths = []
    for i, d in enumerate(data):
        paths.append(tmp_path / f"f{i}")
        paths[-1].write_bytes(d)
    files = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed below
    try:
        fds = np.array([files[1].fileno(), files[0].fileno(), files[1].fileno()], dtype=np.int64)
        offsets = np.array([100, 0, 2990], dtype=np.int64)
        counts = np.array([2, 3, 1], dtype=np.int64)
        positions = np.array([0, 50, 10, 1000, 3000, 2000], dtype=np.int64)
        lengths = np.array([10, 900, 10, 0, 500, 10], dtype=np.int64)
        for fn in (_ccodec, scatter):
            dest = np.zeros(4000, dtype=np.uint8)
            assert fn.scatter_read_runs(fds, offsets, counts, dest, positions, lengths) == -1
            assert dest[0:10].tobytes() == data[1][100:110]
            assert dest[50:950].tobytes() == data[1][110:1010]
            assert dest[10:20].tobytes() == data[0][0:10]
            assert dest[3000:3500].tobytes() == data[0][10:510]
            assert dest[2000:2010].tobytes() == data[1][2990:3000]
            past = offsets.copy()
            past[1] = 2800  # run 1 runs off the end of its file
            assert fn.scatter_read_runs(fds, past, counts, dest, positions, lengths) == 1
            with pytest.raises(ValueError, match=r"runs take|more pieces than given"):
                fn.scatter_read_runs(fds, offsets, counts + 1, dest, positions, lengths)
            with pytest.raises(ValueError, match="runs take"):
                fn.scatter_read_runs(fds, offsets, counts - 1, dest, positions, lengths)
            with pytest.raises(ValueError, match="one length"):
                fn.scatter_read_runs(fds[:2], offsets, counts, dest, positions, lengths)
            with pytest.raises(ValueError, match="outside the destination"):
                fn.scatter_read_runs(fds, offsets, counts, dest[:100], positions, lengths)
        with pytest.raises(ValueError, match="invalid"):
            _ccodec.scatter_read_runs(-fds, offsets, counts, dest, positions, lengths)
    finally:
        for f in files:
            f.close()


def test_gather_copy_reference_matches_the_compiled_one() -> None:
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled codec was not built")
    from shardcat.format import _ccodec, scatter

    rng = np.random.default_rng(1)
    sources = [rng.integers(0, 256, 3000, dtype=np.uint8).tobytes() for _ in range(2)]
    which = np.array([1, 0, 1], dtype=np.int64)
    offsets = np.array([100, 0, 2990], dtype=np.int64)
    counts = np.array([2, 3, 1], dtype=np.int64)
    positions = np.array([0, 50, 10, 1000, 3000, 2000], dtype=np.int64)
    lengths = np.array([10, 900, 10, 0, 500, 10], dtype=np.int64)
    out = []
    for fn in (_ccodec, scatter):
        dest = np.zeros(4000, dtype=np.uint8)
        fn.gather_copy(sources, which, offsets, counts, dest, positions, lengths)
        assert dest[50:950].tobytes() == sources[1][110:1010]
        assert dest[3000:3500].tobytes() == sources[0][10:510]
        assert dest[2000:2010].tobytes() == sources[1][2990:3000]
        out.append(dest)
        past = offsets.copy()
        past[2] = 2995  # run 2 runs off the end of its source
        with pytest.raises(ValueError, match="outside source"):
            fn.gather_copy(sources, which, past, counts, dest, positions, lengths)
        with pytest.raises(ValueError, match="invalid"):
            fn.gather_copy(sources, which + 1, offsets, counts, dest, positions, lengths)
        with pytest.raises(ValueError, match="runs take"):
            fn.gather_copy(sources, which, offsets, counts - 1, dest, positions, lengths)
        with pytest.raises(ValueError, match="outside the destination"):
            fn.gather_copy(sources, which, offsets, counts, dest[:100], positions, lengths)
    assert (out[0] == out[1]).all()
    with pytest.raises(TypeError):
        _ccodec.gather_copy([sources[0], 3], which, offsets, counts, out[0], positions, lengths)
