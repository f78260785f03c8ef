"""Epochs of a packed dataset in this process, for callgrind (instructions per epoch).

    python benchmarks/shuffled_epoch.py ROOT write            # bench_readers' dataset, once
    valgrind --tool=callgrind python benchmarks/shuffled_epoch.py ROOT direct 256 1
    valgrind --tool=callgrind python benchmarks/shuffled_epoch.py ROOT direct 256 0

The second run's instructions less the third's are one epoch's (``direct``: straight from
shard bytes where it applies; ``records``: ``direct=False``). A fifth argument sets the
shuffle buffer (default 1000; ``1``: shards shuffled, samples in file order).
"""

from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_readers import write
from shardcat.torch import ShardIterableDataset, pack_samples


def main() -> None:
    root, mode = sys.argv[1], sys.argv[2]
    if mode == "write":
        write(root, 20000, 16, 4)
        return
    batch, epochs = int(sys.argv[3]), int(sys.argv[4])
    buffer = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    ds = ShardIterableDataset(
        f"sqlite:///{root}/catalog.db",
        "bench",
        shuffle=True,
        shuffle_buffer=buffer,
        batch_size=batch,
        collate=pack_samples,
    )
    ds.stream = dataclasses.replace(ds.stream, direct=mode == "direct")
    print(sum(len(b) for _ in range(epochs) for b in ds))


if __name__ == "__main__":
    main()
