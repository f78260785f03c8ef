"""Regenerate the golden shards of the current format version (run only on purpose).

Golden files pin the exact bytes a format version produces: a reader must
read every golden file of every version it supports, and the writer must
reproduce the current version's files byte for byte.

    .venv/bin/python tests/data/golden/make_golden.py
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from shardcat.format import Entry, ShardWriter

CLOCK_NS = 1_700_000_000_000_000_000
FILE_ID = bytes(range(16))


def golden_samples() -> list[tuple[str, dict]]:
    return [
        ("cat/0001", {"txt": "meow", "json": {"label": 3}}),
        (
            "dog/0002",
            {
                "jpg": b"\xff\xd8\xff\xe0fake-jpeg\xff\xd9",
                "npy": np.arange(6, dtype="<i4").reshape(2, 3),
            },
        ),
        ("ключ/🐟", {"bin": Entry(bytes(range(200)) * 3, "application/octet-stream", "zstd")}),
        ("lz4/0004", {"log": Entry(b"line\n" * 100, "text/plain", "lz4")}),
        ("empty/0005", {}),
    ]


def write(alignment: int, compression: str | None) -> bytes:
    buf = io.BytesIO()
    with ShardWriter(
        buf,
        metadata={"dataset": "golden", "note": "format v1 golden file"},
        compression=compression,
        alignment=alignment,
        shard_number=7,
        clock=lambda: CLOCK_NS,
        file_id=FILE_ID,
    ) as w:
        for key, entries in golden_samples():
            w.add(key, entries)
    return buf.getvalue()


CASES = {"basic-a64.shard": (64, None), "zstd-a8.shard": (8, "zstd"), "a256.shard": (256, None)}

if __name__ == "__main__":
    here = Path(__file__).parent / "v1"
    for name, (alignment, compression) in CASES.items():
        (here / name).write_bytes(write(alignment, compression))
        print("wrote", here / name)
