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
    patterns: Iterable[str],
    storage_options: StorageOptions | None = None,
    *,
    folder_suffix: str | None = None,
) -> list[str]:
    """Every shard URL the patterns name, absolute, in order, each once.

    Braces expand first (``{a,b}``, ``{000..099}``; the names need not exist,
    a missing one is reported when it is read); then a part with ``*``, ``?``
    or ``[`` is globbed on its filesystem, in sorted order. With
    ``folder_suffix`` (``".shard"``), a local folder, or a remote URL ending
    in ``/``, names the files with that suffix directly inside it, sorted.

    Raises
    ------
    ShardNotFoundError
        If a glob, or a folder, matches no file.
    """
    out: dict[str, None] = {}
    for pattern in patterns:
        for url in braceexpand(pattern):
            folder = folder_suffix is not None and _is_folder(url, storage_options)
            if folder:
                url = f"{url.rstrip('/')}/*{folder_suffix}"
            elif not _GLOB.intersection(url):
                out[absolute_url(url, storage_options)] = None
                continue
            local = is_local(url)
            fs, path = resolve(os.path.abspath(local_path(url)) if local else url, storage_options)
            found = sorted(p for p in fs.glob(path) if not fs.isdir(p))
            if not found:
                if folder:
                    where = redact(url.rsplit("/", 1)[0])
                    raise ShardNotFoundError(
                        f"folder {where} holds no *{folder_suffix} file; pass the shard "
                        f"files themselves or a glob (quoted: '{where}/**/*{folder_suffix}')",
                        path=where,
                    )
                raise ShardNotFoundError(f"no file matches {redact(url)}", path=redact(url))
            for p in found:
                out[p if local else redact(fs.unstrip_protocol(p))] = None
    return list(out)


def _is_folder(url: str, storage_options: StorageOptions | None) -> bool:
    """A local folder, or a remote URL written as one (a trailing ``/``: no listing per file)."""
    if _GLOB.intersection(url):
        return False
    if is_local(url):
        return os.path.isdir(os.path.expanduser(local_path(url)))
    if not url.endswith("/"):
        return False
    fs, path = resolve(url, storage_options)
    return bool(fs.isdir(path))
