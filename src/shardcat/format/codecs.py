"""Entry compression: none, zstd, lz4 (frame format).

zstandard and lz4 are optional (``pip install 'shardcat[compression]'``);
they are imported when a payload first needs them.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import CodecUnavailableError
from .spec import Codec

__all__ = ["INCOMPRESSIBLE_TYPES", "compress", "decompress", "should_compress"]

# Already-compressed media: compressing again burns CPU for nothing.
INCOMPRESSIBLE_TYPES = frozenset(
    {
        "image/jpeg",
        "image/png",
        "image/webp",
        "image/gif",
        "image/avif",
        "audio/mpeg",
        "audio/ogg",
        "audio/flac",
        "video/mp4",
        "video/webm",
        "application/zip",
        "application/gzip",
        "application/zstd",
        "application/x-xz",
        "application/x-npz",
    }
)

_local = threading.local()


def _require(module: str, codec: Codec) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise CodecUnavailableError(
            f"entries compressed with {codec.label} need the {module!r} package: "
            "pip install 'shardcat[compression]'"
        ) from e


def _zstd_compressor(level: int) -> Any:
    # zstd (de)compressor objects are not thread-safe: keep one per thread.
    cache = getattr(_local, "zc", None)
    if cache is None:
        cache = _local.zc = {}
    c = cache.get(level)
    if c is None:
        zstd = _require("zstandard", Codec.ZSTD)
        c = cache[level] = zstd.ZstdCompressor(level=level)
    return c


def _zstd_decompressor() -> Any:
    d = getattr(_local, "zd", None)
    if d is None:
        zstd = _require("zstandard", Codec.ZSTD)
        d = _local.zd = zstd.ZstdDecompressor()
    return d


def should_compress(content_type: str) -> bool:
    return content_type not in INCOMPRESSIBLE_TYPES and not content_type.startswith("video/")


def compress(data: bytes | memoryview, codec: Codec, level: int | None = None) -> bytes:
    if codec is Codec.ZSTD:
        return _zstd_compressor(3 if level is None else level).compress(data)  # type: ignore[no-any-return]
    if codec is Codec.LZ4:
        lz4 = _require("lz4.frame", codec)
        return lz4.compress(data, compression_level=level or 0, store_size=True)  # type: ignore[no-any-return]
    raise ValueError(f"cannot compress with {codec!r}")


def decompress(data: bytes | memoryview, codec: Codec) -> bytes:
    if not codec.known:
        raise CodecUnavailableError(
            f"entry is compressed with {codec.label!r}, which this version of shardcat does not "
            "know; upgrade shardcat to read it (the shard's other entries are readable)"
        )
    if codec is Codec.ZSTD:
        # The writer uses one-shot compression, which records the content size.
        return _zstd_decompressor().decompress(data)  # type: ignore[no-any-return]
    if codec is Codec.LZ4:
        lz4 = _require("lz4.frame", codec)
        return lz4.decompress(data)  # type: ignore[no-any-return]
    raise ValueError(f"cannot decompress {codec!r}")
