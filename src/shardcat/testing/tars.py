"""Tars for tests: written by webdataset itself, and read back the way webdataset reads them.

Shared by the format, catalog and orchestration tests of tar shards (and
usable by anyone checking that shardcat serves what webdataset would).
``webdataset`` is imported when a function is called (a test dependency).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

__all__ = ["record_as_sample", "tar_samples", "wds_samples", "write_wds_tar"]


def wds_samples(stream: Any, url: str = "test.tar") -> list[dict[str, Any]]:
    """Samples as webdataset's own tar reader groups them: ``{"__key__": ..., name: bytes}``.

    ``stream`` is an open binary file, or a local path.
    """
    from webdataset.tariterators import group_by_keys, tar_file_expander

    if isinstance(stream, (str, os.PathLike)):
        with open(stream, "rb") as f:
            return wds_samples(f, os.fspath(stream))
    out = []
    for sample in group_by_keys(tar_file_expander([{"url": url, "stream": stream}])):
        out.append({k: v for k, v in sample.items() if k == "__key__" or not k.startswith("__")})
    return out


def tar_samples(n: int, seed: int = 0, prefix: str = "part") -> list[dict[str, Any]]:
    """``n`` WebDataset-style samples (``jpg``, ``cls``, ``json``, some ``seg.png``) in 3 folders."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n):
        sample: dict[str, Any] = {
            "__key__": f"{prefix}{i % 3}/sample{i:05d}",
            "jpg": rng.randbytes(rng.randrange(0, 3000)),
            "cls": str(i % 10),
            "json": json.dumps({"i": i}),
        }
        if i % 4 == 0:
            sample["seg.png"] = rng.randbytes(rng.randrange(1, 700))
        out.append(sample)
    return out


def write_wds_tar(
    path: str | os.PathLike[str], n: int = 40, seed: int = 0, prefix: str = "s"
) -> Any:
    """Write ``n`` samples (``jpg``, ``cls``, ``json``, every 4th a ``seg.png``) with webdataset's TarWriter."""
    import webdataset as wds

    with wds.TarWriter(os.fspath(path)) as sink:
        for s in tar_samples(n, seed, prefix):
            sink.write(s)
    return path


def record_as_sample(record: Any) -> dict[str, Any]:
    """A :class:`~shardcat.format.Record` as webdataset's sample dict (entry bytes, no decoding)."""
    return {"__key__": record.key, **{n: bytes(e.data) for n, e in record.entries.items()}}
