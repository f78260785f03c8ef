"""Tail reads on backends without suffix ranges: a size, then one positive range."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from shardcat.storage import open_source
from shardcat.storage.sources import FsspecSource

DATA = bytes(range(256)) * 40


class NoSuffixMemory(MemoryFileSystem):
    """memory:// that, like adlfs, rejects a negative start; records each read."""

    protocol = "nosuffixmem"
    requests: list[tuple[Any, Any]] = []  # noqa: RUF012 - shared by the test on purpose

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kw: Any) -> Any:
        self.requests.append((start, end))
        if start is not None and start < 0:
            raise ValueError("Required Content-Range response header is missing or malformed.")
        return super().cat_file(path, start=start, end=end, **kw)


def test_a_backend_without_suffix_reads_is_learnt_once_and_read_by_size():
    fs = NoSuffixMemory()
    path = f"/{uuid.uuid4().hex}.bin"
    fs.pipe_file(path, DATA)
    first = FsspecSource(fs, path, "nosuffixmem://x")
    assert first.suffix_reads
    NoSuffixMemory.requests.clear()
    assert first.read_suffix(100) == DATA[-100:]
    assert NoSuffixMemory.requests == [(-100, None), (len(DATA) - 100, len(DATA))]
    # Learnt for the class: the next source of this backend never asks for a suffix.
    second = FsspecSource(fs, path, "nosuffixmem://x")
    assert not second.suffix_reads
    NoSuffixMemory.requests.clear()
    assert second.read_suffix(1 << 20) == DATA
    assert NoSuffixMemory.requests == [(0, len(DATA))]


def test_azure_is_known_to_lack_suffix_reads(azure):
    src = open_source(f"{azure['url']}/a.bin", azure["storage_options"])
    assert isinstance(src, FsspecSource) and not src.suffix_reads


@pytest.mark.parametrize("url", ["memory://x/a.bin"])
def test_other_backends_read_a_suffix_in_one_request(url):
    src = open_source(url)
    assert isinstance(src, FsspecSource) and src.suffix_reads
