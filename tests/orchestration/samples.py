"""Sample factories for the orchestration tests; importable by Dask worker processes."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np


def make_samples(partition: int, count: int, prefix: str = "s") -> list[dict[str, Any]]:
    rng = np.random.default_rng(partition)
    return [
        {
            "__key__": f"{prefix}/{partition:03d}/{i:05d}",
            "bin": rng.integers(
                0, 256, size=int(rng.integers(100, 3000)), dtype=np.uint8
            ).tobytes(),
            "json": {"partition": partition, "i": i},
            "npy": np.full(3, i, dtype=np.int32),
        }
        for i in range(count)
    ]


class KillOnce(Mapping[str, Any]):
    """A sample that SIGKILLs the worker process the first time the writer reads it.

    The marker file makes it fire once per test, so the retried task succeeds:
    the worker dies in the middle of writing a partition, after some of its
    shards were written and staged.
    """

    def __init__(self, sample: dict[str, Any], marker: str) -> None:
        self.sample = sample
        self.marker = marker

    def _maybe_die(self) -> None:
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)

    def __getitem__(self, name: str) -> Any:
        return self.sample[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.sample)

    def __len__(self) -> int:
        return len(self.sample)

    def items(self) -> Any:  # the writer iterates entries through items()
        self._maybe_die()
        return self.sample.items()


class FailOnce(KillOnce):
    """Raises (instead of killing) the first time: a task that Dask retries."""

    def _maybe_die(self) -> None:
        if not Path(self.marker).exists():
            Path(self.marker).touch()
            raise RuntimeError("injected failure on the first attempt")


class AlwaysFail(KillOnce):
    def _maybe_die(self) -> None:
        raise RuntimeError("injected failure: this partition never succeeds")


def partition_with(
    partition: int, count: int, kind: type[KillOnce], at: int, marker: str
) -> list[Any]:
    samples: list[Any] = make_samples(partition, count)
    samples[at] = kind(samples[at], marker)
    return samples
