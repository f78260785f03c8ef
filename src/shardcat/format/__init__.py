"""The shard file format: pure bytes in, bytes out. Knows nothing of SQL or Dask.

See docs/FORMAT.md for the specification. :func:`record_codec` names the
record codec in use (``"compiled"`` or ``"python"``; ``SHARDCAT_RECORD_CODEC``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from . import recordcodec  # sets the compiled codec up: its functions need it from here on

if TYPE_CHECKING:
    from .entries import Entry, Record, decode_value, encode_value
    from .footer import EntrySpec, Footer
    from .header import Header, Trailer
    from .info import ShardInfo
    from .reader import ShardReader
    from .sink import FileSink, ShardSink
    from .sources import BytesSource, FileSource
    from .spec import FORMAT_VERSION, HEADER_MAGIC, TRAILER_MAGIC, Codec
    from .stream import iter_partial
    from .verify import VerifyReport
    from .writer import ShardWriter

__all__ = [
    "FORMAT_VERSION",
    "HEADER_MAGIC",
    "TRAILER_MAGIC",
    "BytesSource",
    "Codec",
    "Entry",
    "EntrySpec",
    "FileSink",
    "FileSource",
    "Footer",
    "Header",
    "Record",
    "ShardInfo",
    "ShardReader",
    "ShardSink",
    "ShardWriter",
    "Trailer",
    "VerifyReport",
    "decode_value",
    "encode_value",
    "iter_partial",
    "record_codec",
]

# Each name loads its module on first use: numpy and the codecs load with the
# modules that need them, so a lookup's path (entries, records, checksums)
# does not pay for the writer, the verifier or the streaming reader.
_LAZY = {
    "Entry": (".entries", "Entry"),
    "Record": (".entries", "Record"),
    "decode_value": (".entries", "decode_value"),
    "encode_value": (".entries", "encode_value"),
    "EntrySpec": (".footer", "EntrySpec"),
    "Footer": (".footer", "Footer"),
    "Header": (".header", "Header"),
    "Trailer": (".header", "Trailer"),
    "ShardInfo": (".info", "ShardInfo"),
    "ShardReader": (".reader", "ShardReader"),
    "FileSink": (".sink", "FileSink"),
    "ShardSink": (".sink", "ShardSink"),
    "BytesSource": (".sources", "BytesSource"),
    "FileSource": (".sources", "FileSource"),
    "Codec": (".spec", "Codec"),
    "FORMAT_VERSION": (".spec", "FORMAT_VERSION"),
    "HEADER_MAGIC": (".spec", "HEADER_MAGIC"),
    "TRAILER_MAGIC": (".spec", "TRAILER_MAGIC"),
    "iter_partial": (".stream", "iter_partial"),
    "VerifyReport": (".verify", "VerifyReport"),
    "ShardWriter": (".writer", "ShardWriter"),
}


record_codec = recordcodec.active
__getattr__ = lazy_names(__name__, _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
