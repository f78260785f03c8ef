"""The interface every system implements, and the storage it runs on.

A system writes the whole :class:`~.data.Dataset` under a root URL, then answers
point lookups, batch lookups and a full streaming read, returning raw
``(payload, label)`` bytes that the runner checks against the source. Each
adapter uses its library the way that library's documentation recommends and
says in ``notes`` where it had to help (e.g. an in-memory key -> position map
for a system without lookups by key).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from benchmarks.peers.data import Dataset

SHARD_BYTES = 64 << 20


@dataclass
class Store:
    """Local disk (a temporary folder) or S3 (a bucket on the moto server).

    ``backend`` names it in the results: its ``kind``, or for S3 behind the latency
    proxy ``"s3 PROFILE"`` (e.g. ``"s3 same-region"``), one backend per profile.
    """

    kind: str  # "local" | "s3"
    base: str  # a local folder or "s3://bucket"
    storage_options: dict[str, Any] = field(default_factory=dict)
    endpoint: str = ""
    scratch: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="shardcat-peers-"))
    backend: str = ""

    def __post_init__(self) -> None:
        self.backend = self.backend or self.kind

    def root(self, name: str) -> str:
        return f"{self.base}/{name}"

    def fs(self) -> Any:
        import fsspec

        if self.kind == "local":
            return fsspec.filesystem("file")
        return fsspec.filesystem("s3", **self.storage_options)

    def local_dir(self, name: str) -> str:
        """A local folder for what is never remote (catalog files, caches)."""
        path = os.path.join(self.scratch, name)
        os.makedirs(path, exist_ok=True)
        return path

    def cleanup(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


Pair = tuple[bytes | memoryview, bytes | memoryview]


class System(ABC):
    """One system under test; ``name`` is its column in the report."""

    name: str = ""
    distributions: tuple[str, ...] = ()  # whose versions the report prints
    backends: tuple[str, ...] = ("local", "s3")
    # Reads local files through mmap, which /proc/self/io does not count: no local bytes figure.
    mmap_reads: bool = False

    def __init__(self, store: Store, dataset: Dataset) -> None:
        self.store = store
        self.dataset = dataset
        self.root = store.root(self.name)
        self.notes: list[str] = []
        self.registration_seconds: float | None = None  # part of write time, where a system has it
        self.registration_cpu_seconds: float | None = None  # its CPU time (time.process_time)

    @classmethod
    def available(cls) -> str | None:
        """None if the system's packages import, else why not (shown in the report)."""
        return None

    @classmethod
    def versions(cls) -> dict[str, str]:
        out = {}
        for dist in cls.distributions:
            try:
                out[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                out[dist] = "not installed"
        return out

    @abstractmethod
    def write(self) -> None:
        """Write every sample of the dataset (in its order) under ``self.root``."""

    def after_write(self) -> None:
        """Untimed work right after the timed write (the floor measures its registration floor here)."""
        return None

    @abstractmethod
    def open(self) -> None:
        """Get ready to read (untimed except in the cold-lookup measure)."""

    @abstractmethod
    def get(self, key: str) -> Pair:
        """The sample's payload and label."""

    @abstractmethod
    def get_many(self, keys: list[str]) -> list[Pair]:
        """Payloads and labels of ``keys``, in their order."""

    @abstractmethod
    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        """Every sample once, in whatever order the system reads fastest."""

    def close(self) -> None:
        return None
