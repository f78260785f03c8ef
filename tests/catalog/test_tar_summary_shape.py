"""A scanned tar's summary feeds the catalog's registration helpers unchanged.

The next round registers tar shards; this pins that TarShardInfo's arrays
are what the span packing and the uniqueness check already take.
"""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from shardcat.catalog.register import check_unique
from shardcat.errors import DuplicateKeyError
from shardcat.format.checksums import crc32c
from shardcat.format.spans import pack_spans, unpack_spans
from shardcat.format.tar import scan_tar


def _tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_spans_of_a_tar_pack_and_unpack_to_its_payloads():
    data = _tar([("a/1.jpg", b"x" * 700), ("a/1.cls", b"1"), ("b/2.jpg", b"yy"), ("b/2.txt", b"t")])
    info = scan_tar(io.BytesIO(data), "mem.tar")
    counts = info.records["entry_count"].astype(np.int64)
    packed = pack_spans(info.entries, counts).tolist()
    hashes = info.key_hashes.astype(np.uint64).view(np.int64)
    check_unique(info.keys, hashes, "mem.tar")
    for i, value in enumerate(packed):
        base = int(info.offsets[i])
        spans = unpack_spans(value, int(counts[i]))
        assert spans == info.spans(i)
        for at, size, crc in spans:
            assert crc32c(data[base + at : base + at + size]) == crc


def test_a_key_in_two_tars_is_a_duplicate_for_the_catalog():
    a = scan_tar(io.BytesIO(_tar([("k.jpg", b"1")])), "a.tar")
    b = scan_tar(io.BytesIO(_tar([("k.jpg", b"2")])), "b.tar")
    keys = a.keys + b.keys
    hashes = np.concatenate([a.key_hashes, b.key_hashes]).astype(np.uint64).view(np.int64)
    with pytest.raises(DuplicateKeyError):
        check_unique(keys, hashes, "two tars")
