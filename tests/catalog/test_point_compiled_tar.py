"""Tar shards on the compiled point lookup (issue 11), on real SQLite files and real tars.

The compiled path must answer tar samples with the records the Python path
returns (names, bytes, content types), never a sample the statement does not
see, and hand every damaged or unusual sample back to the Python path, whose
typed errors are then the ones raised.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shardcat.catalog import internal
from shardcat.errors import ChecksumError, KeyNotFoundError, TruncatedError
from shardcat.format import recordcodec
from shardcat.format.tar import scan_tar
from shardcat.reading import Catalog, point
from shardcat.testing.tars import record_as_sample, wds_samples, write_wds_tar

from .helpers import shard_keys, write_shard

pytestmark = pytest.mark.skipif(
    point.active() != "compiled" or recordcodec.active() != "compiled",
    reason="the compiled point lookup is not available or not chosen here",
)


def _fast(cat: Catalog, dataset: str, key: str) -> Any:
    """The compiled path alone: a record, or None (not handled)."""
    lookup = cat._lookup()
    assert point.is_compiled(lookup._point_lookup), "the compiled point lookup is off here"
    return lookup.fast_get(dataset, key, recordcodec.decode_spanned)


def _python_catalog(url: str) -> Catalog:
    """A catalog whose lookup was opened with the compiled point lookup off."""
    previous = point.use("python")
    try:
        cat = Catalog(url)
        assert not point.is_compiled(cat._lookup()._point_lookup)
    finally:
        point.use(previous)
    return cat


def _described(record: Any) -> tuple[Any, ...]:
    entries = [(n, e.content_type, bytes(e.data)) for n, e in record.entries.items()]
    return record.key, record.index, record.offset, record.length, entries


class _CountingGet:
    """Wraps a lookup's Python ``get`` (the fallback of ``Catalog.get``) and counts its calls."""

    def __init__(self, cat: Catalog) -> None:
        lookup = cat._lookup()
        self.inner = lookup.get
        self.calls = 0
        lookup.get = self  # type: ignore[method-assign]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.inner(*args, **kwargs)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture
