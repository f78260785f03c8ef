"""MosaicML Streaming (MDS) directories: ``index.json`` read into shard files and their layout.

An MDS directory (``MDSWriter``, format version 2) holds ``index.json`` and
its shards ``shard.NNNNN.mds``. Each shard's entry in ``index.json`` names
its columns (sorted by name), their encodings and their fixed sizes (null:
variable, given by each sample's size header). A shard is the shared layout
of :mod:`.columnar`. Compressed shards (``compression: "zstd"``...) hold no
sample at a byte range of a file: they are refused, naming the compression.

Each column becomes an entry of its name, read as its encoding says
(:func:`column_for`): ``str`` as text, ``json`` as JSON, ``jpeg``/``png``
as images, ``int``/``float32``... and fixed-shape ``ndarray`` as numbers
(:data:`~shardcat.format.entries.RAW_ARRAY_TYPE`); any other encoding
(``pil``, ``pkl``, a variable ``ndarray``) as its bytes, its content type
naming the encoding so ``streaming``'s ``mds_decode`` can read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .columnar import Column, ColumnarError, CompressedShardsError, FileEntry
from .entries import JSON_TYPE, OCTET_TYPE, TEXT_TYPE, raw_array_type

__all__ = ["column_for", "mds_columns"]

_SCALARS = {
    "int": "<i8",
    **{f"int{b}": f"<i{b // 8}" for b in (8, 16, 32, 64)},
    **{f"uint{b}": f"<u{b // 8}" for b in (8, 16, 32, 64)},
    **{f"float{b}": f"<f{b // 8}" for b in (16, 32, 64)},
}
_TYPES = {
    "bytes": OCTET_TYPE,
    "str": TEXT_TYPE,
    "str_int": TEXT_TYPE,
    "str_float": TEXT_TYPE,
    "str_decimal": TEXT_TYPE,
    "json": JSON_TYPE,
    "jpeg": "image/jpeg",
    "png": "image/png",
}
_TEXT_KEYS = frozenset({"str", "str_int", "bytes"})
"""Encodings whose value, as UTF-8 text, can be a key (besides the integer scalars)."""


def column_for(name: str, encoding: str, size: int | None) -> Column:
    """The entry an MDS column becomes: its content type from its encoding."""
    base, _, args = encoding.partition(":")
    dtype = _SCALARS.get(encoding)
    if dtype is not None:
        return Column(name, encoding, size, raw_array_type(dtype), None if "f" in dtype else dtype)
    if base == "ndarray" and size is not None:  # ndarray:DTYPE:SHAPE, no header of its own
        dtype_name, _, shape = args.partition(":")
        dims = tuple(int(d) for d in shape.split(","))
        return Column(name, encoding, size, raw_array_type(dtype_name, dims))
    ctype = _TYPES.get(base, f"application/x-mds; encoding={encoding}")
    return Column(name, encoding, size, ctype, text_key=encoding in _TEXT_KEYS)


def mds_columns(index: Mapping[str, Any], where: str) -> tuple[tuple[Column, ...], list[FileEntry]]:
    """The columns and the shard files (``(name, samples, bytes)``) an MDS ``index.json`` lists.

    ``where`` names the index in errors.

    Raises
    ------
    CompressedShardsError
        Its shards are compressed (the error names the compression).
    ColumnarError
        Not an MDS index of format version 2, or shards of different columns.
    """
    shards = index.get("shards")
    if index.get("version") != 2 or not isinstance(shards, list):
        raise ColumnarError(
            "not an MDS index (version 2 with a 'shards' list); is it a LitData "
            "directory (shardcat index-litdata)?",
            path=where,
        )
    if not shards:
        raise ColumnarError("the index lists no shard", path=where)
    found: tuple[Column, ...] | None = None
    files: list[FileEntry] = []
    for shard in shards:
        try:
            fmt, compression = shard.get("format"), shard.get("compression")
            basename, size = shard["raw_data"]["basename"], int(shard["raw_data"]["bytes"])
            samples = int(shard["samples"])
            names, encodings = shard["column_names"], shard["column_encodings"]
            sizes = shard["column_sizes"]
        except (KeyError, TypeError, ValueError) as e:
            raise ColumnarError(f"a shard's entry lacks {e}", path=where) from e
        if fmt != "mds":
            raise ColumnarError(f"shards of format {fmt!r}: only 'mds' is indexed", path=where)
        if compression:
            raise CompressedShardsError(
                f"the shards are compressed ({compression}): shardcat indexes uncompressed MDS "
                "shards in place; write them with compression=None, or decompress them first",
                path=where,
            )
        columns = tuple(
            column_for(n, e, None if s is None else int(s))
            for n, e, s in zip(names, encodings, sizes, strict=True)
        )
        if found is not None and columns != found:
            raise ColumnarError(f"{basename} has other columns than the first shard", path=where)
        found = columns
        files.append((basename, samples, size))
    assert found is not None
    return found, files
