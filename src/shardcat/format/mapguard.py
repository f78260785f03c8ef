"""Users' files mapped read-only, guarded: a file cut while it is mapped is an error, never SIGBUS.

Reading a mapped file costs no copy (the shuffled packed batches copy records
straight from their shards' mappings: ``readers/direct.py``), but a page of
a mapping that lies past the file's end faults with SIGBUS, which kills the
process, and any process may cut a user's file (a tar being rewritten, a
shard being replaced in place) while shardcat reads it. So a user's file is
mapped only under a guard (:func:`map_guarded`): the compiled module
``_cmapguard`` catches such a fault inside a guarded mapping, lets the
access read zeros instead, and records the first page it lost. Bytes read
from a guarded mapping are therefore trusted only once :meth:`GuardedMap.lost`
has said nothing under them was lost (no page cut, the file still at least
that long); a reader asks it after its reads and before anything computed
from them leaves it, and raises its typed error (:class:`~shardcat.errors.TruncatedError`
or a subclass) otherwise.

The Python twin of a guarded mapping is a read: without the compiled guard
(not built, or not Linux) :func:`map_guarded` returns ``None`` and callers
read the file. Files shardcat creates for itself and that no other process
can shrink (the packed batches' sealed memfd blocks) are mapped without it.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import mmap
from typing import Any

from ..errors import TruncatedError

__all__ = ["GuardedMap", "available", "map_guarded"]

_log = logging.getLogger(__name__)

_guard: Any
try:
    _guard = importlib.import_module(f"{__package__}._cmapguard")
    if not _guard.available:
        _guard = None
except ImportError:  # built without a compiler: users' files are read, never mapped
    _guard = None


def available() -> bool:
    """Whether files can be mapped under the guard here (else :func:`map_guarded` gives ``None``)."""
    return _guard is not None


class GuardedMap:
    """A file mapped read-only under the guard: ``map`` is the ``mmap``.

    Use :meth:`lost` (or :meth:`check`) after reading and before trusting
    what was read; :meth:`close` stops the guard and unmaps (safe to call twice).
    """

    __slots__ = ("_guard", "map", "path")

    def __init__(self, mapping: mmap.mmap, guard: Any, path: str) -> None:
        self.map = mapping
        self.path = path
        self._guard = guard

    def __len__(self) -> int:
        return len(self.map)

    def size(self) -> int:
        """The file's size now (``fstat``), which may be less than the mapping's length."""
        return self.map.size()

    def lost(self, end: int) -> int | None:
        """The first byte under ``end`` that may not have been the file's when read, or ``None``.

        A byte may have been lost if its page was found cut while guarded
        (it read as zero from then on), or if the file is now shorter than
        ``end`` (the tail of its last page reads as zero without a fault).
        """
        cut = self._guard.cut
        try:
            size = self.map.size()
        except (OSError, ValueError):  # closed meanwhile: nothing of it can be trusted
            size = 0
        first = min(size, cut if cut >= 0 else end, end)
        return first if first < end else None

    def check(self, end: int) -> None:
        """Raise if bytes under ``end`` may have been lost while mapped.

        Raises
        ------
        TruncatedError
            The file was cut (or a page of it could not be read) while it was
            read through the mapping; the offset is the first byte in doubt.
        """
        first = self.lost(end)
        if first is not None:
            raise TruncatedError(
                f"the file was cut (or could not be read) at byte {first} while it was read, "
                f"but the read needed {end} bytes; read it again once it is whole",
                path=self.path,
                offset=first,
            )

    def close(self) -> None:
        """Stop the guard, then unmap (a view still alive elsewhere keeps the pages mapped)."""
        self._guard.close()
        try:
            self.map.close()
        except BufferError:
            # Unguarded from here on: only a view leaked past its reader's end can still
            # touch these pages, and it is unmapped when that view goes.
            _log.debug("mapping of %s still exported; unmapped when its last view goes", self.path)


def map_guarded(fd: int, path: str) -> GuardedMap | None:
    """The file of descriptor ``fd`` mapped read-only under the guard, or ``None``.

    ``None`` when the guard is not available, the file is empty, or ``mmap``
    fails: the caller reads the file instead. The descriptor stays the
    caller's (``mmap`` keeps a duplicate of its own).
    """
    if _guard is None:
        return None
    try:
        mapping = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, OverflowError):
        return None
    try:
        guard = _guard.guard(mapping)
    except (OSError, ValueError, OverflowError):  # no free slot: read instead
        with contextlib.suppress(BufferError):
            mapping.close()
        return None
    return GuardedMap(mapping, guard, path)