def tar_path(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return Path(write_wds_tar(root / "a.tar", n=40))


@pytest.fixture
def cat(sqlite_url: str, tar_path: Path) -> Iterator[Catalog]:
    c = Catalog(sqlite_url)
    c.create_dataset("wds", str(tar_path.parent))
    c.register_shard("wds", scan_tar(tar_path))
    try:
        yield c
    finally:
        c.close()


def test_both_paths_return_identical_tar_records_and_the_compiled_one_answers(
    cat, sqlite_url, tar_path
):
    # A native shard in the same dataset: the shard cache holds both kinds.
    native = write_shard(str(tar_path.parent / "n.shard"), shard_keys(0, 5))
    cat.register_shard("wds", native)
    expected = wds_samples(tar_path)
    assert len({tuple(sorted(s)) for s in expected}) == 2  # two layouts (every 4th has seg.png)
    keys = [s["__key__"] for s in expected]
    slow = _python_catalog(sqlite_url)
    try:
        assert _fast(cat, "wds", keys[0]) is None  # nothing cached or open yet
        counter = _CountingGet(cat)
        first = cat.get("wds", keys[0])  # the Python path: caches the shards, opens the tar
        assert counter.calls == 1
        for sample in expected:
            key = sample["__key__"]
            fast = _fast(cat, "wds", key)
            assert fast is not None, key  # the compiled path answered
            assert record_as_sample(fast) == sample
            assert _described(fast) == _described(slow.get("wds", key))
            assert _described(cat.get("wds", key)) == _described(fast)
        for key in shard_keys(0, 5):
            cat.get("wds", key)
            assert _described(_fast(cat, "wds", key)) == _described(slow.get("wds", key))
        # Every lookup after the first native one (which opened that shard) was compiled.
        assert counter.calls == 2
        assert _described(first) == _described(slow.get("wds", keys[0]))
    finally:
        slow.close()


def test_a_tar_changed_after_indexing_raises_the_python_paths_checksum_error(
    cat, sqlite_url, tar_path
):
    info = scan_tar(tar_path)
    sample = info.samples()[5]
    entry = sample.entries[-1]
    cat.get("wds", info.keys[0])  # cached and open
    assert _fast(cat, "wds", sample.key) is not None
    data = bytearray(tar_path.read_bytes())
    data[entry.payload_offset] ^= 0x01
    tar_path.write_bytes(bytes(data))  # in place: the open descriptor reads the new bytes
    assert _fast(cat, "wds", sample.key) is None
    with pytest.raises(ChecksumError, match="CRC32C") as fast_error:
        cat.get("wds", sample.key)
    slow = _python_catalog(sqlite_url)
    try:
        with pytest.raises(ChecksumError) as slow_error:
            slow.get("wds", sample.key)
    finally:
        slow.close()
    assert str(fast_error.value) == str(slow_error.value)
    assert repr(tar_path.name) in str(fast_error.value) or str(tar_path) in str(fast_error.value)
    # Other samples are still served, compiled again once the Python path reopened the tar.
    assert record_as_sample(cat.get("wds", info.keys[0])) == wds_samples(tar_path)[0]
    assert _fast(cat, "wds", info.keys[1]) is not None


def test_a_truncated_tar_raises_the_python_paths_error(cat, tar_path):
    info = scan_tar(tar_path)
    last = info.keys[-1]
    cat.get("wds", info.keys[0])
    size = tar_path.stat().st_size
    with open(tar_path, "r+b") as f:
        f.truncate(int(info.offsets[-1]) + 10)
    assert _fast(cat, "wds", last) is None  # a short read
    with pytest.raises((TruncatedError, ChecksumError)):
        cat.get("wds", last)
    assert size > tar_path.stat().st_size


def test_a_tar_of_an_uncommitted_job_is_never_returned(cat, tmp_path, tar_path):
    staged_path = Path(write_wds_tar(tar_path.parent / "b.tar", n=8, seed=1, prefix="staged"))
    staged = scan_tar(staged_path)
    job = cat.begin_job("wds")
    cat.register_shard("wds", staged, job=job)
    lookup = cat._lookup()
    lookup._shards.clear()
    cat.get("wds", scan_tar(tar_path).keys[0])  # reloads the shard cache: the staged tar is in it
    assert str(staged_path) in lookup._tars.values()
    lookup._sources.source(str(staged_path))  # and its file open: only the statement hides it
    for key in staged.keys:
        assert _fast(cat, "wds", key) is None
        with pytest.raises(KeyNotFoundError):
            cat.get("wds", key)
    cat.commit_job(job)
    got = _fast(cat, "wds", staged.keys[0])
    assert got is not None
    assert record_as_sample(got) == wds_samples(staged_path)[0]


def test_a_moved_tar_is_found_at_its_new_place_and_served_compiled_again(cat, tar_path):
    keys = scan_tar(tar_path).keys
    cat.get("wds", keys[0])
    before = _fast(cat, "wds", keys[1])
    assert before is not None
    new_root = tar_path.parent.parent / "moved"
    new_root.mkdir()
    new_path = new_root / tar_path.name
    shutil.copyfile(tar_path, new_path)
    (row,) = cat.shards("wds")
    internal.move_shards(
        cat,
        "wds",
        {row.url: (str(new_path), row.file_id)},
        expected_version=cat.info("wds").version,
        root_url=str(new_root),
    )
    os.remove(tar_path)  # the cached descriptor has no name left: never read
    assert _fast(cat, "wds", keys[1]) is None
    assert _described(cat.get("wds", keys[1])) == _described(before)  # the Python path
    assert cat._lookup()._tars[row.id] == str(new_path)
    again = _fast(cat, "wds", keys[1])  # the compiled path, at the new URL
    assert again is not None
    assert _described(again) == _described(before)


def test_python_point_lookup_serves_tars_without_the_compiled_path(sqlite_url, tar_path, cat):
    slow = _python_catalog(sqlite_url)
    try:
        for sample in wds_samples(tar_path)[:6]:
            assert record_as_sample(slow.get("wds", sample["__key__"])) == sample
    finally:
        slow.close()
