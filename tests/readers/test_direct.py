"""Packed batches read straight from shard bytes in file order (readers/direct.py), against the record path."""

from __future__ import annotations

import dataclasses
import gc
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import shardcat  # noqa: E402
from shardcat.errors import ChecksumError, TruncatedError  # noqa: E402
from shardcat.format import ShardReader, recordcodec  # noqa: E402
from shardcat.readers import PackedBatch, direct, direct_batch, pack_samples, packed  # noqa: E402
from shardcat.reading import Catalog  # noqa: E402
from shardcat.torch import ShardIterableDataset, ShardLoader  # noqa: E402

from .conftest import make_bytes_dataset, make_mixed_dataset, stop_and_resume  # noqa: E402
from .test_packed import contents  # noqa: E402

pytestmark = pytest.mark.skipif(not packed._SHARED, reason="shared blocks need memfd_create")


def dataset(url: str, *, direct_: bool = True, **kw: Any) -> ShardIterableDataset:
    kw.setdefault("shuffle", False)
    kw.setdefault("batch_size", 5)
    ds = ShardIterableDataset(url, "train", collate=pack_samples, **kw)
    ds.stream = dataclasses.replace(ds.stream, direct=direct_)
    return ds


def plain(batches: list[Any]) -> list[list[dict[str, Any]]]:
    out = []
    for b in batches:
        assert isinstance(b, PackedBatch)
        out.append(b.copy())
    return out


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the batches made straight from shard bytes (in this process)."""
    made: list[int] = []

    class Counted(direct_batch.BlockFill):
        def __init__(self, first: Any, sizes: np.ndarray, span: int) -> None:
            made.append(len(sizes))
            super().__init__(first, sizes, span)

    monkeypatch.setattr(direct_batch, "BlockFill", Counted)
    return made


@pytest.mark.parametrize("batch_size", [1, 5, 64])
@pytest.mark.parametrize("entries", [None, ["bin"], ["json", "txt"]])
@pytest.mark.parametrize("shuffle", [False, True])
def test_same_batches_as_from_records(bytes_dataset, codec, spied, batch_size, entries, shuffle):
    url, expected = bytes_dataset
    # shuffle_buffer=1: shards in a shuffled order, samples in file order (the direct path).
    kw = {"batch_size": batch_size, "entries": entries, "shuffle": shuffle, "shuffle_buffer": 1}
    ref = plain(list(dataset(url, direct_=False, **kw)))
    assert not spied
    got = plain(list(dataset(url, **kw)))
    assert got == ref
    assert sum(spied) == len(expected)
    if entries is None:
        assert {s["__key__"]: s["bin"] for b in got for s in b} == expected


def test_hidden_records_and_other_shards_are_skipped_or_decoded(tmp_path, codec, spied):
    url, expected = make_mixed_dataset(tmp_path)
    kw = {"batch_size": 7}
    ref = plain(list(dataset(url, direct_=False, **kw)))
    got = plain(list(dataset(url, **kw)))
    assert got == ref
    keys = [s["__key__"] for b in got for s in b]
    assert len(keys) == len(expected) + 9 and set(expected) <= set(keys)
    assert 0 < sum(spied) < len(keys)  # batches touching the zstd shard took the record path


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("workers", [1, 2])
def test_each_sample_once_through_worker_processes(bytes_dataset, method, workers):
    url, expected = bytes_dataset
    ds = dataset(url, shuffle=True, shuffle_buffer=1, batch_size=4)
    loader = ShardLoader(ds, num_workers=workers, multiprocessing_context=method)
    for epoch in range(2):
        ds.set_epoch(epoch)
        assert contents(list(loader)) == expected
    del loader
    gc.collect()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_from_either_catalog_and_s3(catalog_url, s3, tmp_path, method):
    opts = s3["storage_options"]
    with Catalog(catalog_url, storage_options=opts) as cat:
        expected = make_bytes_dataset(
            cat, f"{s3['url']}/train", sizes=(6, 10), storage_options=opts
        )
        # Remote shards stream from their records (read-ahead); cached ones are read directly.
        for cache in (None, tmp_path / "cache"):
            ds = ShardIterableDataset(
                cat,
                "train",
                batch_size=3,
                collate=pack_samples,
                shuffle=False,
                rank=0,
                world_size=1,
                cache_dir=cache,
            )
            loader = ShardLoader(ds, num_workers=2, multiprocessing_context=method)
            assert contents(list(loader)) == expected
            ref = dataset(catalog_url, direct_=False, storage_options=opts, batch_size=3)
            assert plain(list(ds)) == plain(list(ref))


def test_cached_s3_shards_are_read_directly(s3, tmp_path, spied):
    opts = s3["storage_options"]
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url, storage_options=opts) as cat:
        expected = make_bytes_dataset(
            cat, f"{s3['url']}/train", sizes=(6, 10), storage_options=opts
        )
    ds = dataset(url, storage_options=opts, cache_dir=tmp_path / "cache")
    assert contents(list(ds)) == expected
    assert sum(spied) == len(expected)
    spied.clear()
    assert contents(list(dataset(url, storage_options=opts))) == expected
    assert not spied  # streamed with read-ahead, from records


def _payload_and_head(path: str) -> tuple[int, int]:
    """File offsets of a byte in record 3's first payload and in its record head."""
    with ShardReader(path) as r:
        rec = r.footer.records[3]
        first = r.footer.entry_starts[3]
        payload = int(rec["offset"] + r.footer.entries["offset"][first])
        return payload + 1, int(rec["offset"]) + 20  # the key hash: under the head CRC


