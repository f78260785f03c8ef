from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import shardcat
from shardcat.format import recordcodec
from shardcat.reading import Catalog

# Unequal shards, so balancing by records differs from balancing by shard count.
SHARD_SIZES = (23, 7, 31, 12, 5, 18)


def sample(i: int) -> dict[str, Any]:
    return {
        "json": {"label": i % 5, "i": i},
        "txt": f"sample {i}",
        "npy": np.full(3, i, dtype=np.int32),
    }


def key(i: int) -> str:
    return f"s/{i:05d}"


def payload(i: int) -> bytes:
    """A ``bin`` entry of 100-544 bytes whose bytes say which sample it is."""
    return bytes([i % 251]) * (100 + 37 * (i % 13))


def make_bytes_dataset(
    cat: Catalog, root: str, sizes: tuple[int, ...] = SHARD_SIZES, **opts: Any
) -> dict:
    """Samples with a ``bin`` bytes entry, a JSON label and text; returns key → bin."""
    cat.create_dataset("train", root)
    expected = {}
    i = 0
    for n, size in enumerate(sizes):
        with shardcat.ShardWriter(f"{root}/train-{n:06d}.shard", shard_number=n, **opts) as w:
            for _ in range(size):
                key = f"s/{i:05d}"
                w.add(key, {"bin": payload(i), "json": {"label": i % 5}, "txt": f"t{i}"})
                expected[key] = payload(i)
                i += 1
        cat.register_shard("train", w.close())
    return expected


HIDDEN_KEYS = ("s/00000", "s/00005", "s/00029", "s/00030")


def make_mixed_dataset(tmp_path: Any) -> tuple[str, dict]:
    """:func:`make_bytes_dataset` with deleted keys and a shard of compressed entries.

    The deleted keys stay hidden inside their shards (one at a shard's start,
    one at its end); the ``zstd`` shard's batches must be made from its
    records. Returns the catalog URL and key → ``bin`` of the visible
    uncompressed samples.
    """
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url) as cat:
        expected = make_bytes_dataset(cat, str(tmp_path / "shards"))
        cat.delete_keys("train", list(HIDDEN_KEYS))
        with shardcat.ShardWriter(
            f"{tmp_path}/shards/train-000099.shard", shard_number=99, compression="zstd"
        ) as w:
            for i in range(9):
                w.add(f"z/{i:05d}", {"bin": bytes(200 + i), "json": {"label": 0}, "txt": "z"})
        cat.register_shard("train", w.close())
    for name in HIDDEN_KEYS:
        del expected[name]
    return url, expected


@pytest.fixture
def bytes_dataset(tmp_path) -> tuple[str, dict[str, bytes]]:
    """A file SQLite catalog's URL and key → ``bin`` of the samples of :func:`make_bytes_dataset`."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url) as cat:
        expected = make_bytes_dataset(cat, str(tmp_path / "shards"))
    return url, expected


@pytest.fixture(params=recordcodec.available())
def codec(request: pytest.FixtureRequest) -> Any:
    """Each record codec this installation has, in turn."""
    previous = recordcodec.use(request.param)
    yield request.param
    recordcodec.use(previous)


def make_dataset(
    cat: Catalog,
    root: str,
    *,
    sizes: tuple[int, ...] = SHARD_SIZES,
    storage_options: dict[str, Any] | None = None,
    name: str = "train",
) -> list[str]:
    """A dataset whose samples are numbered 0..N-1 across shards; returns its keys."""
    cat.create_dataset(name, root)
    i = 0
    keys = []
    for n, size in enumerate(sizes):
        with shardcat.ShardWriter(
            f"{root}/train-{n:06d}.shard", storage_options=storage_options, shard_number=n
        ) as w:
            for _ in range(size):
                w.add(key(i), sample(i))
                keys.append(key(i))
                i += 1
        cat.register_shard(name, w.close())
    return keys


@pytest.fixture
def local_dataset(tmp_path) -> Any:
    """(catalog URL, keys) of a SQLite catalog over local shards."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    with Catalog(url) as cat:
        keys = make_dataset(cat, str(tmp_path / "shards"))
    return url, keys


TAR_SIZES = (17, 6, 23)


def make_tar_dataset(
    cat: Catalog,
    folder: Any,
    *,
    sizes: tuple[int, ...] = TAR_SIZES,
    name: str = "wds",
    storage_options: dict[str, Any] | None = None,
    upload_to: str | None = None,
) -> list[Any]:
    """WebDataset tars written by webdataset's TarWriter, indexed in place; returns their paths.

    Each tar is registered from its scan, as :func:`shardcat.index_tar`'s
    task does (without starting a Dask cluster). With ``upload_to`` the tars
    are copied there (e.g. S3) and registered at that location.
    """
    import fsspec

    from shardcat.reading.checks import scan_tar_url
    from shardcat.testing.tars import write_wds_tar

    folder.mkdir(parents=True, exist_ok=True)
    tars = [
        write_wds_tar(folder / f"train-{i:06d}.tar", n=n, seed=i, prefix=f"t{i}-")
        for i, n in enumerate(sizes)
    ]
    root = upload_to or str(folder)
    cat.create_dataset(name, root)
    for t in tars:
        url = f"{root}/{t.name}"
        if upload_to is not None:
            fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
            fs.put_file(str(t), path)
        cat.register_shard(name, scan_tar_url(url, storage_options or {}))
    return tars


def stop_and_resume(make: Any, stop: int, **loader: Any) -> tuple[list[Any], list[Any]]:
    """An uninterrupted epoch's batches, and the batches of a run stopped after ``stop``, saved, resumed.

    ``make()`` builds the dataset (at its epoch); ``loader`` are ShardLoader arguments.
    """
    from shardcat.torch import ShardLoader

    full = [list(b) for b in ShardLoader(make(), **loader)]
    first = ShardLoader(make(), **loader)
    head = []
    for b in first:
        head.append(list(b))
        if len(head) == stop:
            break
    resumed = make()
    resumed.load_state_dict(first.state_dict())
    return full, head + [list(b) for b in ShardLoader(resumed, **loader)]
