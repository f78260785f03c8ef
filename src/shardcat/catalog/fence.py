"""What a fork waits for: shardcat's SQLite calls in flight on other threads.

SQLite keeps process-wide mutexes (its allocator's, its VFS's list of open
files) that a thread holds while it is inside SQLite. A process forked at
that moment inherits them locked, and no thread of the child will ever
unlock them: the child's first SQLite call (opening its own connection)
waits forever. So a fork (:func:`os.fork`, and every ``multiprocessing``
fork) first waits until no other thread is inside a shardcat SQLite call,
and lets none start until the child exists:

* a lookup's Python calls (``get``, ``get_many``, ``locate``) each hold
  the lookup's own :attr:`~.lookup.Lookup.gate` (which :meth:`Catalog.close`
  takes too): the fork takes the gate of every live lookup
  (:func:`register`), so it waits for the calls in flight and holds back
  the next ones; nothing is added to a lookup's own path;
* the compiled point lookup takes no gate (``_cpoint.c``, "Lifetimes"): the
  fork turns its new calls away (they take the Python path, and its gate)
  and waits until none is in flight (:func:`register_compiled`);
* units of work, the opening of a thread's lookup, the key stream's
  fetches and a selection's query (``where=``) run inside :func:`shared`,
  which the fork takes exclusively.

The child then finds SQLite's mutexes free and opens its own connections
(the parent's are dropped, never used: :func:`shardcat._forks.fork_generation`).
A fork never waits for itself: the forking thread may be inside either.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["Gated", "register", "register_compiled", "shared", "wait_for_compiled"]


class Gated(Protocol):
    """Something whose SQLite calls each hold :attr:`gate` (a lookup)."""

    @property
    def gate(self) -> threading.RLock: ...


_lock = threading.Lock()
_idle = threading.Condition(_lock)
_active = 0  # threads inside shared(), counted once each
_forking = False  # a fork waits: shared() lets no new thread in
_depth = threading.local()  # this thread's nesting of shared()
_gated: weakref.WeakSet[Gated] = weakref.WeakSet()
_held: list[threading.RLock] = []  # the gates a fork holds, released after it
_compiled: list[tuple[Callable[[bool], None], Callable[[], int]]] = []
_WAIT_STEP = 0.0005  # seconds between looks at compiled calls in flight


def register(gated: Gated) -> None:
    """Make a fork wait for ``gated``'s calls in flight (call inside :func:`shared`)."""
    _gated.add(gated)


def register_compiled(hold: Callable[[bool], None], inflight: Callable[[], int]) -> None:
    """Make a fork call ``hold(True)`` (new calls turned away), then wait until ``inflight()`` is 0."""
    _compiled.append((hold, inflight))


def wait_for_compiled(in_flight: Callable[[], object]) -> None:
    """Wait until ``in_flight()`` is false: compiled calls (``_cpoint.c``) end.

    A compiled call in flight takes no lock to wait on: it is short, and
    sleeping lets it take the GIL to finish.
    """
    while in_flight():
        time.sleep(_WAIT_STEP)


@contextmanager
def shared() -> Iterator[None]:
    """A section that uses SQLite: a fork waits for it to end, and it waits for a fork pending."""
    global _active
    depth = getattr(_depth, "n", 0)
    if depth:  # nested: this thread already counts, and a fork waits for it already
        _depth.n = depth + 1
        try:
            yield
        finally:
            _depth.n = depth
        return
    with _lock:
        while _forking:
            _idle.wait()
        _active += 1
    _depth.n = 1
    try:
        yield
    finally:
        _depth.n = 0
        with _lock:
            _active -= 1
            if not _active:
                _idle.notify_all()


def _before_fork() -> None:
    # Holds _lock across the fork: a thread leaving shared() then cannot hold it
    # at the fork's instant, which would leave it locked in the child.
    global _forking
    _lock.acquire()
    _forking = True
    mine = 1 if getattr(_depth, "n", 0) else 0
    while _active > mine:
        _idle.wait()
    for hold, _ in _compiled:
        hold(True)
    # Gates one by one: Catalog.close() holds at most one at a time, so no cycle.
    for gated in list(_gated):
        gate = gated.gate
        gate.acquire()
        _held.append(gate)
    for _, inflight in _compiled:
        wait_for_compiled(inflight)


def _after_fork_in_parent() -> None:
    global _forking
    while _held:
        _held.pop().release()
    for hold, _ in _compiled:
        hold(False)
    _forking = False
    _idle.notify_all()
    _lock.release()


def _after_fork_in_child() -> None:
    # This thread alone exists, and it took every lock here: they are released
    # as in the parent. Other threads' counts went with them.
    global _active
    _active = 1 if getattr(_depth, "n", 0) else 0
    _after_fork_in_parent()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
