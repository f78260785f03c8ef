"""MDS shards and LitData chunks indexed in place: one file, an offset table, a sample per range.

MosaicML Streaming's MDS shards and LitData's chunks share one layout::

    u32 n | u32 offsets[n + 1] | (anything) | sample 0 | sample 1 | ...

``offsets`` are absolute: sample ``i`` is ``[offsets[i], offsets[i + 1])``.
A sample starts with a u32 size for each of its columns whose size is not
fixed (MDS: the variable-size ones; LitData: every one), then the columns'
bytes in column order. Where the formats differ (``index.json``, the column
types) is :mod:`.mds` and :mod:`.litdata`; both describe a directory's
files as :class:`ColumnLayout` and :class:`ColumnFile`.

A file is registered like a tar (:class:`ColumnShardInfo`): each sample a
record whose byte range is its range in the file, each column an entry whose
offset, size and CRC32C (computed here, while indexing) its row's spans
hold; a lookup reads the sample's range once and checks every entry.

No IO here: the orchestration reads the file and gives its bytes to
:func:`scan_columns`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import FormatError, TruncatedError
from .checksums import key_hash
from .footer import EntrySpec
from .info import InPlaceShardInfo
from .scatter import crc32c_spans
from .spec import ENTRY_ROW_DTYPE, RECORD_ROW_DTYPE, Codec

__all__ = [
    "Column",
    "ColumnFile",
    "ColumnLayout",
    "ColumnShardInfo",
    "ColumnarError",
    "ColumnarTruncatedError",
    "CompressedShardsError",
    "FileEntry",
    "directory_layout",
    "key_index",
    "scan_columns",
]


class ColumnarError(FormatError):
    """An MDS or LitData directory or file cannot be indexed: damaged, or a layout not supported."""


class ColumnarTruncatedError(ColumnarError, TruncatedError):
    """A shard or chunk file ends before the samples its offset table or ``index.json`` promise."""


class CompressedShardsError(ColumnarError):
    """The directory's shards are compressed: their samples are no byte ranges of a file."""


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a directory's samples, as its ``index.json`` declares it."""

    name: str
    """The entry's name (an MDS column; a LitData leaf's path, ``meta.a``)."""
    encoding: str
    """The library's type (``jpeg``, ``int``, ``ndarray:float32:3``; LitData ``str``)."""
    size: int | None
    """Bytes of every value, or None: each sample's size header gives it."""
    content_type: str
    """What the entry is read as (:func:`shardcat.format.entries.decode_value`)."""
    key_dtype: str | None = None
    """The numpy dtype of a fixed-size integer column (a key is its decimal text), else None."""
    text_key: bool = False
    """Its values are UTF-8 text that can be a key as they are."""


@dataclass(frozen=True, slots=True)
class ColumnLayout:
    """How every sample of a directory's files is laid out."""

    kind: str
    """The catalog's shard kind: ``mds`` or ``litdata``."""
    columns: tuple[Column, ...]
    key_column: int | None = None
    """The column whose value is a sample's key (not an entry); None: the sample's index."""

    @property
    def sized(self) -> list[int]:
        """The columns whose sizes each sample's header holds, in header order."""
        return [j for j, c in enumerate(self.columns) if c.size is None]


@dataclass(frozen=True, slots=True)
class ColumnFile:
    """One file of a directory: where it is, what ``index.json`` says of it."""

    url: str
    samples: int
    first_index: int
    """The directory-wide index of its first sample (files in ``index.json`` order)."""
    size: int | None = None
    """Its size in bytes, where ``index.json`` says (MDS); None where it does not."""


@dataclass(frozen=True, slots=True)
class ColumnShardInfo(InPlaceShardInfo):
    """One MDS shard or LitData chunk as scanned: each sample a record, each column an entry."""

    kind: str = "mds"
    """The catalog's shard kind: ``mds`` or ``litdata``."""
    first_index: int = 0
    """The directory-wide index of its first sample."""


_U32 = np.dtype("<u4")

FileEntry = tuple[str, int, int | None]
"""A file as ``index.json`` lists it: its name in the directory, its samples, its bytes (if said)."""


def directory_layout(
    kind: str,
    columns: tuple[Column, ...],
    entries: Sequence[FileEntry],
    root: str,
    key_column: str | None = None,
) -> tuple[ColumnLayout, list[ColumnFile]]:
    """The layout and files of a directory from what its ``index.json`` lists, files in its order.

    Raises
    ------
    ColumnarError
        ``key_column`` is no column, or not a text or integer one.
    """
    layout = ColumnLayout(kind, columns, key_index(columns, key_column, f"{root}/index.json"))
    files: list[ColumnFile] = []
    first = 0
    for name, samples, size in entries:
        files.append(ColumnFile(f"{root}/{name}", samples, first, size))
        first += samples
    return layout, files


def key_index(columns: Sequence[Column], key_column: str | None, where: str) -> int | None:
    """The position of the key column among ``columns`` (None: keys are sample indices).

    Raises
    ------
    ColumnarError
        No column has that name, or its values cannot be keys (only text and integers can).
    """
    if key_column is None:
        return None
    for j, column in enumerate(columns):
        if column.name == key_column:
            if column.key_dtype is None and not column.text_key:
                raise ColumnarError(
                    f"column {key_column!r} is {column.encoding}: keys come from a text or "
                    "integer column",
                    path=where,
                )
            return j
    names = ", ".join(c.name for c in columns)
    raise ColumnarError(f"no column {key_column!r} (columns: {names})", path=where)