@pytest.mark.parametrize("where", ["payload", "head"])
def test_a_damaged_record_raises_checksum_error_in_the_training_process(
    bytes_dataset, codec, where
):
    url, _ = bytes_dataset
    with Catalog(url) as cat:
        path = cat.shards("train")[0].url
    at = _payload_and_head(path)[0 if where == "payload" else 1]
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(ChecksumError, match="CRC32C mismatch"):
        list(dataset(url))  # in this process
    loader = ShardLoader(dataset(url), num_workers=1)
    with pytest.raises(ChecksumError, match="CRC32C mismatch"):
        list(loader)  # from a worker, typed as it was raised there


def test_a_shard_cut_short_after_its_plan_raises_truncated(bytes_dataset, codec, monkeypatch):
    """The file shrinks between planning (footer read) and reading a run of its records."""
    url, _ = bytes_dataset
    real = direct.open_direct
    cut: list[tuple[str, int]] = []

    def then_truncate(*args: Any) -> direct.DirectShard:
        shard = real(*args)
        if not cut:
            at = int(shard.plan.start[len(shard.plan.start) // 2]) + 3
            with open(shard.reader.path, "r+b") as f:
                f.truncate(at)
            cut.append((shard.reader.path, at))
        return shard

    monkeypatch.setattr(direct, "open_direct", then_truncate)
    with pytest.raises(TruncatedError, match=r"ends inside records \[") as e:
        list(dataset(url, batch_size=64))
    assert e.value.path == cut[0][0]
    assert e.value.offset is not None and e.value.offset < cut[0][1]


@pytest.mark.parametrize("stop", [1, 3])
def test_resume(bytes_dataset, stop):
    url, _ = bytes_dataset

    def make() -> ShardIterableDataset:
        ds = dataset(url, seed=3, shuffle=True, shuffle_buffer=1, batch_size=4)
        ds.set_epoch(1)
        return ds

    full, resumed = stop_and_resume(make, stop, num_workers=2)
    assert [[s["__key__"] for s in b] for b in resumed] == [[s["__key__"] for s in b] for b in full]
    # Without workers, resumed in the middle of a shard.
    ds = dataset(url, batch_size=5)
    it = iter(ds)
    head = [list(next(it)["__key__"]) for _ in range(3)]
    again = dataset(url, batch_size=5)
    again.load_state_dict(ds.state_dict())
    rest = [k for b in again for k in b["__key__"]]
    everything = [k for b in dataset(url, batch_size=5) for k in b["__key__"]]
    assert [k for b in head for k in b] + rest == everything


def test_blocks_go_back_to_the_ring(bytes_dataset):
    url, expected = bytes_dataset
    ring = packed.process_ring()
    kept = list(dataset(url, batch_size=4))
    assert ring.held() >= len(kept) - 1  # every kept batch holds its block
    column = kept[0]["bin"]
    view = column[0]
    del kept
    gc.collect()
    assert ring.held() == 1  # the block a view still holds
    assert bytes(view) == expected["s/00000"]
    del view, column
    gc.collect()
    assert ring.held() == 0
    # Dropped as they come, batches reuse the free blocks: the ring does not grow.
    size = len(ring.blocks)
    assert sum(len(b) for b in dataset(url, batch_size=4)) == len(expected)
    assert len(ring.blocks) == size and ring.held() == 0


def test_scatter_and_crc_references_match_the_compiled_ones(tmp_path):
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled codec was not built")
    from shardcat.format import _ccodec, scatter

    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, 5000, dtype=np.uint8).tobytes()
    path = tmp_path / "f"
    path.write_bytes(data)
    lengths = np.array([10, 0, 300, 7, 1000, 1], dtype=np.int64)
    positions = np.array([4000, 0, 100, 3000, 1500, 4999], dtype=np.int64)
    for fn in (_ccodec, scatter):
        dest = np.zeros(5000, dtype=np.uint8)
        with open(path, "rb") as f:
            assert fn.scatter_read(f.fileno(), 50, dest, positions, lengths)
            spare = np.zeros(5000, dtype=np.uint8)
            assert not fn.scatter_read(f.fileno(), 4000, spare, positions, lengths)  # ends first
        at = 50
        for p, n in zip(positions.tolist(), lengths.tolist()):
            assert dest[p : p + n].tobytes() == data[at : at + n]
            at += n
        copied = np.zeros(5000, dtype=np.uint8)
        fn.scatter_copy(data[50:at], copied, positions, lengths)
        assert (copied == dest).all()
        with pytest.raises(ValueError, match="pieces hold"):
            fn.scatter_copy(data[:10], copied, positions, lengths)
        with pytest.raises(ValueError, match="outside the destination"):
            fn.crc32c_spans(data, np.array([4990], dtype=np.int64), np.array([11], dtype=np.int64))
    assert _ccodec.crc32c_spans(data, positions, lengths) == scatter.crc32c_spans(
        data, positions, lengths
    )


@pytest.mark.parametrize("field", ["record_length", "key_hash", "stored_size", "payload_crc"])
def test_a_head_that_disagrees_with_the_footer_is_refused(bytes_dataset, monkeypatch, field):
    """A record whose head CRC holds but says other than the footer (a forged or mixed-up file)."""
    url, _ = bytes_dataset
    from shardcat.format import plans

    real = plans.expected_heads

    def off_by_one(recs: Any, rel: Any, size: Any, crc: Any) -> Any:
        recs = recs.copy()
        size, crc = size.copy(), crc.copy()
        if field in ("record_length", "key_hash"):
            recs[{"record_length": "length"}.get(field, field)][2] += 1
        elif field == "stored_size":
            size[2, 0] += 1
        else:
            crc[2, 0] ^= 1
        return real(recs, rel, size, crc)

    monkeypatch.setattr(plans, "expected_heads", off_by_one)
    with pytest.raises(shardcat.errors.FormatError, match="does not match the footer"):
        list(dataset(url))
