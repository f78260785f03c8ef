"""Shard URL patterns, as a user types them, into the absolute URLs a catalog stores.

``shardcat reindex`` takes ``train-{000000..000099}.shard`` (brace patterns,
expanded by the ``braceexpand`` package, nested ones and lists included) and
``s3://bucket/train/*.shard`` (fsspec globs, listed on the store). A catalog
must name the same file from any folder and any machine, so local paths are
made absolute (and ``file://`` dropped) and other URLs are written as their
filesystem writes them (``s3://bucket/key``), without credentials.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from braceexpand import braceexpand

from .._types import StorageOptions
from ..errors import ShardNotFoundError
from .fs import is_local, local_path, redact, resolve

__all__ = ["absolute_url", "expand_patterns"]

_GLOB = frozenset("*?[")


def absolute_url(url: str, storage_options: StorageOptions | None = None) -> str:
    """``url`` as a catalog stores it: local paths absolute, other URLs normalised, no secrets."""
    if is_local(url):
        return os.path.abspath(os.path.expanduser(local_path(url)))
    fs, path = resolve(url, storage_options)
    return redact(fs.unstrip_protocol(path))


def expand_patterns(
    patterns: Iterable[str], storage_options: StorageOptions | None = None
) -> list[str]:
    """Every shard URL the patterns name, absolute, in order, each once.

    Braces expand first (``{a,b}``, ``{000..099}``; the names need not exist,
    a missing one is reported when it is read); then a part with ``*``, ``?``
    or ``[`` is globbed on its filesystem, in sorted order.

    Raises
    ------
    ShardNotFoundError
        If a glob matches no file.
    """
    out: dict[str, None] = {}
    for pattern in patterns:
        for url in braceexpand(pattern):
            if not _GLOB.intersection(url):
                out[absolute_url(url, storage_options)] = None
                continue
            local = is_local(url)
            fs, path = resolve(os.path.abspath(local_path(url)) if local else url, storage_options)
            found = sorted(p for p in fs.glob(path) if not fs.isdir(p))
            if not found:
                raise ShardNotFoundError(f"no file matches {redact(url)}", path=redact(url))
            for p in found:
                out[p if local else redact(fs.unstrip_protocol(p))] = None
    return list(out)
