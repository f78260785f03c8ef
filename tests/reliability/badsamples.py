"""A dataset holding samples that do not decode, beside good ones, and what to check of the errors.

Shared by the tests of every reader's ``on_error`` (``test_bad_samples.py``,
``test_bad_samples_readers.py``); the fixture is in this folder's conftest.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import shardcat
from shardcat.errors import FormatError, SampleDecodeError
from shardcat.reading import Catalog

JPEG = b"\xff\xd8\xff\xe0" + bytes(range(256))
BAD = {"k07": b"", "k23": b'{"label": 3'}  # empty; cut short
"""The bad samples of :func:`write_bad_dataset`: key -> its JSON entry's bytes."""
N = 30
GOOD = sorted(f"k{i:02d}" for i in range(N) if f"k{i:02d}" not in BAD)


def label(i: int) -> bytes:
    return json.dumps({"label": i % 4}).encode()


def tar_dataset_with_an_empty_json(catalog_url: str, folder: Path) -> None:
    """Dataset ``wds``: one WebDataset tar indexed in place, 12 samples; ``t/s05``'s JSON is empty.

    shardcat never wrote the tar, so no write checked it: the readers must cope.
    """
    tar = folder / "part-000000.tar"
    folder.mkdir()
    with tarfile.open(tar, "w") as t:
        for i in range(12):
            for ext, data in (("jpg", JPEG), ("json", b"" if i == 5 else label(i))):
                info = tarfile.TarInfo(f"t/s{i:02d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    with Catalog(catalog_url) as cat:
        cat.create_dataset("wds", str(folder))
        cat.reindex("wds", [str(tar)], kind="tar")


def write_bad_dataset(
    catalog_url: str, root: str, storage_options: dict[str, Any] | None = None
) -> None:
    """Dataset ``imgs``: 30 samples in two shards under ``root``, two of them with a JSON entry that
    does not decode (:data:`BAD`).

    Written with ``ShardWriter``, which stores bytes as given, as a shard
    written before the write-time check (or by another tool) holds them.
    """
    opts = storage_options or {}
    with Catalog(catalog_url, storage_options=opts) as cat:
        cat.create_dataset("imgs", root)
        for n, keys in enumerate((range(15), range(15, N))):
            url = f"{root}/imgs-{n:06d}.shard"
            with shardcat.ShardWriter(url, shard_number=n, storage_options=opts) as w:
                for i in keys:
                    k = f"k{i:02d}"
                    w.add(k, {"jpg": JPEG, "json": BAD.get(k, label(i))})
            cat.register_shard("imgs", w.close())


def keys_of(samples: Any) -> list[str]:
    return sorted(s["__key__"] for s in samples)


def assert_names_the_sample(
    e: SampleDecodeError, key: str = "k07", dataset: str | None = "imgs"
) -> None:
    """``dataset`` None: a record of a lookup, which knows its key and shard, not its dataset."""
    shard = "imgs-000000.shard" if key == "k07" else "imgs-000001.shard"
    assert isinstance(e, FormatError) and isinstance(e, ValueError)
    assert (e.dataset, e.key, e.entry) == (dataset, key, "json")
    assert e.path is not None and e.path.endswith(shard)
    text = str(e)
    named = f"dataset '{dataset}', " if dataset else ""
    assert f"{named}key '{key}', entry 'json', shard " in text and shard in text
    assert "on_error='skip'" in text  # what to do
    assert isinstance(e.__cause__, json.JSONDecodeError)
