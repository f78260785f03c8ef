"""Whether this process still holds a SQLite catalog open: its descriptors on the database file.

A Catalog's engine pool, its per-thread lookups and any connection left
behind each keep the file (or its ``-wal``/``-shm``) open; a closed Catalog
keeps none. Counted in ``/proc/self/fd`` (Linux), not through the catalog.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

HAVE_PROC = os.path.isdir("/proc/self/fd")
needs_proc = pytest.mark.skipif(not HAVE_PROC, reason="counts descriptors in /proc/self/fd")


def sqlite_files_open(url: str) -> int:
    """Descriptors this process holds on the SQLite database of ``url`` and its side files."""
    path = os.path.realpath(url.removeprefix("sqlite:///"))
    held = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target == path or target.startswith(path + "-"):
            held += 1
    return held


@contextmanager
def catalog_given(kind: str, url: str) -> Iterator[Any]:
    """What a test passes as ``catalog``: the URL, or a Catalog it opened on it.

    After the block, a URL's catalog must be closed (no descriptor left on the
    file); a Catalog passed in must still be open and usable.
    """
    from shardcat.reading import Catalog

    assert sqlite_files_open(url) == 0, "the test began with the catalog open"
    if kind == "url":
        yield url
        assert sqlite_files_open(url) == 0, "the catalog opened from the URL was left open"
        return
    with Catalog(url) as cat:
        yield cat
        cat.datasets()  # still usable: CatalogClosedError if it was closed under us
        assert sqlite_files_open(url) > 0
    assert sqlite_files_open(url) == 0
