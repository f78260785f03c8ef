"""The samples every system writes and reads: deterministic, cheap to regenerate, checkable.

A sample is a string key (``img/00012345``), a 2-8 KiB binary payload and a
small JSON label. Payloads are slices of one seeded random blob (16 MiB), so
the expected bytes of any sample are recomputed in O(1) without holding the
dataset in memory; keys are written in a seeded shuffled order.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

FULL_SAMPLES = 200_000
BLOB_BYTES = 16 << 20
MIN_PAYLOAD, MAX_PAYLOAD = 2048, 8192


@dataclass(frozen=True)
class Sample:
    key: str
    payload: bytes
    label: bytes


@dataclass
class Dataset:
    """``count`` samples; ``order`` is the shuffled write order (sample numbers)."""

    count: int
    seed: int = 0
    _blob: bytes = field(init=False, repr=False)
    _lengths: np.ndarray = field(init=False, repr=False)
    order: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self._blob = rng.bytes(BLOB_BYTES + MAX_PAYLOAD)
        self._lengths = rng.integers(MIN_PAYLOAD, MAX_PAYLOAD + 1, self.count)
        self.order = list(range(self.count))
        random.Random(self.seed).shuffle(self.order)

    def __reduce__(self) -> tuple[type[Dataset], tuple[int, int]]:
        # Pickled as its parameters: a fresh process regenerates the same bytes.
        return (Dataset, (self.count, self.seed))

    @classmethod
    def scaled(cls, scale: float, seed: int = 0) -> Dataset:
        return cls(max(200, int(FULL_SAMPLES * scale)), seed)

    @staticmethod
    def key(i: int) -> str:
        return f"img/{i:08d}"

    @staticmethod
    def number(key: str) -> int:
        return int(key[4:])

    def payload(self, i: int) -> bytes:
        start = (i * 104_729) % BLOB_BYTES
        return self._blob[start : start + int(self._lengths[i])]

    def label(self, i: int) -> bytes:
        return json.dumps({"key": self.key(i), "label": i % 1000}).encode()

    def sample(self, i: int) -> Sample:
        return Sample(self.key(i), self.payload(i), self.label(i))

    def __iter__(self) -> Iterator[Sample]:
        """The samples in write order."""
        for i in self.order:
            yield self.sample(i)

    def keys(self) -> list[str]:
        return [self.key(i) for i in self.order]

    @property
    def nbytes(self) -> int:
        """Payload plus label bytes of the whole dataset (what MB/s figures divide)."""
        return int(self._lengths.sum()) + sum(len(self.label(i)) for i in range(self.count))

    def check(self, key: str, payload: bytes | memoryview, label: bytes | memoryview) -> None:
        """Raise ``MismatchError`` unless ``payload`` and ``label`` are exactly the key's bytes."""
        i = self.number(key)
        if bytes(payload) != self.payload(i) or bytes(label) != self.label(i):
            raise MismatchError(
                f"{key}: got {len(payload)}+{len(label)} bytes that differ from the source sample"
            )


class MismatchError(AssertionError):
    """A system returned bytes that are not the source sample's."""
