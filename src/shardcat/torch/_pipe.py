"""The one use of torch's private DataLoader internals: the pipe workers send batches through.

torch offers no public way to reach it: it is the read end (``_reader``) of
the multiprocessing queue ``_worker_result_queue`` of the iterator a
``DataLoader`` with workers returns. Widening it is an optimisation, never
needed for a right answer, so it is tried only on the torch releases of
:data:`TORCH_RANGE` (pyproject's ``torch`` extra) and, where the attributes
moved, the pipe stays as it is. ``tests/readers/test_torch_private.py`` fails
loudly when the installed torch no longer has them.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["RESULT_PIPE_BYTES", "TORCH_RANGE", "result_pipe", "torch_in_range", "widen_result_pipe"]

RESULT_PIPE_BYTES = 2**20
"""The pipe that carries batches from workers is widened to this (Linux; its default is 64 KiB)."""

TORCH_RANGE: tuple[tuple[int, int], tuple[int, int] | None] = ((2, 2), None)
"""The torch releases (from, up to and excluding; None: open) whose private attributes are used:
pyproject's ``torch`` extra, ``torch>=2.2``."""


def _release(version: str) -> tuple[int, int]:
    major, minor, *_ = version.split("+")[0].split(".")
    return int(major), int(minor)


def torch_in_range(version: str | None = None) -> bool:
    """Whether ``version`` (default: the installed torch's) is in :data:`TORCH_RANGE`."""
    try:
        release = _release(str(torch.__version__ if version is None else version))
    except ValueError:
        return False
    low, high = TORCH_RANGE
    return release >= low and (high is None or release < high)


def result_pipe(iterator: Any) -> Any:
    """The read end of the pipe ``iterator``'s workers send batches through (torch's private
    attributes).

    Raises
    ------
    AttributeError
        If ``iterator`` has no such pipe (no workers, or a torch whose internals moved).
    """
    return iterator._worker_result_queue._reader


def widen_result_pipe(iterator: Any, size: int = RESULT_PIPE_BYTES) -> int | None:
    """Widen the pipe a DataLoader iterator's workers send batches through; its new size or None.

    With the default 64 KiB pipe a batch of 64 samples of 4 KiB crosses in
    five writes and reads, the loop and the worker waking each other for
    each; in a 1 MiB pipe it goes in one: 15-30 % less CPU per sample in the
    training process (bench_readers, two persistent workers). Best effort:
    outside :data:`TORCH_RANGE`, where torch's private attributes moved, or
    where a pipe may not grow past ``/proc/sys/fs/pipe-max-size`` or the
    user's pipe quota, the pipe stays as it is.
    """
    if not torch_in_range():
        return None
    try:
        import fcntl

        grow = fcntl.F_SETPIPE_SZ  # Linux only
        return int(fcntl.fcntl(result_pipe(iterator).fileno(), grow, size))
    except (AttributeError, ImportError, OSError, ValueError):
        return None
