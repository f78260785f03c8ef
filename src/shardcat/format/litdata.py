"""LitData optimized directories: ``index.json`` read into chunk files and their layout.

``litdata.optimize`` writes ``index.json`` and chunks ``chunk-R-N.bin``.
A sample (an "item") is flattened as a pytree: ``config.data_spec`` is the
tree (``{"image": ..., "meta": {"a": ...}}``), ``config.data_format`` the
serializer of each leaf in flattening order. A chunk is the shared layout
of :mod:`.columnar`, every leaf's size in the item's header. Each leaf
becomes an entry named by its path in the tree (``image``, ``meta.a``; a
list's items by position, ``0``; a sample that is one value: ``item``).

Compressed or encrypted chunks, and the token loader's headerless arrays,
are no samples at byte ranges of a file: they are refused, named.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .columnar import Column, ColumnarError, CompressedShardsError, FileEntry
from .entries import OCTET_TYPE, TEXT_TYPE, guess_content_type, raw_array_type

__all__ = ["leaf_names", "litdata_column", "litdata_columns"]

_NUMBERS = {"int": "<i8", "float": "<f8", "bool": "|b1"}


def litdata_column(name: str, data_format: str) -> Column:
    """The entry a LitData leaf becomes: its content type from its serializer's name."""
    dtype = _NUMBERS.get(data_format)
    if dtype is not None:
        key = dtype if data_format == "int" else None
        return Column(name, data_format, None, raw_array_type(dtype), key)
    if data_format == "str":
        return Column(name, data_format, None, TEXT_TYPE, text_key=True)
    if data_format == "bytes":
        return Column(name, data_format, None, OCTET_TYPE, text_key=True)
    if data_format == "jpeg":
        return Column(name, data_format, None, "image/jpeg")
    if data_format.startswith("image:"):  # the image serializer names the file's extension
        return Column(name, data_format, None, guess_content_type(data_format[6:]))
    return Column(name, data_format, None, f"application/x-litdata; format={data_format}")


def leaf_names(data_spec: str | None, count: int, where: str) -> list[str]:
    """Each leaf's path in the sample's tree, in flattening order.

    Raises
    ------
    ColumnarError
        The tree cannot be read, or has another number of leaves than ``data_format``.
    """
    names: list[str] = []

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        children = node.get("children_spec") or []
        if node.get("type") is None and not children:
            names.append(".".join(path) or "item")
            return
        context = node.get("context")
        labels = json.loads(context) if isinstance(context, str) else None
        if not isinstance(labels, list) or len(labels) != len(children):
            labels = list(range(len(children)))  # a list or tuple: its items by position
        for label, child in zip(labels, children):
            walk(child, (*path, str(label)))

    try:
        if data_spec is None:
            raise ValueError("no data_spec")
        _, tree = json.loads(data_spec)
        walk(tree, ())
    except (ValueError, TypeError, AttributeError) as e:
        raise ColumnarError(f"config.data_spec cannot be read: {e}", path=where) from e
    if len(names) != count or len(set(names)) != count:
        raise ColumnarError(
            f"config.data_spec has leaves {names}, data_format {count} serializers", path=where
        )
    return names


def litdata_columns(
    index: Mapping[str, Any], where: str
) -> tuple[tuple[Column, ...], list[FileEntry]]:
    """The leaves and the chunk files (``(name, samples, None)``) a LitData ``index.json`` lists.

    Raises
    ------
    CompressedShardsError
        Its chunks are compressed or encrypted.
    ColumnarError
        Not a LitData index, or one of an item loader other than the default
        one (tokens: items without size headers).
    """
    config, chunks = index.get("config"), index.get("chunks")
    if not isinstance(config, dict) or not isinstance(chunks, list):
        raise ColumnarError(
            "not a LitData index (a 'config' and a 'chunks' list); is it an MDS directory "
            "(shardcat index-mds)?",
            path=where,
        )
    for what in ("compression", "encryption"):
        if config.get(what):
            raise CompressedShardsError(
                f"the chunks are {what.replace('ion', 'ed')} ({config[what]}): shardcat indexes "
                f"uncompressed, unencrypted chunks in place; optimize without {what}",
                path=where,
            )
    loader = config.get("item_loader", "PyTreeLoader")
    if loader != "PyTreeLoader" or any(c.get("dim") is not None for c in chunks):
        raise ColumnarError(
            f"chunks of the {loader} (items without size headers) are not indexed; only "
            "those of the default PyTreeLoader are",
            path=where,
        )
    formats = config.get("data_format")
    if not isinstance(formats, list) or not chunks:
        raise ColumnarError("the index lists no data_format or no chunk", path=where)
    names = leaf_names(config.get("data_spec"), len(formats), where)
    try:
        files: list[FileEntry] = [(str(c["filename"]), int(c["chunk_size"]), None) for c in chunks]
    except (KeyError, TypeError, ValueError) as e:
        raise ColumnarError(f"a chunk's entry lacks {e}", path=where) from e
    return tuple(litdata_column(n, str(f)) for n, f in zip(names, formats)), files
