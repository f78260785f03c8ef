"""WebDataset tar shards: written by ``webdataset.ShardWriter``, streamed by ``webdataset.WebDataset``,
looked up by ``wids.ShardListDataset`` (the random-access reader from the same project).

wids indexes samples by position, not key: the adapter keeps an in-memory
key -> position map built while writing (its best case; a real user would
need to build and store one). ``transformations=[]`` keeps values as raw
bytes. Local disk only: wids copies whole shards into a local cache to read
remote ones, and plain WebDataset reads remote shards through ``pipe:``
commands, so neither has a ranged-read S3 path to compare.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator
from typing import Any

from benchmarks.peers.base import SHARD_BYTES, Pair, System


class WebDataset(System):
    name = "webdataset+wids"
    distributions = ("webdataset", "wids")
    backends = ("local",)
    mmap_reads = True

    @classmethod
    def available(cls) -> str | None:
        try:
            import webdataset  # noqa: F401
            import wids  # noqa: F401
        except ImportError as e:
            return f"webdataset/wids do not import: {e}"
        return None

    def write(self) -> None:
        import webdataset as wds

        os.makedirs(self.root, exist_ok=True)
        self.position: dict[str, int] = {}
        self.shards: list[dict[str, Any]] = []
        counts: list[int] = []
        with wds.ShardWriter(
            f"{self.root}/train-%06d.tar", maxcount=10**9, maxsize=SHARD_BYTES, verbose=0
        ) as sink:
            for n, s in enumerate(self.dataset):
                sink.write({"__key__": s.key, "bin": s.payload, "json": s.label})
                self.position[s.key] = n
                # sink.shard counts the tars opened so far: this sample went to the last one.
                if len(counts) < sink.shard:
                    counts.append(0)
                counts[-1] += 1
        self.counts = counts
        names = sorted(f for f in os.listdir(self.root) if f.endswith(".tar"))
        self.urls = [f"{self.root}/{f}" for f in names]

    def open(self) -> None:
        import wids

        self.notes.append("wids by position with an in-memory key -> position map (its best case)")
        # The shard list a wids user keeps next to the tars (url + sample count per tar).
        with contextlib.redirect_stdout(io.StringIO()):  # it prints the shard list
            self.ds = wids.ShardListDataset(
                [{"url": u, "nsamples": n} for u, n in zip(self.urls, self.counts)],
                transformations=[],
                cache_dir=self.store.local_dir("wids-cache"),
            )

    def get(self, key: str) -> Pair:
        sample = self.ds[self.position[key]]
        # With no transformations wids hands each member over as a BytesIO of its bytes.
        return sample[".bin"].getvalue(), sample[".json"].getvalue()

    def get_many(self, keys: list[str]) -> list[Pair]:
        # wids has no batch call: sorted positions read in file order, results put back in order.
        found: dict[str, Pair] = {}
        for key in sorted(keys, key=self.position.__getitem__):
            sample = self.ds[self.position[key]]
            found[key] = (sample[".bin"].getvalue(), sample[".json"].getvalue())
        return [found[k] for k in keys]

    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        import webdataset as wds

        for sample in wds.WebDataset(self.urls, shardshuffle=False, empty_check=False):
            yield sample["__key__"], sample["bin"], sample["json"]
