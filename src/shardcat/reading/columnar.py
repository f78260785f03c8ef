"""Reading MDS and LitData directories: their ``index.json``, and each file scanned once.

What indexing (:mod:`shardcat.orchestration.index_columnar`) and ``verify``
share: the directory's index read into a layout and files
(:mod:`shardcat.format.mds`, :mod:`shardcat.format.litdata`), and a file
read whole and scanned (:func:`~shardcat.format.columnar.scan_columns`:
every column's CRC32C). ``verify`` scans a file again and the catalog
compares what it found with its rows; which column the keys came from is
the one column the catalog's rows do not name as an entry.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._redact import redact_url
from ..errors import ShardNotFoundError
from ..format import columnar
from ..format.columnar import ColumnarError, ColumnFile, ColumnLayout, ColumnShardInfo
from ..format.litdata import litdata_columns
from ..format.mds import mds_columns
from ..storage import open_source

__all__ = ["INDEX_NAME", "directory_files", "read_index", "rescan", "scan_file"]

INDEX_NAME = "index.json"

_FORMATS: dict[
    str,
    Callable[[dict[str, Any], str], tuple[tuple[columnar.Column, ...], list[columnar.FileEntry]]],
] = {
    "mds": mds_columns,
    "litdata": litdata_columns,
}


def read_index(root: str, storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """The directory's ``index.json``.

    Raises
    ------
    ShardNotFoundError
        There is none.
    ColumnarError
        It is no JSON object.
    """
    url = posixpath.join(root, INDEX_NAME)
    source = open_source(url, dict(storage_options))
    try:
        data = source.read(0, source.size())
    finally:
        source.close()
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise ColumnarError(f"the index is not JSON: {e}", path=redact_url(url)) from e
    if not isinstance(doc, dict):
        raise ColumnarError("the index is not a JSON object", path=redact_url(url))
    return doc


def directory_files(
    kind: str | None, root: str, storage_options: Mapping[str, Any], key_column: str | None = None
) -> tuple[ColumnLayout, list[ColumnFile]]:
    """The layout and files of the ``kind`` (``mds``, ``litdata``; None: either) directory ``root``.

    Raises
    ------
    ShardNotFoundError, ColumnarError, CompressedShardsError
        As :func:`read_index` and the format's reader; an index of neither format.
    """
    root = root.rstrip("/")
    index = read_index(root, storage_options)
    where = posixpath.join(root, INDEX_NAME)
    if kind is None:  # MDS lists "shards", LitData "chunks"
        kind = "mds" if "shards" in index else "litdata" if "chunks" in index else None
        if kind is None:
            raise ColumnarError("neither an MDS nor a LitData index", path=redact_url(where))
    if kind not in _FORMATS:
        raise ValueError(f"format must be 'mds' or 'litdata', not {kind!r}")
    columns, entries = _FORMATS[kind](index, where)
    return columnar.directory_layout(kind, columns, entries, root, key_column)


def scan_file(
    file: ColumnFile,
    layout: ColumnLayout,
    storage_options: Mapping[str, Any],
    shard_number: int | None = None,
) -> ColumnShardInfo:
    """Read one file whole (one request) and scan it: every sample, every column's CRC32C.

    Raises
    ------
    ShardNotFoundError
        The file is gone.
    ColumnarTruncatedError, ColumnarError
        It is cut short or damaged.
    """
    source = open_source(file.url, dict(storage_options))
    try:
        data = source.read(0, source.size())
    finally:
        source.close()
    return columnar.scan_columns(data, file, layout, shard_number)


def rescan(
    kind: str,
    url: str,
    storage_options: Any,
    samples: Sequence[tuple[str, int, list[str]]] = (),
) -> ColumnShardInfo:
    """Scan an indexed file again, as its directory's ``index.json`` now describes it (verify).

    ``samples``: the catalog's ``(key, offset, entry names)`` of its records:
    the layout's column they do not name is the one the keys came from.

    Raises
    ------
    ShardNotFoundError
        The file, or ``index.json``, is gone, or the index no longer names the file.
    ColumnarError
        As :func:`scan_file`.
    """
    root = posixpath.dirname(url)
    layout, files = directory_files(kind, root, storage_options)
    number = next((i for i, f in enumerate(files) if f.url == url), None)
    if number is None:
        raise ShardNotFoundError(f"{INDEX_NAME} beside it no longer names it", path=url)
    entries = set(samples[0][2]) if samples else set()
    left = [c.name for c in layout.columns if entries and c.name not in entries]
    if len(left) == 1:
        layout, files = directory_files(kind, root, storage_options, left[0])
    return scan_file(files[number], layout, storage_options, number)
