"""LitData: ``litdata.optimize`` writes 64 MB chunks, ``litdata.StreamingDataset`` reads them.

``optimize`` runs the sample function in one worker process (``num_workers=1``,
order kept), as its docs show. ``StreamingDataset`` indexes samples by
position: the adapter keeps an in-memory key -> position map (its best case).
It has no batch call: a batch is the positions read one by one in sorted
order. Local disk only: for remote data LitData downloads whole chunks into a
local cache, so it has no ranged-read S3 path to compare.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from benchmarks.peers.base import SHARD_BYTES, Pair, System
from benchmarks.peers.data import Dataset


@functools.lru_cache(maxsize=2)
def _dataset(count: int, seed: int) -> Dataset:
    return Dataset(count, seed)


def _sample(i: int, count: int, seed: int) -> dict[str, Any]:
    s = _dataset(count, seed).sample(i)
    return {"key": s.key, "payload": s.payload, "label": s.label}


class LitData(System):
    name = "litdata"
    distributions = ("litdata", "torch")
    backends = ("local",)
    mmap_reads = True

    @classmethod
    def available(cls) -> str | None:
        try:
            import litdata  # noqa: F401
        except ImportError as e:
            return f"litdata does not import: {e}"
        return None

    def write(self) -> None:
        import litdata

        litdata.optimize(
            fn=functools.partial(_sample, count=self.dataset.count, seed=self.dataset.seed),
            inputs=list(self.dataset.order),
            output_dir=self.root,
            chunk_bytes=SHARD_BYTES,
            num_workers=1,
            keep_data_ordered=True,
            verbose=False,
        )
        self.position = {self.dataset.key(i): n for n, i in enumerate(self.dataset.order)}

    def open(self) -> None:
        import litdata

        self.notes.append("by position with an in-memory key -> position map (its best case)")
        self.ds = litdata.StreamingDataset(self.root, cache_dir=self.store.local_dir("lit-cache"))

    def get(self, key: str) -> Pair:
        item = self.ds[self.position[key]]
        return item["payload"], item["label"]

    def get_many(self, keys: list[str]) -> list[Pair]:
        found: dict[str, Pair] = {}
        for key in sorted(keys, key=self.position.__getitem__):
            item = self.ds[self.position[key]]
            found[key] = (item["payload"], item["label"])
        return [found[k] for k in keys]

    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        for item in self.ds:
            yield item["key"], item["payload"], item["label"]
