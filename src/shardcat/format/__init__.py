"""The shard file format: pure bytes in, bytes out. Knows nothing of SQL or Dask.

See docs/FORMAT.md for the specification. :func:`record_codec` names the
record codec in use (``"compiled"`` or ``"python"``; ``SHARDCAT_RECORD_CODEC``).
"""

from __future__ import annotations

from .entries import Entry, Record, decode_value, encode_value
from .footer import EntrySpec, Footer
from .header import Header, Trailer
from .info import ShardInfo
from .reader import ShardReader
from .recordcodec import active as record_codec
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
