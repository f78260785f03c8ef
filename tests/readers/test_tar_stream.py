"""Tars indexed in place stream exactly as native shards do: once per epoch, resumable, CRC-checked.

The tars are written by webdataset's own TarWriter; what the readers yield
is compared with what webdataset itself reads from them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import shardcat
from shardcat.errors import CatalogError, ChecksumError
from shardcat.readers import SampleStream, plan_tasks
from shardcat.reading import Catalog
from shardcat.testing.tars import wds_samples

from .conftest import TAR_SIZES, make_tar_dataset, stop_and_resume

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from shardcat.torch import ShardIterableDataset  # noqa: E402


def keys_only(sample: dict[str, Any]) -> str:
    # Module level: spawned workers unpickle it by name.
    return sample["__key__"]


@pytest.fixture
def tar_dataset(tmp_path) -> tuple[str, list[dict[str, Any]]]:
    """(catalog URL, webdataset's samples of the tars in file order)."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url) as cat:
        tars = make_tar_dataset(cat, tmp_path / "wds")
    return url, [s for t in tars for s in wds_samples(t)]


def stream_of(
    url: str, where: str | None = None, params: dict[str, Any] | None = None, **kw: Any
) -> SampleStream:
    with Catalog(url) as cat:
        return SampleStream(
            tuple(plan_tasks(cat, "wds", where, params)), catalog=cat.handle(), **kw
        )


def keys_of(samples) -> list[str]:
    return [s["__key__"] for s in samples]


def test_a_tar_dataset_streams_what_webdataset_reads(tar_dataset):
    url, expected = tar_dataset
    got = list(stream_of(url, shuffle=False).iter_reader(0))
    assert keys_of(got) == keys_of(expected)
    for mine, theirs in zip(got, expected):
        assert set(mine) == set(theirs)
        assert mine["jpg"] == theirs["jpg"]
        assert mine["cls"] == theirs["cls"].decode()  # text comes back as str
        assert mine["json"] == json.loads(theirs["json"])


@pytest.mark.parametrize(("world", "workers"), [(1, 1), (1, 2), (2, 2), (3, 1)])
def test_every_tar_sample_once_per_epoch_over_ranks_and_workers(tar_dataset, world, workers):
    url, expected = tar_dataset
    stream = stream_of(url, shuffle_buffer=5, seed=4)
    flat = []
    for rank in range(world):
        for w in range(workers):
            got = keys_of(stream.iter_reader(1, rank, world, w, workers))
            assert len(got) == stream.reader_counts(1, rank, world, workers)[w]
            flat += got
    assert sorted(flat) == sorted(keys_of(expected))
    assert stream.num_samples == sum(TAR_SIZES)
    shuffled = keys_of(stream.iter_reader(1))
    assert shuffled != keys_of(expected) and shuffled != keys_of(stream.iter_reader(2))


@pytest.mark.parametrize("buffer", [1, 7])
def test_a_tar_reader_resumes_at_any_sample(tar_dataset, buffer):
    url, _ = tar_dataset
    stream = stream_of(url, shuffle_buffer=buffer, seed=2)
    for worker in range(2):
        full = keys_of(stream.iter_reader(0, 0, 1, worker, 2))
        for start in range(0, len(full) + 1, 3):
            assert keys_of(stream.iter_reader(0, 0, 1, worker, 2, start)) == full[start:]


def test_entries_decode_and_where_on_tars(tar_dataset):
    url, expected = tar_dataset
    only = next(stream_of(url, shuffle=False, entries=("cls",)).iter_reader(0))
    assert set(only) == {"__key__", "cls"}
    mapped = stream_of(url, shuffle=False, decode={"cls": int})
    assert [s["cls"] for s in mapped.iter_reader(0)] == [int(s["cls"]) for s in expected]
    whole = stream_of(url, shuffle=False, decode=keys_only)
    assert list(whole.iter_reader(0)) == keys_of(expected)
    # where= is SQL over the tar's record rows: only the chosen samples are read.
    picked = stream_of(url, "key LIKE :p", {"p": "t1-%"}, shuffle=False, decode=keys_only)
    assert list(picked.iter_reader(0)) == [k for k in keys_of(expected) if k.startswith("t1-")]
    assert picked.num_samples == TAR_SIZES[1]


def test_deleted_keys_of_a_tar_are_not_streamed(tar_dataset):
    url, expected = tar_dataset
    gone = {expected[0]["__key__"], expected[20]["__key__"]}
    with Catalog(url) as cat:
        shardcat.delete_keys(cat, "wds", sorted(gone))
    stream = stream_of(url, shuffle=False, decode=keys_only)
    assert list(stream.iter_reader(0)) == [k for k in keys_of(expected) if k not in gone]


def test_a_payload_changed_after_indexing_is_a_checksum_error(tar_dataset, tmp_path):
    url, expected = tar_dataset
    path = tmp_path / "wds" / "train-000001.tar"
    data = bytearray(path.read_bytes())
    at = bytes(data).index(expected[TAR_SIZES[0] + 2]["jpg"][:64])  # inside a payload
    data[at + 10] ^= 0x01
    path.write_bytes(bytes(data))
    stream = stream_of(url, shuffle=False)
    with pytest.raises(ChecksumError, match="after indexing"):
        list(stream.iter_reader(0))
    # Only the changed sample is refused: a filter that leaves it out streams.
    bad = expected[TAR_SIZES[0] + 2]["__key__"]
    rest = stream_of(url, "key != :k", {"k": bad}, shuffle=False, decode=keys_only)
    assert list(rest.iter_reader(0)) == [k for k in keys_of(expected) if k != bad]


def test_a_tar_task_without_the_catalog_is_refused(tar_dataset):
    url, _ = tar_dataset
    with Catalog(url) as cat:
        stream = SampleStream(tuple(plan_tasks(cat, "wds", None, None)))
    with pytest.raises(CatalogError, match="tar indexed in place"):
        next(stream.iter_reader(0))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_tar_samples_through_dataloader_workers(catalog_url, tmp_path, method):
    with Catalog(catalog_url) as cat:
        tars = make_tar_dataset(cat, tmp_path / "wds")
        keys = [s["__key__"] for t in tars for s in wds_samples(t)]
        ds = ShardIterableDataset(cat, "wds", decode=keys_only, shuffle_buffer=4)
        assert len(ds) == len(keys)
        loader = DataLoader(ds, batch_size=5, num_workers=2, multiprocessing_context=method)
        assert sorted(k for b in loader for k in b) == sorted(keys)


@pytest.mark.parametrize(("workers", "stop"), [(0, 4), (2, 3)])
def test_a_tar_epoch_stopped_and_resumed_equals_an_uninterrupted_one(tar_dataset, workers, stop):
    url, _ = tar_dataset

    def make() -> ShardIterableDataset:
        ds = ShardIterableDataset(url, "wds", decode=keys_only, seed=6, shuffle_buffer=5)
        ds.set_epoch(1)
        return ds

    full, resumed = stop_and_resume(make, stop, batch_size=4, num_workers=workers)
    assert resumed == full


def test_s3_tars_stream_through_a_cache(s3, tmp_path):
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    opts = s3["storage_options"]
    with Catalog(url, storage_options=opts) as cat:
        tars = make_tar_dataset(
            cat, tmp_path / "wds", storage_options=opts, upload_to=f"{s3['url']}/wds"
        )
    keys = [s["__key__"] for t in tars for s in wds_samples(t)]
    direct = ShardIterableDataset(url, "wds", decode=keys_only, shuffle=False, storage_options=opts)
    assert list(direct) == keys
    cached = ShardIterableDataset(
        url,
        "wds",
        decode=keys_only,
        storage_options=opts,
        cache_dir=tmp_path / "cache",
        cache_limit="1GB",
    )
    assert sorted(cached) == sorted(keys)
    assert sorted(p.stat().st_size for p in (tmp_path / "cache").iterdir()) == sorted(
        t.stat().st_size for t in tars
    )
