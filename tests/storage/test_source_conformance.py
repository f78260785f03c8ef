"""shardcat.testing's conformance suites, run against every source and backend shardcat ships."""

from __future__ import annotations

import io
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

import shardcat.config
from shardcat._types import RangeSource
from shardcat.format import BytesSource, FileSource
from shardcat.storage import resolve
from shardcat.testing import RangeSourceTests, StorageTests


class TestLocalFiles(StorageTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> tuple[str, None]:
        root = tmp_path / "store"
        root.mkdir()
        return str(root), None


class TestLocalFileURLs(StorageTests):
    @pytest.fixture
    def store(self, tmp_path: Path) -> tuple[str, None]:
        root = tmp_path / "store"
        root.mkdir()
        return f"file://{root}", None


class TestMemory(StorageTests):
    @pytest.fixture
    def store(self) -> Iterator[tuple[str, None]]:
        root = f"memory://shardcat-conformance-{uuid.uuid4().hex[:10]}"
        yield root, None
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)


class TestS3(StorageTests):
    """S3 read through s3fs (``SHARDCAT_S3_TRANSPORT=fsspec``: ``auto`` picks obstore here)."""

    @pytest.fixture
    def store(
        self, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> tuple[str, dict[str, Any]]:
        shardcat.config.set(s3_transport="fsspec")
        return f"{s3['url']}/conformance", s3["storage_options"]


class TestS3Obstore(StorageTests):
    """S3 read through obstore (``SHARDCAT_S3_TRANSPORT=obstore``, what ``auto`` picks for the
    moto fixture's options); writes stay on s3fs."""

    @pytest.fixture
    def store(
        self, s3: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> tuple[str, dict[str, Any]]:
        pytest.importorskip("obstore")
        shardcat.config.set(s3_transport="obstore")
        return f"{s3['url']}/conformance", s3["storage_options"]


class TestAzure(StorageTests):
    """adlfs against Azurite: no suffix reads on this backend (a size, then a ranged read)."""

    suffix_reads = False

    @pytest.fixture
    def store(self, azure: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return f"{azure['url']}/conformance", azure["storage_options"]


class TestGCS(StorageTests):
    """gcsfs against gcp-storage-emulator. The emulator ignores suffix ranges (it answers with
    the whole object): the source keeps the tail, in the same one request."""

    @pytest.fixture
    def store(self, gcs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return f"{gcs['url']}/conformance", gcs["storage_options"]

    def replace(self, store: Any, url: str, data: bytes) -> None:
        # gcsfs's mv asks GCS's moveTo first; the emulator answers 501, which gcsfs retries
        # for ~30 s before it copies and deletes. shardcat never moves objects: copy, delete.
        aside = self.put(store, data)
        fs, path = resolve(url, store[1])
        fs.copy(resolve(aside, store[1])[1], path)
        fs.rm_file(resolve(aside, store[1])[1])


class TestHTTP(StorageTests):
    """Read-only shards behind an HTTP server that answers ranged requests.

    HTTP has no writes: the helpers put files into the folder the server serves.
    """

    @pytest.fixture
    def store(self, http_store: tuple[str, Path]) -> tuple[str, None]:
        self.base, self.folder = http_store
        return self.base, None

    def _local(self, url: str) -> Path:
        return self.folder / url[len(self.base) :].lstrip("/")

    def put(self, store: Any, data: bytes, name: str | None = None) -> str:
        url = f"{self.base}/{name or uuid.uuid4().hex + '.bin'}"
        self._local(url).write_bytes(data)
        return url

    def remove(self, store: Any, url: str) -> None:
        self._local(url).unlink()

    def replace(self, store: Any, url: str, data: bytes) -> None:
        aside = self._local(url).with_suffix(".aside")
        aside.write_bytes(data)
        os.replace(aside, self._local(url))


class TestBytesSource(RangeSourceTests):
    @pytest.fixture
    def make_source(self) -> Callable[[bytes], RangeSource]:
        return lambda data: BytesSource(data, "memory.bin")


class TestFileSourceOverAFileObject(RangeSourceTests):
    """A caller's open file: positional reads on its descriptor, the file left where it was."""

    @pytest.fixture
    def make_source(self, tmp_path: Path) -> Iterator[Callable[[bytes], RangeSource]]:
        opened: list[Any] = []

        def make(data: bytes) -> RangeSource:
            path = tmp_path / f"{uuid.uuid4().hex}.bin"
            path.write_bytes(data)
            f = open(path, "rb")  # noqa: SIM115 - closed below: the source never closes it
            opened.append(f)
            return FileSource(f)

        yield make
        for f in opened:
            assert not f.closed, "a source does not close a file it did not open"
            f.close()


class TestFileSourceWithoutADescriptor(RangeSourceTests):
    """A file object with no descriptor (BytesIO): seek and read under the source's lock."""

    @pytest.fixture
    def make_source(self) -> Callable[[bytes], RangeSource]:
        return lambda data: FileSource(io.BytesIO(data), "bytesio.bin")
