"""The Quickstart demo: synthetic samples written as shards, read back by key, verified."""

from __future__ import annotations

import random
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._units import format_bytes
from .shards import RollingShardWriter, ShardReader
from .storage import expand_braces, join

__all__ = ["DemoReport", "make_png", "run_demo", "samples"]

_LABELS = ["cat", "dog", "bird", "fish", "horse", "frog", "ship", "truck"]


def make_png(width: int, height: int, rgb: np.ndarray) -> bytes:
    """A real (uncompressed-filter) PNG of an RGB uint8 array, with zlib only."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


def samples(count: int, seed: int = 0, size: int = 32) -> Iterator[dict[str, Any]]:
    """``count`` synthetic samples: a PNG image, a JSON label and a small float array."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        label = int(rng.integers(len(_LABELS)))
        base = rng.integers(0, 256, size=3, dtype=np.uint8)
        noise = rng.integers(0, 48, size=(size, size, 3), dtype=np.uint8)
        image = (base[None, None, :] // 2 + noise).astype(np.uint8)
        yield {
            "__key__": f"{_LABELS[label]}/{i:06d}",
            "png": make_png(size, size, image),
            "json": {"label": label, "name": _LABELS[label], "index": i},
            "npy": rng.standard_normal(16).astype(np.float32),
        }


@dataclass
class DemoReport:
    shards: list[str] = field(default_factory=list)
    records: int = 0
    bytes: int = 0
    write_seconds: float = 0.0
    lookups: int = 0
    lookup_seconds: float = 0.0
    stream_seconds: float = 0.0
    verified: int = 0

    def lines(self) -> list[str]:
        mb = self.bytes / 1e6
        return [
            f"wrote {self.records:,} samples into {len(self.shards)} shards "
            f"({format_bytes(self.bytes)}) in {self.write_seconds:.2f} s ({mb / max(self.write_seconds, 1e-9):.0f} MB/s)",
            f"looked up {self.lookups} random keys: {1e6 * self.lookup_seconds / max(self.lookups, 1):.0f} µs per key",
            f"streamed every record back in {self.stream_seconds:.2f} s",
            f"verified {self.verified} shards: every CRC, padding byte and index row checked",
        ]


def run_demo(out: str, count: int = 4000, shard_size: str = "2MB", seed: int = 0) -> DemoReport:
    """Write ``count`` samples to numbered shards under ``out``, then read and verify them."""
    report = DemoReport()
    t0 = time.perf_counter()
    with RollingShardWriter(
        out, "demo-{number:06d}.shard", max_bytes=shard_size, compression="zstd"
    ) as w:
        for sample in samples(count, seed):
            w.write(sample)
    report.write_seconds = time.perf_counter() - t0
    report.shards = [info.path for info in w.shards]
    report.records = sum(info.record_count for info in w.shards)
    report.bytes = sum(info.size for info in w.shards)

    # The shard list as a brace range, the way a dataset names its shards.
    pattern = join(out, f"demo-{{000000..{len(w.shards) - 1:06d}}}.shard")
    readers = [ShardReader(url) for url in expand_braces(pattern)]
    where = {key: r for r in readers for key in r.keys()}  # noqa: SIM118 - a method, not a dict
    keys = random.Random(seed).sample(sorted(where), min(200, len(where)))
    t0 = time.perf_counter()
    for key in keys:
        rec = where[key].get(key)
        if rec["json"].decode()["index"] != int(key.split("/")[1]):
            raise AssertionError(f"demo read back the wrong sample for {key}")
    report.lookup_seconds = time.perf_counter() - t0
    report.lookups = len(keys)

    t0 = time.perf_counter()
    streamed = sum(1 for r in readers for _ in r)
    report.stream_seconds = time.perf_counter() - t0
    if streamed != report.records:
        raise AssertionError(f"streamed {streamed} records, wrote {report.records}")
    for r in readers:
        r.verify()
        report.verified += 1
        r.close()
    return report