def read_offsets(data: memoryview, file: ColumnFile) -> np.ndarray:
    """The file's offset table (``n + 1`` int64), checked against the file and ``index.json``.

    Raises
    ------
    ColumnarTruncatedError
        The file ends before its table or its last sample.
    ColumnarError
        The table disagrees with ``index.json`` or is not in order.
    """
    url, size = file.url, len(data)
    if file.size is not None and size != file.size:
        cls = ColumnarTruncatedError if size < file.size else ColumnarError
        raise cls(
            f"the file is {size} bytes, index.json says {file.size}: it changed or was cut "
            "short since it was written",
            path=url,
            offset=min(size, file.size),
        )
    if size < 4:
        raise ColumnarTruncatedError(f"{size} bytes: no sample count", path=url, offset=size)
    n = int(np.frombuffer(data, _U32, 1)[0])
    if n != file.samples:
        raise ColumnarError(
            f"the file holds {n} samples, index.json says {file.samples}", path=url, offset=0
        )
    table_end = 4 + 4 * (n + 1)
    if size < table_end:
        raise ColumnarTruncatedError(
            f"{size} bytes: the offset table of {n} samples ends at byte {table_end}",
            path=url,
            offset=size,
        )
    offsets = np.frombuffer(data, _U32, n + 1, 4).astype(np.int64)
    if offsets[0] < table_end or (np.diff(offsets) < 0).any():
        raise ColumnarError(
            "the offset table is not in order (the file is damaged)", path=url, offset=4
        )
    if int(offsets[-1]) > size:
        raise ColumnarTruncatedError(
            f"{size} bytes: its last sample ends at byte {int(offsets[-1])}",
            path=url,
            offset=size,
        )
    return offsets


def scan_columns(
    data: bytes | memoryview,
    file: ColumnFile,
    layout: ColumnLayout,
    shard_number: int | None = None,
) -> ColumnShardInfo:
    """The summary of one file's samples: every column's place, size and CRC32C.

    Raises
    ------
    ColumnarTruncatedError, ColumnarError
        The file is cut short, or a sample's columns do not fill its range
        (the error names the sample's index in the directory).
    """
    view = memoryview(data).cast("B")
    url = file.url
    offsets = read_offsets(view, file)
    starts, lengths = offsets[:-1], np.diff(offsets)
    n, columns = len(starts), layout.columns
    sized = layout.sized
    head = 4 * len(sized)
    short = np.flatnonzero(lengths < head)
    if len(short):
        raise _bad_sample(file, int(short[0]), int(starts[short[0]]), "shorter than its sizes")
    sizes = np.empty((n, len(columns)), dtype=np.int64)
    if sized and n:
        raw = np.frombuffer(view, np.uint8)
        at = starts[:, None] + 4 * np.arange(len(sized))
        sizes[:, sized] = raw[at[..., None] + np.arange(4)].copy().view(_U32)[..., 0]
    for j, column in enumerate(columns):
        if column.size is not None:
            sizes[:, j] = column.size
    ends = head + sizes.sum(axis=1)
    wrong = np.flatnonzero(ends != lengths)
    if len(wrong):
        i = int(wrong[0])
        raise _bad_sample(
            file,
            i,
            int(starts[i]),
            f"its columns take {int(ends[i])} of its {int(lengths[i])} bytes",
        )
    inside = head + np.cumsum(sizes, axis=1) - sizes
    keys = _keys(view, file, layout, starts + inside[:, layout.key_column or 0], sizes)
    kept = [j for j in range(len(columns)) if j != layout.key_column]
    if not kept:
        raise ColumnarError("a sample has no column besides its key", path=url)
    entries = np.zeros(n * len(kept), dtype=ENTRY_ROW_DTYPE)
    entries["offset"] = inside[:, kept].ravel()
    entries["size"] = sizes[:, kept].ravel()
    entries["spec"] = np.tile(np.arange(len(kept)), n)
    absolute = (starts[:, None] + inside[:, kept]).ravel()
    entries["crc"] = np.frombuffer(crc32c_spans(view, absolute, sizes[:, kept].ravel()), _U32)
    records = np.zeros(n, dtype=RECORD_ROW_DTYPE)
    encoded = [k.encode("utf-8") for k in keys]
    records["offset"] = starts
    records["length"] = lengths
    records["key_hash"] = np.fromiter(map(key_hash, encoded), dtype=np.uint64, count=n)
    records["key_length"] = np.fromiter(map(len, encoded), dtype=np.int64, count=n)
    records["entry_count"] = len(kept)
    specs = [EntrySpec(columns[j].name, columns[j].content_type, Codec.NONE) for j in kept]
    return ColumnShardInfo(
        url,
        len(view),
        keys,
        records,
        entries,
        specs,
        shard_number,
        kind=layout.kind,
        first_index=file.first_index,
    )


def _keys(
    view: memoryview,
    file: ColumnFile,
    layout: ColumnLayout,
    at: np.ndarray,
    sizes: np.ndarray,
) -> list[str]:
    """Each sample's key: its key column's value as text, or its index in the directory."""
    if layout.key_column is None:
        return [str(file.first_index + i) for i in range(len(at))]
    column = layout.columns[layout.key_column]
    spans = zip(at.tolist(), sizes[:, layout.key_column].tolist())
    if column.key_dtype is not None:
        dtype = np.dtype(column.key_dtype)
        return [str(np.frombuffer(view, dtype, 1, a)[0].item()) for a, _ in spans]
    keys = []
    for i, (a, size) in enumerate(spans):
        try:
            keys.append(str(view[a : a + size], "utf-8"))
        except UnicodeDecodeError as e:
            raise _bad_sample(file, i, a, f"its key column {column.name!r} is not UTF-8") from e
    return keys


def _bad_sample(file: ColumnFile, i: int, offset: int, what: str) -> ColumnarError:
    return ColumnarError(
        f"sample {file.first_index + i} is damaged: {what}", path=file.url, offset=offset
    )
