"""Small whole-object reads and writes (a dataset's version manifests), with shardcat's errors.

Each request rides out a store that goes away for a while (:mod:`.retry`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..errors import ObjectExistsError, ShardNotFoundError
from .atomic import open_pending
from .fs import is_local, local_path, redact, resolve
from .sources import retried
from .translate import storage_errors

__all__ = ["list_names", "put", "read_or_none"]


def put(url: str, data: bytes, options: Mapping[str, Any] | None, *, once: bool) -> bool:
    """Publish ``data`` at ``url`` whole; returns False if ``once`` and an object exists there.

    ``once``: write-once, as shards are (the object is never replaced).

    Raises
    ------
    StorageError
        The store failed; nothing was published.
    """
    pending = open_pending(url, dict(options or {}), exclusive=once)
    try:
        pending.write(data)
    except BaseException:
        pending.discard()
        raise
    try:
        pending.commit()
    except ObjectExistsError:
        return False
    return True


def read_or_none(url: str, options: Mapping[str, Any] | None) -> bytes | None:
    """The object's bytes, or None if there is none (StorageError for anything else)."""
    try:
        if is_local(url):
            with open(local_path(url), "rb") as f:
                return f.read()
        fs, path = resolve(url, dict(options or {}))
        with storage_errors(url, fs=fs):
            data: bytes = retried(fs, "cat_file", redact(url), path)
            return data
    except (FileNotFoundError, ShardNotFoundError):
        return None


def list_names(url: str, options: Mapping[str, Any] | None) -> list[str]:
    """The names of the objects directly in a folder (none if it does not exist, or is a file)."""
    if is_local(url):
        try:
            return sorted(os.listdir(local_path(url)))
        except (FileNotFoundError, NotADirectoryError):
            return []
    fs, path = resolve(url, dict(options or {}))
    try:
        with storage_errors(url, fs=fs):
            found = retried(fs, "ls", redact(url), path, detail=False)
    except (FileNotFoundError, ShardNotFoundError):
        return []
    return sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in found)
