"""Entry compression: none, zstd, lz4 (frame format); decompression is bounded.

zstandard and lz4 are optional (``pip install 'shardcat[compression]'``);
they are imported when a payload first needs them.

A payload's CRC only proves that its bytes are the ones written, not that
they are safe to decompress: a crafted frame can declare or produce any
size. So a frame is decompressed only if its header declares its content
size (shardcat's writer always records it), the size is at most
:func:`max_decompressed_bytes` (``SHARDCAT_MAX_DECOMPRESSED_BYTES``, 1 GiB
by default), and the frame then yields exactly that many bytes, never more.
Every failure is a :class:`~shardcat.errors.FormatError` naming the entry.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from .. import config
from .._units import format_bytes, parse_size
from ..errors import CodecUnavailableError, DecompressionLimitError, FormatError
from .spec import Codec

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "INCOMPRESSIBLE_TYPES",
    "MAX_DECOMPRESSED_ENV",
    "check_frame",
    "compress",
    "declared_size",
    "decompress",
    "max_decompressed_bytes",
    "should_compress",
]

MAX_DECOMPRESSED_ENV = config.env_var("max_decompressed_bytes")
"""Environment variable: the largest entry (decompressed) a reader accepts, e.g. ``4GiB``."""
DEFAULT_MAX_DECOMPRESSED_BYTES = 1 << 30
"""1 GiB: the limit when ``SHARDCAT_MAX_DECOMPRESSED_BYTES`` is not set."""

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

_ZSTD = Codec.ZSTD
_LZ4 = Codec.LZ4
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
# A frame is decompressed in one call into a buffer of its declared size when
# that size is small, or plausible for its compressed size; otherwise in chunks,
# so a frame that declares much more than it holds costs only what it produces.
_ONE_SHOT_BYTES = 32 << 20
_ONE_SHOT_RATIO = 32
_CHUNK = 8 << 20

_local = threading.local()
_modules: dict[str, Any] = {}
_parsed_limits: dict[str, int] = {}


def max_decompressed_bytes() -> int:
    """The largest decompressed entry this process reads (and its writers compress).

    The ``max_decompressed_bytes`` setting (``SHARDCAT_MAX_DECOMPRESSED_BYTES``:
    bytes, or a size such as ``"4GiB"``; 1 GiB by default), read on every
    call, so that :func:`shardcat.config.set` changes it at run time.

    Raises
    ------
    ValueError
        The setting is not a positive size.
    """
    raw = config.get("max_decompressed_bytes")
    if not raw and raw != 0:
        return DEFAULT_MAX_DECOMPRESSED_BYTES
    limit = _parsed_limits.get(raw)
    if limit is None:
        try:
            limit = parse_size(int(raw) if isinstance(raw, str) and raw.strip().isdigit() else raw)
        except ValueError as e:
            raise ValueError(
                f"{MAX_DECOMPRESSED_ENV}={raw!r} is not a size: {e} (write e.g. 4GiB or 4294967296)"
            ) from None
        _parsed_limits[raw] = limit
    return limit


def _require(module: str, codec: Codec) -> Any:
    # Cached: __import__ with a fromlist costs tens of microseconds on every call.
    found = _modules.get(module)
    if found is not None:
        return found
    try:
        found = _modules[module] = importlib.import_module(module)
    except ImportError as e:
        raise CodecUnavailableError(
            f"entries compressed with {codec.label} need the {module!r} package: "
            "pip install 'shardcat[compression]'"
        ) from e
    return found


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


# --- frame headers ----------------------------------------------------------------


def declared_size(data: bytes | memoryview, codec: Codec) -> int | None:
    """The content size a zstd or LZ4 frame header declares; None if it declares none.

    Parsed from the frame header alone (RFC 8878 section 3.1.1; the LZ4 frame
    format), without the codec's library.

    Raises
    ------
    ValueError
        ``data`` does not start with a frame header of this codec.
    """
    head = bytes(data[:18])
    if codec is _ZSTD:
        if head[:4] != _ZSTD_MAGIC or len(head) < 6:
            raise ValueError(f"not a zstd frame (it starts with {head[:8].hex(' ')})")
        fhd = head[4]
        if fhd & 0x08:
            raise ValueError("the zstd frame header has its reserved bit set")
        single_segment = fhd & 0x20
        at = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[fhd & 3]
        width = (1 if single_segment else 0, 2, 4, 8)[fhd >> 6]
        if not width:
            return None
        if len(head) < at + width:
            raise ValueError("the zstd frame header is cut short")
        size = int.from_bytes(head[at : at + width], "little")
        return size + 256 if width == 2 else size
    if codec is _LZ4:
        if head[:4] != _LZ4_MAGIC or len(head) < 7:
            raise ValueError(f"not an LZ4 frame (it starts with {head[:8].hex(' ')})")
        flg = head[4]
        if flg >> 6 != 1:
            raise ValueError(f"unsupported LZ4 frame version {flg >> 6}")
        if not flg & 0x08:
            return None
        if len(head) < 15:
            raise ValueError("the LZ4 frame header is cut short")
        return int.from_bytes(head[6:14], "little")
    raise ValueError(f"{codec.label!r} payloads have no frame header")


def _where(name: str | None) -> str:
    return f"entry {name!r}" if name is not None else "entry"


def check_frame(
    data: bytes | memoryview,
    codec: Codec,
    *,
    name: str | None = None,
    path: str | None = None,
    offset: int | None = None,
) -> int:
    """Check a compressed payload's frame header; return the size it declares.

    What :func:`decompress` checks before it allocates anything: the header
    parses, declares the content size, and the size is within the limit.
    An LZ4 frame without a size is accepted only if it has no blocks at all
    (declaring 0), since LZ4 leaves the size out for empty input.

    Raises
    ------
    FormatError
        Not a frame of this codec, or it does not declare its size.
    DecompressionLimitError
        It declares more than :func:`max_decompressed_bytes`.
    CodecUnavailableError
        The codec is one this version of shardcat does not know.
    """
    if codec is not _ZSTD and codec is not _LZ4 and not codec.known:
        raise CodecUnavailableError(
            f"{path + ': ' if path else ''}{_where(name)} is compressed with {codec.label!r}, which "
            "this version of shardcat does not know; upgrade shardcat to read it (the shard's "
            "other entries are readable)"
        )
    try:
        size = declared_size(data, codec)
    except ValueError as e:
        raise FormatError(
            f"{_where(name)} cannot be decompressed: {e}; the payload matches its CRC, so it was "
            "written this way: the shard was altered or not written by shardcat",
            path=path,
            offset=offset,
        ) from e
    if size is None:
        if codec is Codec.LZ4 and _is_empty_lz4(data):
            return 0
        raise FormatError(
            f"{_where(name)}: its {codec.label} frame does not declare its decompressed size, so "
            "it cannot be decompressed safely (shardcat's writer always records it); the shard "
            "was altered or not written by shardcat",
            path=path,
            offset=offset,
        )
    limit = max_decompressed_bytes()
    if size > limit:
        raise DecompressionLimitError(
            f"{_where(name)} declares {size:,} bytes ({format_bytes(size)}) when decompressed, "
            f"more than the limit of {limit:,} bytes ({format_bytes(limit)}); if the shard is "
            f"trusted, raise the limit with the environment variable {MAX_DECOMPRESSED_ENV} "
            f"(e.g. {MAX_DECOMPRESSED_ENV}={_suggest(size)})",
            path=path,
            offset=offset,
        )
    return size


def _is_empty_lz4(frame: bytes | memoryview) -> bool:
    """An LZ4 frame with no blocks: the header, the end mark, maybe a content checksum."""
    flg = frame[4]
    end = 7 + (4 if flg & 0x01 else 0)  # magic, FLG, BD, [dictionary id], HC
    return bytes(frame[end : end + 4]) == bytes(4) and len(frame) == end + 4 + (
        4 if flg & 0x04 else 0
    )


def _suggest(size: int) -> str:
    gib = -(-size // (1 << 30))
    return f"{gib}GiB"


# --- decompression -----------------------------------------------------------------


def decompress(
    data: bytes | memoryview,
    codec: Codec,
    *,
    name: str | None = None,
    path: str | None = None,
    offset: int | None = None,
) -> bytes:
    """Decompress one payload into exactly the size its frame declares.

    ``name``, ``path`` and ``offset`` (of the payload in the file) go into
    error messages.

    Raises
    ------
    FormatError
        The frame is damaged, does not declare its size, holds data after the
        frame, or decompresses to another size than it declares (the codec
        library's own error is chained).
    DecompressionLimitError
        The declared size is above :func:`max_decompressed_bytes`; nothing was
        allocated.
    CodecUnavailableError
        The codec is unknown, or its library is not installed.
    """
    size = check_frame(data, codec, name=name, path=path, offset=offset)
    one_shot = size <= _ONE_SHOT_BYTES or size <= _ONE_SHOT_RATIO * len(data)
    lib = _require("zstandard" if codec is _ZSTD else "lz4.frame", codec)
    library_error = lib.ZstdError if codec is _ZSTD else RuntimeError  # lz4 raises RuntimeError
    try:
        if codec is _ZSTD:
            out = _zstd_one_shot(data, size) if one_shot else _zstd_chunked(data, size)
        else:
            out = _lz4(data, size, size if one_shot else _CHUNK)
    except _SizeMismatch as e:
        raise FormatError(
            f"{_where(name)}: its {codec.label} frame {e}; the payload matches its CRC, so "
            "it was written this way: the shard was altered or not written by shardcat",
            path=path,
            offset=offset,
        ) from None
    except (library_error, ValueError) as e:
        raise FormatError(
            f"{_where(name)} cannot be decompressed with {codec.label}: {e}; the payload matches "
            "its CRC, so it was written this way: the shard was altered or not written by shardcat",
            path=path,
            offset=offset,
        ) from e
    return out


class _SizeMismatch(Exception):
    """A frame produced another amount of data than its header declares."""


def _zstd_one_shot(data: bytes | memoryview, size: int) -> bytes:
    # zstd allocates exactly the declared size, fails if the frame needs more
    # room, and checks that the frame filled it; extra data after it is refused.
    out: bytes = _zstd_decompressor().decompress(data, allow_extra_data=False)
    if len(out) != size:  # defence in depth: the library already checks both directions
        raise _SizeMismatch(f"decompresses to {len(out):,} bytes but declares {size:,}")
    return out


def _zstd_chunked(data: bytes | memoryview, size: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    with _zstd_decompressor().stream_reader(data) as reader:
        while True:
            # One byte more than is left: a frame that has more to give lies.
            chunk = reader.read(min(_CHUNK, size - total + 1))
            if not chunk:
                break
            total += len(chunk)
            if total > size:
                raise _SizeMismatch(f"holds more than the {size:,} bytes it declares")
            parts.append(chunk)
    if total != size:
        raise _SizeMismatch(f"decompresses to {total:,} bytes but declares {size:,}")
    return b"".join(parts)


def _lz4(data: bytes | memoryview, size: int, step: int) -> bytes:
    lz4 = _require("lz4.frame", Codec.LZ4)
    d = lz4.LZ4FrameDecompressor()
    parts: list[bytes] = []
    total = 0
    pending: bytes | memoryview = data
    while not d.eof:
        # One byte more than is left: a frame that has more to give lies.
        chunk: bytes = d.decompress(pending, max_length=min(step, size - total) + 1)
        pending = b""
        if not chunk:
            break  # no output and no end mark: the frame is cut short
        total += len(chunk)
        if total > size:
            raise _SizeMismatch(f"holds more than the {size:,} bytes it declares")
        parts.append(chunk)
    if not d.eof:
        raise _SizeMismatch(f"ends before its end mark, after {total:,} bytes")
    if d.unused_data:
        raise _SizeMismatch(f"is followed by {len(d.unused_data):,} bytes that are not part of it")
    if total != size:
        raise _SizeMismatch(f"decompresses to {total:,} bytes but declares {size:,}")
    return parts[0] if len(parts) == 1 else b"".join(parts)  # no copy for one part
