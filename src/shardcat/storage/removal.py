"""Removing many files in few requests, and knowing which ones are left.

``fs.rm(list_of_paths)`` is one call per filesystem: s3fs sends up to
1,000 keys per ``DeleteObjects`` request. It does not say which keys failed
(s3fs asks S3 for a quiet delete and ignores per-key errors; a local rm
stops at the first failure), so afterwards the folders are listed again:
a file still listed was not removed. Listing a folder is one request per
1,000 names, where asking for each file would be one request each.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .fs import resolve
from .translate import first_line, is_backend_error, translate

__all__ = ["Removal", "existing", "existing_urls", "remove_files"]


@dataclass
class Removal:
    """What :func:`remove_files` did."""

    removed: list[str] = field(default_factory=list)
    """URLs that existed and are gone."""
    missing: list[str] = field(default_factory=list)
    """URLs that did not exist (nothing to do)."""
    failed: dict[str, str] = field(default_factory=dict)
    """URL → why it is still there."""


def _groups(
    urls: Iterable[str], storage_options: Mapping[str, Any] | None
) -> dict[tuple[int, str], tuple[Any, list[tuple[str, str]]]]:
    """URLs by filesystem and bucket (one s3fs bulk delete holds one bucket's keys)."""
    out: dict[tuple[int, str], tuple[Any, list[tuple[str, str]]]] = {}
    for url in urls:
        fs, path = resolve(url, storage_options)
        bucket = path.lstrip("/").split("/", 1)[0]
        out.setdefault((id(fs), bucket), (fs, []))[1].append((url, path))
    return out


def existing(fs: Any, paths: Iterable[str]) -> set[str]:
    """Which of ``paths`` exist, by listing their folders (asked of the store, not a cache)."""
    folders: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        folders[fs._parent(path)].add(path.rstrip("/"))
    found: set[str] = set()
    for folder, wanted in folders.items():
        with contextlib.suppress(Exception):  # a filesystem without a listings cache
            fs.invalidate_cache(folder)
        try:
            listed = fs.ls(folder, detail=False)
        except FileNotFoundError:
            continue
        found.update(wanted & {str(p).rstrip("/") for p in listed})
    return found


def existing_urls(
    urls: Iterable[str], storage_options: Mapping[str, Any] | None = None
) -> set[str]:
    """Which of ``urls`` exist, one listing per folder.

    Raises
    ------
    StorageError
        The store failed (translated: no credentials, unreachable, ...).
    """
    out: set[str] = set()
    for fs, items in _groups(urls, storage_options).values():
        try:
            found = existing(fs, [p for _, p in items])
        except Exception as e:
            if not is_backend_error(e):
                raise
            raise translate(e, items[0][0]) from e
        out.update(url for url, path in items if path.rstrip("/") in found)
    return out


def remove_files(urls: Iterable[str], storage_options: Mapping[str, Any] | None = None) -> Removal:
    """Remove these files with one ``fs.rm`` call per filesystem and bucket.

    Never raises for the store's failures: each file that is left is in
    :attr:`Removal.failed` with the reason (credentials, permissions, ...).

    Raises
    ------
    StorageError
        A URL cannot be resolved (unknown scheme, missing backend package).
    """
    result = Removal()
    for fs, items in _groups(urls, storage_options).values():
        try:
            before = existing(fs, [p for _, p in items])
        except Exception as e:
            if not is_backend_error(e):
                raise
            why = str(translate(e, items[0][0]))
            result.failed.update((url, why) for url, _ in items)
            continue
        present = [(url, path) for url, path in items if path.rstrip("/") in before]
        result.missing.extend(url for url, path in items if path.rstrip("/") not in before)
        if not present:
            continue
        reason = "still there after the delete"
        try:
            fs.rm([path for _, path in present])
        except FileNotFoundError:
            # Another remover (a concurrent gc) took one since the listing, and a local rm
            # stops at it: the others go one by one.
            for _, path in present:
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(path)
        except Exception as e:
            # ValueError: fsspec's local rm refuses a folder ("set recursive=True").
            if not (is_backend_error(e) or isinstance(e, ValueError)):
                raise
            reason = first_line(translate(e, present[0][0], writing=True))
        try:
            left = existing(fs, [p for _, p in present])
        except Exception as e:
            if not is_backend_error(e):
                raise
            why = f"cannot tell whether it was removed: {first_line(translate(e, present[0][0]))}"
            result.failed.update((url, why) for url, _ in present)
            continue
        for url, path in present:
            if path.rstrip("/") in left:
                result.failed[url] = reason
            else:
                result.removed.append(url)
    return result
