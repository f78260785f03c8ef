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


class FailLate(KillOnce):
    """Fails like AlwaysFail, after ``marker`` seconds: the job's other tasks finish first."""

    def _maybe_die(self) -> None:
        import time

        time.sleep(float(self.marker))
        raise RuntimeError("injected failure: this partition never succeeds")


class NoKeyLogged(Mapping[str, Any]):
    """A sample without ``__key__`` that appends a line to ``log`` each time the writer asks for it.

    It is read inside the task that writes the shard, so the lines count that task's attempts.
    """

    def __init__(self, log: str) -> None:
        self.log = log

    def __getitem__(self, name: str) -> Any:
        if name == "__key__":
            with open(self.log, "a") as f:
                f.write(f"{os.getpid()}\n")
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(["txt"])

    def __len__(self) -> int:
        return 1


def partition_with(
    partition: int, count: int, kind: type[KillOnce], at: int, marker: str
) -> list[Any]:
    samples: list[Any] = make_samples(partition, count)
    samples[at] = kind(samples[at], marker)
    return samples


def tagged_samples(tag: str, partition: int, count: int, prefix: str = "k") -> list[dict[str, Any]]:
    """Samples whose keys depend on ``prefix`` and whose bytes depend on ``tag`` too.

    Two jobs writing the same keys with different tags give the same record
    sizes (so the same offsets) but different payloads: a lookup that returns
    the wrong job's bytes is caught by comparing them.
    """
    return [
        {
            "__key__": f"{prefix}/{partition:03d}/{i:05d}",
            "bin": tagged_payload(tag, prefix, partition, i),
            "json": {"tag": tag, "partition": partition, "i": i},
        }
        for i in range(count)
    ]


def tagged_payload(tag: str, prefix: str, partition: int, i: int) -> bytes:
    seed = f"{tag}|{prefix}|{partition}|{i}".encode()
    size = 200 + (partition * 131 + i * 17) % 1800  # independent of the tag
    return (seed * (size // len(seed) + 1))[:size]


class Slow(KillOnce):
    """Sleeps ``marker`` seconds (a float, as text) the first time the writer reads it."""

    def _maybe_die(self) -> None:
        import time

        if not getattr(self, "_slept", False):
            self._slept = True
            time.sleep(float(self.marker))


def slow_tagged(tag: str, partition: int, count: int, seconds: float) -> list[Any]:
    samples: list[Any] = tagged_samples(tag, partition, count)
    samples[0] = Slow(samples[0], str(seconds))
    return samples


class Trickle(KillOnce):
    """Sleeps ``seconds`` each time the writer reads it, then appends a line to ``marker``:
    the lines show whether a task is still running."""

    def __init__(self, sample: dict[str, Any], marker: str, seconds: float) -> None:
        super().__init__(sample, marker)
        self.seconds = seconds

    def _maybe_die(self) -> None:
        import time

        time.sleep(self.seconds)
        with open(self.marker, "a") as f:
            f.write(f"{self.sample['__key__']}\n")


def trickling(partition: int, count: int, seconds: float, log: str) -> list[Any]:
    return [Trickle(s, log, seconds) for s in make_samples(partition, count)]


def failing_tagged(tag: str, partition: int, count: int) -> list[Any]:
    samples: list[Any] = tagged_samples(tag, partition, count)
    samples[0] = AlwaysFail(samples[0], "")
    return samples


class ShrinkingPartition(list):  # type: ignore[type-arg]
    """A partition iterated on the worker: the first attempt kills its worker part-way,
    the retry (the marker file exists) yields fewer samples, or the same ones reversed.

    Evaluated inside the write task itself, so the retry really sees other input
    (a non-deterministic source), whichever worker the retry lands on. A list
    (of one placeholder) only so that dask.bag passes it through unchanged.
    """

    def __init__(self, partition: int, marker: str, retry: str) -> None:
        super().__init__([None])
        self.partition = partition
        self.marker = marker
        self.retry = retry

    def __iter__(self) -> Iterator[Any]:
        first = not Path(self.marker).exists()
        samples: list[Any] = tagged_samples("t", self.partition, 300)
        if first:
            # Bigger records than the retry's: the first attempt needs more shards.
            samples = [{**s, "pad": bytes(1500)} for s in samples]
            samples[250] = KillOnce(samples[250], self.marker)
            return iter(samples)
        if self.retry == "fewer":
            return iter(samples[:60])
        return iter(samples[::-1])  # the same keys, repacked into fewer shards


def shrinking_partition(partition: int, marker: str, retry: str) -> ShrinkingPartition:
    return ShrinkingPartition(partition, marker, retry)


SLOW_ENV = "SHARDCAT_TEST_SLOW"
"""``FROM:SECONDS``: samples ``FROM`` on take ``SECONDS`` to write, in processes that have it.

A killed client's bag must be the very bag its rerun makes (a resume compares their Dask
tokens), so the killed run's slowness comes from its environment, not from the bag."""


def _slow_from_env(slow_from: int, seconds: float) -> tuple[int, float]:
    if slow_from < 0 and (spec := os.environ.get(SLOW_ENV)):
        start, _, wait = spec.partition(":")
        return int(start), float(wait)
    return slow_from, seconds


def numbered_sample(i: int, slow_from: int = -1, seconds: float = 0.3) -> Any:
    """Sample ``i`` of a resumable conversion; from ``slow_from`` on each takes ``seconds`` to write."""
    sample = {
        "__key__": f"n/{i:05d}",
        "bin": f"payload {i} ".encode() * (1 + i % 40),
        "json": {"i": i},
    }
    slow_from, seconds = _slow_from_env(slow_from, seconds)
    return Slow(sample, str(seconds)) if 0 <= slow_from <= i else sample


def valued_sample(i: int, tag: str = "first", slow_from: int = -1, seconds: float = 0.3) -> Any:
    """Sample ``i`` whose values carry ``tag``: the same keys, other values per tag."""
    sample = {"__key__": f"t/{i:05d}", "txt": f"{tag} {i}", "json": {"i": i, "tag": tag}}
    slow_from, seconds = _slow_from_env(slow_from, seconds)
    return Slow(sample, str(seconds)) if 0 <= slow_from <= i else sample


def write_sample_files(root: Path, samples: Mapping[str, Mapping[str, bytes]]) -> None:
    """Each sample's entries as files ``root/KEY.ENTRY`` (a folder to index in place or pack)."""
    for key, files in samples.items():
        for entry, data in files.items():
            path = root / f"{key}.{entry}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
