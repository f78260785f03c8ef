"""Tars written by webdataset itself read back through shardcat, compared with webdataset's reader.

Local files and S3 (s3fs against a moto server on loopback): the scan is one
sequential stream, the lookups one ranged read per sample, and every sample
equals what webdataset groups from the same bytes, entry by entry.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import webdataset as wds

import shardcat.config
from shardcat.format import BytesSource, FileSource
from shardcat.format.checksums import crc32c, key_hash
from shardcat.format.tar import iter_tar_samples, scan_tar
from shardcat.testing.tars import tar_samples, wds_samples

from .helpers import shardcat_samples


@pytest.fixture
def wds_tar(tmp_path):
    path = tmp_path / "train-000000.tar"
    with wds.TarWriter(str(path)) as sink:
        for s in tar_samples(120):
            sink.write(s)
    return path


def test_a_webdataset_tar_reads_back_as_webdataset_reads_it(wds_tar):
    info = scan_tar(wds_tar)
    expected = wds_samples(wds_tar)
    assert len(expected) == info.record_count == 120
    assert shardcat_samples(FileSource(wds_tar), info) == expected
    # The streaming iterator agrees with the summary, member for member.
    data = wds_tar.read_bytes()
    for sample, want in zip(iter_tar_samples(wds_tar), expected):
        assert sample.key == want["__key__"]
        got = {e.name: data[e.payload_offset : e.payload_offset + e.size] for e in sample.entries}
        assert got == {k: v for k, v in want.items() if k != "__key__"}
        assert all(crc32c(got[e.name]) == e.crc for e in sample.entries)


def test_the_summary_has_what_the_catalog_registers(wds_tar):
    info = scan_tar(wds_tar)
    data = wds_tar.read_bytes()
    assert info.size == len(data)
    assert info.member_count == sum(3 + (i % 4 == 0) for i in range(120))
    assert info.skipped == 0
    assert info.keys[:2] == ["part0/sample00000", "part1/sample00001"]
    assert info.key_hashes.tolist() == [key_hash(k.encode()) for k in info.keys]
    assert info.records["key_length"].tolist() == [len(k.encode()) for k in info.keys]
    # Records tile the archive: each starts at its first member's first header
    # (webdataset writes a pax header before every member) and no two overlap.
    ends = info.offsets + info.lengths
    assert info.offsets[0] == 0
    assert np.all(info.offsets[1:] >= ends[:-1])
    assert np.all(info.offsets[1:] - ends[:-1] < 1024 + 512)
    names = {(s.name, s.content_type) for s in info.specs}
    assert names == {
        ("jpg", "image/jpeg"),
        ("cls", "text/plain; charset=utf-8"),
        ("json", "application/json"),
        ("seg.png", "image/png"),
    }
    # Each entry row points at its payload inside the record, with its CRC32C.
    starts = info.entry_starts()
    for i in (0, 1, 57, 119):
        base = int(info.offsets[i])
        for row in info.entries[starts[i] : starts[i + 1]]:
            payload = data[base + int(row["offset"]) : base + int(row["offset"]) + int(row["size"])]
            assert crc32c(payload) == int(row["crc"])
            assert int(row["offset"]) + int(row["size"]) <= int(info.lengths[i])


def test_shardwriter_shards_each_read_back(tmp_path):
    pattern = str(tmp_path / "shard-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=40, verbose=0) as sink:
        for s in tar_samples(100, seed=1):
            sink.write(s)
    paths = sorted(tmp_path.glob("shard-*.tar"))
    assert len(paths) == 3
    total = 0
    for path in paths:
        info = scan_tar(path)
        assert shardcat_samples(FileSource(path), info) == wds_samples(path)
        total += info.record_count
    assert total == 100


def test_the_webdataset_pipeline_and_shardcat_agree_on_keys(wds_tar):
    # The full WebDataset pipeline (not only its tar iterator) on the same file.
    keys = [s["__key__"] for s in wds.WebDataset(str(wds_tar), shardshuffle=False)]
    assert keys == scan_tar(wds_tar).keys


class _CountingStream(io.RawIOBase):
    """A stream that counts the reads made of it (each would be one request)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)
        self.reads = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer):  # type: ignore[override]
        self.reads += 1
        return self._data.readinto(buffer)


def test_a_scan_reads_in_large_chunks_not_per_member(wds_tar):
    data = wds_tar.read_bytes()
    stream = _CountingStream(data)
    chunk = 64 * 1024
    info = scan_tar(stream, "counted.tar", chunk_size=chunk)
    assert info.record_count == 120
    # One read per chunk, plus the one that sees the end of the stream.
    assert stream.reads <= math.ceil(len(data) / chunk) + 2
    assert info.member_count > 10 * stream.reads


def test_on_s3_the_scan_is_one_stream_and_lookups_one_range_each(s3, wds_tar, monkeypatch):
    import fsspec

    # The requests are counted in s3fs's file object: read through s3fs, not obstore (auto).
    shardcat.config.set(s3_transport="fsspec")

    from shardcat.storage import open_source

    fs = fsspec.filesystem("s3", **s3["storage_options"])
    url = f"{s3['url']}/wds/train-000000.tar"
    fs.put_file(str(wds_tar), url)
    source = open_source(url, s3["storage_options"])
    size = source.size()
    stream = source.open_stream()
    requests = []
    fetch = stream.cache.fetcher  # every byte an fsspec file reads comes through here
    stream.cache.fetcher = lambda start, end: requests.append((start, end)) or fetch(start, end)
    with stream:
        info = scan_tar(stream, url, size=size)
    assert info.path == url and info.size == size == wds_tar.stat().st_size
    # The whole tar (under one 8 MiB chunk) is fetched in one request, not one per member.
    assert len(requests) == 1 and requests[0][0] == 0 and requests[0][1] >= size
    with fs.open(url, "rb") as f:
        expected = wds_samples(f, url)
    assert len(expected) == 120
    assert shardcat_samples(source, info) == expected


def test_lookups_read_exactly_the_sample_range(wds_tar):
    class Recording(BytesSource):
        def __init__(self, data: bytes) -> None:
            super().__init__(data, "rec.tar")
            self.ranges: list[tuple[int, int]] = []

        def read_ranges(self, ranges):
            self.ranges.extend((r.start, r.end) for r in ranges)
            return super().read_ranges(ranges)

    info = scan_tar(wds_tar)
    source = Recording(wds_tar.read_bytes())
    shardcat_samples(source, info)
    assert source.ranges == [(int(o), int(o) + int(n)) for o, n in zip(info.offsets, info.lengths)]
