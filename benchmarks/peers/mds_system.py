"""MosaicML Streaming (MDS): ``MDSWriter`` writes 64 MB shards, ``StreamingDataset`` reads them.

Where it imports: ``mosaicml-streaming`` 0.13.0 (its latest release) pins
``numpy<2.2`` and ``xxhash<4``, which conflict with the project's constraints
(numpy 2.4, xxhash 4.1), and imports ``torchvision`` at import time, whose
PyPI wheel needs the CUDA build of torch (the project pins the CPU one). It
is therefore not part of the ``bench`` extra, and the report says it was
skipped unless it imports in the running environment.
"""

from __future__ import annotations

from collections.abc import Iterator

from benchmarks.peers.base import SHARD_BYTES, Pair, System


class MosaicStreaming(System):
    name = "mosaicml-streaming"
    distributions = ("mosaicml-streaming",)
    backends = ("local",)

    @classmethod
    def available(cls) -> str | None:
        try:
            import streaming  # noqa: F401
        except Exception as e:  # ImportError, or torchvision's RuntimeError on a CPU torch
            return (
                "not installed from the bench extra: mosaicml-streaming 0.13.0 requires "
                "numpy<2.2 and xxhash<4 (the project pins numpy 2.4.6, xxhash 4.1.0) and imports "
                "torchvision, whose PyPI wheel needs CUDA torch (the project pins torch 2.13.0+cpu); "
                f"import failed here with {type(e).__name__}: {str(e)[:120]}"
            )
        return None

    def write(self) -> None:
        from streaming import MDSWriter

        columns = {"key": "str", "payload": "bytes", "label": "bytes"}
        with MDSWriter(out=self.root, columns=columns, size_limit=SHARD_BYTES) as out:
            for s in self.dataset:
                out.write({"key": s.key, "payload": s.payload, "label": s.label})
        self.position = {self.dataset.key(i): n for n, i in enumerate(self.dataset.order)}

    def open(self) -> None:
        from streaming import StreamingDataset

        self.notes.append("by position with an in-memory key -> position map (its best case)")
        self.ds = StreamingDataset(local=self.root, shuffle=False, batch_size=1)

    def get(self, key: str) -> Pair:
        item = self.ds.get_item(self.position[key])
        return item["payload"], item["label"]

    def get_many(self, keys: list[str]) -> list[Pair]:
        found: dict[str, Pair] = {}
        for key in sorted(keys, key=self.position.__getitem__):
            item = self.ds.get_item(self.position[key])
            found[key] = (item["payload"], item["label"])
        return [found[k] for k in keys]

    def stream(self) -> Iterator[tuple[str, bytes | memoryview, bytes | memoryview]]:
        for item in self.ds:
            yield item["key"], item["payload"], item["label"]
