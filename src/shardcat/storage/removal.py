"""Removing many files in few requests, and knowing which ones are left.

``fs.rm(list_of_paths)`` is one call per filesystem: s3fs sends up to
1,000 keys per ``DeleteObjects`` request. It does not say which keys failed
(s3fs asks S3 for a quiet delete and ignores per-key errors; a local rm
stops at the first failure), so afterwards the folders are listed again:
a file still listed was not removed. Listing a folder is one request per
1,000 names, where asking for each file would be one request each.

Listings and deletes ride out a store that goes away for a while, under the
one retry policy of reads and writes (:mod:`.retry`, ``storage_retry_deadline``).
A delete may be sent again: it is idempotent. A batch that failed is sent
again with only the files a listing still finds (the others were removed
before the failure), and a file gone by the time its delete is retried (its
first delete was applied, its answer lost) counts as removed, not as an error.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import StorageUnreachableError
from . import retry
from .fs import redact, resolve
from .sources import retried, try_once
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
    unreachable: StorageUnreachableError | None = None
    """The store stayed unreachable past ``storage_retry_deadline``: the files of that
    request, and every file after it (not tried: no deadline more is waited), are in
    :attr:`failed`. For a caller to raise, typed."""


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


def _listed(fs: Any, paths: Iterable[str], ls: Callable[[str], list[Any]]) -> set[str]:
    """Which of ``paths`` ``ls`` lists in their folders (asked of the store, not a cache)."""
    folders: dict[str, set[str]] = defaultdict(set)
    for path in paths:
        folders[fs._parent(path)].add(path.rstrip("/"))
    found: set[str] = set()
    for folder, wanted in folders.items():
        with contextlib.suppress(Exception):  # a filesystem without a listings cache
            fs.invalidate_cache(folder)
        try:
            listed = ls(folder)
        except FileNotFoundError:
            continue
        found.update(wanted & {str(p).rstrip("/") for p in listed})
    return found


def existing(fs: Any, paths: Iterable[str]) -> set[str]:
    """Which of ``paths`` exist, by listing their folders, each listing retried (:mod:`.retry`)."""
    return _listed(
        fs, paths, lambda folder: retried(fs, "ls", _url(fs, folder), folder, detail=False)
    )


def existing_urls(
    urls: Iterable[str], storage_options: Mapping[str, Any] | None = None
) -> set[str]:
    """Which of ``urls`` exist, one listing per folder.

    Raises
    ------
    StorageError
        The store failed (translated: no credentials, unreachable past the
        retry deadline, ...).
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
    :attr:`Removal.failed` with the reason (credentials, permissions, ...);
    a store unreachable past the retry deadline is :attr:`Removal.unreachable`
    too, and the files after it are not tried.

    Raises
    ------
    StorageError
        A URL cannot be resolved (unknown scheme, missing backend package).
    """
    result = Removal()
    for fs, items in _groups(urls, storage_options).values():
        if result.unreachable is not None:
            why = f"not tried: {first_line(result.unreachable)}"
            result.failed.update((url, why) for url, _ in items)
            continue
        _remove_group(fs, items, result)
    return result


def _remove_group(fs: Any, items: list[tuple[str, str]], result: Removal) -> None:
    """:func:`remove_files` of one filesystem and bucket."""
    try:
        before = existing(fs, [p for _, p in items])
    except Exception as e:
        _fail(result, items, e, "")
        return
    present = [(url, path) for url, path in items if path.rstrip("/") in before]
    result.missing.extend(url for url, path in items if path.rstrip("/") not in before)
    if not present:
        return
    reason = "still there after the delete"
    try:
        _delete(fs, [path for _, path in present], present[0][0])
    except Exception as e:
        # ValueError: fsspec's local rm refuses a folder ("set recursive=True").
        if not (is_backend_error(e) or isinstance(e, ValueError)):
            raise
        if retry.gave_up(e):
            _fail(result, present, e, "")
            return
        reason = first_line(translate(e, present[0][0], writing=True))
    try:
        left = existing(fs, [p for _, p in present])
    except Exception as e:
        _fail(result, present, e, "cannot tell whether it was removed: ")
        return
    for url, path in present:
        if path.rstrip("/") in left:
            result.failed[url] = reason
        else:
            result.removed.append(url)


def _delete(fs: Any, paths: list[str], url: str) -> None:
    """``fs.rm(paths)``, retried (:func:`.retry.call`) with only the files still there."""
    left = paths

    def attempt(timeout: float | None) -> None:
        nonlocal left
        if not left:
            return
        try:
            try:
                try_once(fs, "rm", timeout, left)
            except FileNotFoundError:
                # One was gone by the rm (a concurrent gc, or our own try whose answer was
                # lost), and a local rm stops at it: the others go one by one.
                for path in left:
                    with contextlib.suppress(FileNotFoundError):
                        try_once(fs, "rm_file", timeout, path)
        except Exception as e:
            if retry.is_retryable(e):
                # The next try sends only what is still there. If this listing fails too
                # (the store is away), all go again: deleting a gone file is no error.
                with contextlib.suppress(Exception):
                    still = _listed(
                        fs, left, lambda f: try_once(fs, "ls", timeout, f, detail=False)
                    )
                    left = [p for p in left if p.rstrip("/") in still]
            raise

    retry.call(attempt, url)


def _fail(result: Removal, items: list[tuple[str, str]], e: Exception, prefix: str) -> None:
    """Record ``items`` as left by ``e`` (a store's failure; anything else is raised)."""
    if not is_backend_error(e):
        raise e
    error = translate(e, items[0][0])
    if retry.gave_up(error) and result.unreachable is None:
        result.unreachable = error  # type: ignore[assignment]  # gave_up: StorageUnreachableError
    why = prefix + first_line(error)
    result.failed.update((url, why) for url, _ in items)


def _url(fs: Any, path: str) -> str:
    """A path's URL for messages (without credentials)."""
    try:
        return redact(fs.unstrip_protocol(path))
    except Exception:
        return path
