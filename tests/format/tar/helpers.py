"""Reading tars two ways: through webdataset itself, and through shardcat's scanner and lookup path."""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Iterable
from typing import Any

from shardcat.format import BytesSource
from shardcat.format.tar import TarShardInfo, read_tar_sample, scan_tar


def shardcat_samples(source: Any, info: TarShardInfo) -> list[dict[str, Any]]:
    """Every sample read back the lookup way: one ranged read each, CRCs checked."""
    out = []
    for i in range(info.record_count):
        record = read_tar_sample(source, info, i)
        out.append({"__key__": record.key, **{n: e.data for n, e in record.entries.items()}})
    return out


def scan_bytes(data: bytes, **kwargs: Any) -> TarShardInfo:
    return scan_tar(io.BytesIO(data), "mem.tar", **kwargs)


def read_back(data: bytes, **kwargs: Any) -> list[dict[str, Any]]:
    """Scan tar bytes, then read every sample through the lookup path."""
    return shardcat_samples(BytesSource(data, "mem.tar"), scan_bytes(data, **kwargs))


def make_tar(
    members: Iterable[tuple[str, bytes]],
    *,
    fmt: int = tarfile.PAX_FORMAT,
    extra: Iterable[tarfile.TarInfo] = (),
) -> bytes:
    """A tar written by Python's tarfile: regular files, then ``extra`` non-file members."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for info in extra:
            tar.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def random_samples_tar(seed: int, samples: int) -> bytes:
    """A tar of ``samples`` samples (``jpg`` + ``cls``) of 0-3,000 random bytes each."""
    rng = random.Random(seed)
    return make_tar(
        (f"s/{i:04d}.{ext}", rng.randbytes(rng.randrange(0, 3000)))
        for i in range(samples)
        for ext in ("jpg", "cls")
    )


def summary_fields(info: TarShardInfo) -> tuple[Any, ...]:
    """What two scans of the same tar must agree on, as one comparable tuple."""
    return (
        info.keys,
        info.records.tobytes(),
        info.entries.tobytes(),
        info.size,
        info.end_offset,
        info.member_count,
    )


def error_fields(err: BaseException) -> tuple[type, str, Any, Any]:
    """An error's type, message, path and offset: what two walks must raise alike."""
    return type(err), str(err), getattr(err, "path", None), getattr(err, "offset", None)
