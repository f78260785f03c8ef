"""How many times this process is a fork away from where it started: one counter for every layer.

Objects that hold a connection, a lock or a descriptor note the count when
made; a different count means they are a forked child's copy of its
parent's, to be dropped or remade, never used as they are. Cheaper to read
than ``os.getpid()`` (a system call since glibc 2.25).
"""

from __future__ import annotations

import os

__all__ = ["fork_generation"]

_forks = 0


def _after_fork_in_child() -> None:
    global _forks
    _forks += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def fork_generation() -> int:
    """How many times this process is a fork away from where it started."""
    return _forks
