"""The shard file layout, declared once. docs/FORMAT.md is the prose spec.

::

    offset 0                                                         EOF
    ┌────────┬──────────┬──────────┬─────┬──────────┬────────────────┬─────────┐
    │ header │ record 0 │ record 1 │ ... │ record   │ footer         │ trailer │
    │  64 B  │          │          │     │   N-1    │ rows, entries, │  64 B   │
    │        │          │          │     │          │ keys, metadata │         │
    └────────┴──────────┴──────────┴─────┴──────────┴────────────────┴─────────┘
             ▲ every record starts on an `alignment` boundary        ▲ ends in
             └ data region [64, footer_offset): covered by data_crc    TRAILER_MAGIC

    record:
    ┌───────────┬───────────────────┬─────┬──────┬─────────┬─────┬─────────┬─────┐
    │ head 32 B │ entry descriptors │ key │ names│ pad → A │ p0  │ pad → A │ p1 …│
    │           │ 32 B × n          │     │types │         │     │         │     │
    └───────────┴───────────────────┴─────┴──────┴─────────┴─────┴─────────┴─────┘
    └──────────── head_crc covers bytes 8 .. head_length ────┘ each payload has
                                                              its own CRC32C

All integers are little-endian. CRCs are CRC32C (Castagnoli). Key hashes are
xxHash64 (seed 0) of the key's UTF-8 bytes.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    # Built on first use from their fields below (``__getattr__``).
    HEADER_DTYPE: np.dtype
    RECORD_HEAD_DTYPE: np.dtype
    ENTRY_DESC_DTYPE: np.dtype
    RECORD_ROW_DTYPE: np.dtype
    ENTRY_ROW_DTYPE: np.dtype
    TRAILER_DTYPE: np.dtype
    BATCH_ROW_DTYPE: np.dtype

__all__ = [
    "ALIGNMENTS",
    "BATCH_ROW_DTYPE",
    "CREATED_US_MAX",
    "CREATED_US_MIN",
    "DEFAULT_ALIGNMENT",
    "ENTRY_DESC_DTYPE",
    "ENTRY_DESC_STRUCT",
    "ENTRY_ROW_DTYPE",
    "FORMAT_VERSION",
    "HEADER_DTYPE",
    "HEADER_MAGIC",
    "HEADER_SIZE",
    "HEADER_STRUCT",
    "MAX_ENTRIES",
    "MAX_KEY_BYTES",
    "MAX_METADATA_DEPTH",
    "MAX_NAME_BYTES",
    "NO_SHARD_NUMBER",
    "RECORD_HEAD_DTYPE",
    "RECORD_HEAD_STRUCT",
    "RECORD_ROW_DTYPE",
    "RECORD_TAG",
    "TAIL_READ_SIZE",
    "TRAILER_DTYPE",
    "TRAILER_MAGIC",
    "TRAILER_SIZE",
    "TRAILER_STRUCT",
    "Codec",
    "align_up",
    "data_start",
    "footer_layout",
    "struct_of",
]

# PNG-style: a high-bit byte (not text), a readable name, CR LF (caught by
# line-ending conversion), ^Z (stops DOS `type`), LF (caught by LF -> CRLF).
HEADER_MAGIC = b"\x89SCT\r\n\x1a\n"
TRAILER_MAGIC = b"\x89SCX\r\n\x1a\n"
RECORD_TAG = b"REC\x00"

FORMAT_VERSION = (1, 0)
"""(major, minor) written by this library. Readers accept any minor of major 1."""

HEADER_SIZE = 64
TRAILER_SIZE = 64
DEFAULT_ALIGNMENT = 64
ALIGNMENTS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
TAIL_READ_SIZE = 64 * 1024
"""Bytes read speculatively from the end of a shard when opening it."""

NO_SHARD_NUMBER = -1
MAX_KEY_BYTES = 0xFFFF
MAX_NAME_BYTES = 0xFFFF
MAX_ENTRIES = 0xFFFF
MAX_ENTRY_SPECS = 0xFFFF
MAX_METADATA_BYTES = 0xFFFF_FFFF
MAX_METADATA_DEPTH = 64
"""Deepest nesting of arrays and objects in the footer's metadata JSON (the top object is 1)."""

# The range of ``created_us`` that readers report: 0001-01-02 to 9999-12-30 (UTC),
# the calendar range of Python and SQL timestamps less a day at each end, so the
# value stays a valid date in every time zone. Values outside are clamped. Both
# ends are whole seconds, exact as floating-point seconds too.
CREATED_US_MIN = -62_135_510_400_000_000
"""0001-01-02T00:00:00Z in microseconds since the Unix epoch."""
CREATED_US_MAX = 253_402_214_399_000_000
"""9999-12-30T23:59:59Z in microseconds since the Unix epoch."""


