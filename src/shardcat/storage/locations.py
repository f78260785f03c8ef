"""Shard names: which file a dataset's job writes, so that no two ever share one.

A job's shard is named ``<prefix>-j<job>-<partition:06d>-<index:03d>.shard``:

* ``prefix`` comes from the dataset's name by an injective escape
  (:func:`dataset_prefix`): datasets ``a/b`` and ``a_b`` never share names,
  even in one folder;
* ``j<job>`` is the catalog's job id: two jobs of one dataset (concurrent
  appends, an overwrite racing another, a rerun while a failed job's tasks
  still run) never write the same file;
* a task retried inside its job takes the next free name
  (``...-000-r1.shard``) when an earlier attempt already published one, so
  publication never has to replace anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .fs import join, resolve
from .translate import storage_errors

__all__ = [
    "GROUPS_FOLDER",
    "MAX_PREFIX",
    "dataset_prefix",
    "first_free",
    "is_group_shard",
    "shard_name",
]

MAX_PREFIX = 96
"""Longest prefix kept as is; longer ones end in a hash of the whole name (file names stop at 255 bytes)."""

_PLAIN = re.compile(r"[A-Za-z0-9._-]")

GROUPS_FOLDER = "_groups"
"""The sub-folder of a dataset indexed in place that holds its column groups' shards: its own
folder is the user's files (a folder indexed again must not find them; docs/GROUPS.md)."""


def is_group_shard(path: str) -> bool:
    """Whether ``path`` is a column group's shard in a :data:`GROUPS_FOLDER` (``.../_groups/x.shard``).

    Folder listings that look for data (files to index or pack) leave them out.
    """
    folder, _, name = path.rstrip("/").rpartition("/")
    return folder.rpartition("/")[2] == GROUPS_FOLDER and name.endswith(".shard")


def dataset_prefix(name: str) -> str:
    """A file-name prefix for the dataset ``name``; distinct names give distinct prefixes.

    Letters, digits, ``.``, ``_`` and ``-`` stay; every other character
    (``/``, spaces, ``~``, non-ASCII) becomes ``~`` and the hex of its UTF-8
    bytes, so the mapping can be undone and two names never collide. A
    leading ``.`` is escaped too (no hidden files), and a prefix longer than
    :data:`MAX_PREFIX` is cut and ends in a hash of the whole name.

    >>> dataset_prefix("imagenet/train")
    'imagenet~2Ftrain'
    >>> dataset_prefix("a_b")
    'a_b'
    """
    if not name:
        raise ValueError("a dataset name is not empty")
    out = []
    for i, ch in enumerate(name):
        if _PLAIN.fullmatch(ch) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.append("".join(f"~{b:02X}" for b in ch.encode("utf-8")))
    prefix = "".join(out)
    if len(prefix) > MAX_PREFIX:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
        prefix = f"{prefix[: MAX_PREFIX - 17]}~{digest}"
    return prefix


def shard_name(prefix: str, job: int, partition: int, index: int, attempt: int = 0) -> str:
    """``train-j17-000003-000.shard``; attempt ``n > 0`` adds ``-r<n>``."""
    retry = f"-r{attempt}" if attempt else ""
    return f"{prefix}-j{job}-{partition:06d}-{index:03d}{retry}.shard"


def first_free(
    root: str, names: list[str], storage_options: Mapping[str, Any] | None = None
) -> str:
    """The first of ``names`` that does not exist under ``root`` (asked of the store, not a cache).

    Raises
    ------
    FileExistsError
        If every name is taken.
    """
    fs, _ = resolve(root, storage_options)
    for name in names:
        url = join(root, name)
        _, path = resolve(url, storage_options)
        with contextlib.suppress(Exception):  # a filesystem without a listings cache
            fs.invalidate_cache(fs._parent(path))
        with storage_errors(url, writing=True):
            taken = fs.exists(path)
        if not taken:
            return name
    raise FileExistsError(f"every candidate name is taken under {root}: {names[0]} ... {names[-1]}")