class Codec(IntEnum):
    """How an entry's payload is encoded on disk."""

    NONE = 0
    ZSTD = 1
    LZ4 = 2

    @property
    def label(self) -> str:
        return str(self.name).lower()

    @property
    def known(self) -> bool:
        return self.name in type(self).__members__

    @classmethod
    def _missing_(cls, value: object) -> Codec | None:
        # A codec added by a newer minor version: entries using it fail to
        # decode with a clear error, the rest of the shard stays readable.
        if isinstance(value, int) and 0 <= value <= 255:
            return cls._unknown(value, f"codec_{value}")
        return None

    @classmethod
    def _unknown(cls, value: int, label: str) -> Codec:
        member = int.__new__(cls, value)
        member._name_ = label.upper()
        member._value_ = value
        return member

    @classmethod
    def from_label(cls, label: str) -> Codec:
        """The codec stored under ``label`` in a footer; unknown labels are kept, not rejected."""
        try:
            return cls[label.upper()]
        except KeyError:
            return cls._unknown(255, label)

    @classmethod
    def parse(cls, value: str | int | Codec | None) -> Codec:
        if value is None:
            return cls.NONE
        if isinstance(value, Codec):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.upper()]
        except KeyError:
            choices = ", ".join(c.label for c in cls)
            raise ValueError(f"unknown compression {value!r}; choose one of {choices}") from None


# Each layout below is declared once, as the fields of a packed little-endian
# numpy record dtype (``NAME_DTYPE``), built on first use: reading a record
# by key needs none of them, nor numpy (about a tenth of a CLI call's time).
_FIELDS: dict[str, list[tuple[str, str]]] = {}
_SIZES: dict[str, int] = {}

# --- header: the first 64 bytes ------------------------------------------
_FIELDS["HEADER_DTYPE"] = [
    ("magic", "S8"),  # 0   HEADER_MAGIC
    ("version_major", "<u2"),  # 8   incompatible layout changes
    ("version_minor", "<u2"),  # 10  compatible additions
    ("flags", "<u4"),  # 12  informational bits; unknown bits ignored
    ("created_us", "<i8"),  # 16  writer's clock at open, µs since the Unix epoch (UTC)
    ("file_id", "V16"),  # 24  random UUID; the trailer names it through header_crc
    ("shard_number", "<i8"),  # 40  position in the dataset, NO_SHARD_NUMBER if none
    ("alignment", "<u4"),  # 48  records and payloads start on multiples of this
    ("default_codec", "u1"),  # 52  the writer's compression setting (Codec)
    ("reserved", "V7"),  # 53  zero when written, ignored when read
    ("header_crc", "<u4"),  # 60  CRC32C of bytes 0..60
]
_SIZES["HEADER_DTYPE"] = HEADER_SIZE

# --- record head: the first 32 bytes of every record ---------------------
_FIELDS["RECORD_HEAD_DTYPE"] = [
    ("tag", "S4"),  # 0   RECORD_TAG
    ("head_crc", "<u4"),  # 4   CRC32C of bytes 8..head_length of the record
    ("record_length", "<u8"),  # 8   whole record incl. padding; a multiple of alignment
    ("key_hash", "<u8"),  # 16  xxh64(key)
    ("head_length", "<u4"),  # 24  bytes before the first payload; a multiple of alignment
    ("key_length", "<u2"),  # 28  UTF-8 bytes of the key
    ("entry_count", "<u2"),  # 30  number of entry descriptors that follow
]
_SIZES["RECORD_HEAD_DTYPE"] = 32

# --- entry descriptor: one per entry, right after the record head --------
_FIELDS["ENTRY_DESC_DTYPE"] = [
    ("payload_offset", "<u8"),  # 0   from the record's first byte; aligned
    ("stored_size", "<u8"),  # 8   payload bytes on disk (after compression)
    ("payload_crc", "<u4"),  # 16  CRC32C of the stored payload
    ("name_length", "<u2"),  # 20  UTF-8 bytes of the entry name
    ("type_length", "<u2"),  # 22  ASCII bytes of the content type
    ("codec", "u1"),  # 24  Codec
    ("reserved", "V7"),  # 25  zero when written, ignored when read
]
_SIZES["ENTRY_DESC_DTYPE"] = 32

# --- footer: record rows, then entry rows, keys, metadata JSON -----------
_FIELDS["RECORD_ROW_DTYPE"] = [
    ("offset", "<u8"),  # 0   record's first byte in the file
    ("length", "<u8"),  # 8   record_length
    ("key_hash", "<u8"),  # 16  xxh64(key)
    ("key_length", "<u2"),  # 24  key bytes in the keys blob (keys are concatenated)
    ("entry_count", "<u2"),  # 26  entry rows of this record (rows are concatenated)
    ("reserved", "V4"),  # 28  zero when written, ignored when read
]
_SIZES["RECORD_ROW_DTYPE"] = 32

_FIELDS["ENTRY_ROW_DTYPE"] = [
    ("offset", "<u8"),  # 0   payload_offset (relative to the record)
    ("size", "<u8"),  # 8   stored_size
    ("crc", "<u4"),  # 16  payload_crc
    ("spec", "<u2"),  # 20  index into metadata["entry_specs"]: [name, type, codec]
    ("reserved", "V2"),  # 22  zero when written, ignored when read
]
_SIZES["ENTRY_ROW_DTYPE"] = 24

# --- trailer: the last 64 bytes ------------------------------------------
_FIELDS["TRAILER_DTYPE"] = [
    ("footer_offset", "<u8"),  # 0   first byte after the last record
    ("record_count", "<u8"),  # 8
    ("entry_count", "<u8"),  # 16  total entry rows
    ("keys_length", "<u8"),  # 24  bytes of the keys blob
    ("metadata_length", "<u4"),  # 32  bytes of the metadata JSON
    ("data_crc", "<u4"),  # 36  CRC32C of [HEADER_SIZE, footer_offset)
    ("footer_crc", "<u4"),  # 40  CRC32C of [footer_offset, trailer start)
    ("header_crc", "<u4"),  # 44  copy of the header's CRC: binds this footer to its header
    ("version_major", "<u2"),  # 48  same as the header's
    ("version_minor", "<u2"),  # 50
    ("trailer_crc", "<u4"),  # 52  CRC32C of bytes 0..52 of the trailer
    ("magic", "S8"),  # 56  TRAILER_MAGIC: the file's last 8 bytes
]
_SIZES["TRAILER_DTYPE"] = TRAILER_SIZE


# --- batch read plan: where each record of a batched read lies -----------
# Not in the file: the in-memory table a batch of indexed reads hands the
# record codec's batch decoder (``decode_batch``), one row per record, in
# read order. The compiled codec reads these rows by offset (format/ccodec/batch.c).
_FIELDS["BATCH_ROW_DTYPE"] = [
    ("blob", "<u4"),  # 0   which read buffer holds the record
    ("shard", "<u4"),  # 4   which file: index into the batch's paths and alignments
    ("row", "<u4"),  # 8   which asked-for record: index into keys, spans and the result
    ("reserved", "<u4"),  # 12  zero
    ("at", "<u8"),  # 16  the record's first byte in its buffer
    ("length", "<u8"),  # 24  record_length, as the index gives it
    ("offset", "<u8"),  # 32  the record's first byte in its file
]
_SIZES["BATCH_ROW_DTYPE"] = 40


def __getattr__(name: str) -> Any:
    fields = _FIELDS.get(name)
    if fields is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import numpy as np

    dtype = np.dtype(fields)
    assert dtype.itemsize == _SIZES[name], name
    globals()[name] = dtype  # the next access skips this function
    return dtype


def struct_of(layout: np.dtype | list[tuple[str, str]]) -> struct.Struct:
    """The ``struct`` codec of a packed little-endian record layout: a numpy dtype or its fields.

    The layouts above are the single declaration of each structure; hot paths
    that handle one structure at a time use this derived codec, which is
    several times faster than a numpy scalar for a single record.
    """
    codes = {"u1": "B", "u2": "H", "u4": "I", "u8": "Q", "i1": "b", "i2": "h", "i4": "i", "i8": "q"}
    fields = layout if isinstance(layout, list) else layout.descr
    fmt = ["<"]
    for name, code, *shape in fields:
        # A dtype's descr names a gap '' (and big-endian fields '>'): neither is packed.
        kind, order = code.lstrip("<|"), code[0]
        if not name or order == ">" or shape:
            raise TypeError(f"{code} at field {name!r}: not a packed little-endian layout")
        size = int(kind[1:])
        fmt.append(f"{size}s" if kind[0] in "SV" else codes[f"{kind[0]}{size}"])
    return struct.Struct("".join(fmt))


HEADER_STRUCT = struct_of(_FIELDS["HEADER_DTYPE"])
RECORD_HEAD_STRUCT = struct_of(_FIELDS["RECORD_HEAD_DTYPE"])
ENTRY_DESC_STRUCT = struct_of(_FIELDS["ENTRY_DESC_DTYPE"])
TRAILER_STRUCT = struct_of(_FIELDS["TRAILER_DTYPE"])
for _name, _codec in (
    ("HEADER_DTYPE", HEADER_STRUCT),
    ("RECORD_HEAD_DTYPE", RECORD_HEAD_STRUCT),
    ("ENTRY_DESC_DTYPE", ENTRY_DESC_STRUCT),
    ("TRAILER_DTYPE", TRAILER_STRUCT),
):
    assert _codec.size == _SIZES[_name], _name


def align_up(n: int, alignment: int) -> int:
    """Round ``n`` up to a multiple of ``alignment`` (a power of two)."""
    return (n + alignment - 1) & ~(alignment - 1)


def data_start(alignment: int) -> int:
    """Where the first record starts: right after the header, rounded up to the alignment."""
    return align_up(HEADER_SIZE, alignment)


MAX_DATA_START = align_up(HEADER_SIZE, ALIGNMENTS[-1])


def footer_layout(
    record_count: int, entry_count: int, keys_length: int, metadata_length: int
) -> tuple[int, int, int, int, int]:
    """Relative offsets (entries, keys, metadata, padding, total) of the footer's parts."""
    entries_at = record_count * _SIZES["RECORD_ROW_DTYPE"]
    keys_at = entries_at + entry_count * _SIZES["ENTRY_ROW_DTYPE"]
    meta_at = keys_at + keys_length
    pad_at = meta_at + metadata_length
    return entries_at, keys_at, meta_at, pad_at, align_up(pad_at, 8)
