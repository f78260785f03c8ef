"""The worker processes of a local cluster leave Ctrl-C to the client that started them.

A terminal's Ctrl-C is sent to its whole foreground process group, so the
worker processes of a local cluster get it too, and each dies printing a
``KeyboardInterrupt`` traceback (about 110 lines for two workers) around the
line the client prints about its job; one caught while the cluster starts
leaves it half made, to fail again at exit. The client stops its cluster
itself when interrupted, so the workers need not see the signal at all.

A signal mask is inherited by the threads a thread starts and by the
processes they spawn, and kept across ``exec``: SIGINT is blocked while the
cluster starts, so its event loop thread and every worker process it spawns
(also one a nanny restarts later) keep it blocked. Python handles a signal in
the main thread whichever thread received it, so meanwhile the handler only
notes a Ctrl-C, and the client is interrupted once the cluster is up.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["interrupts_to_this_thread"]


@contextlib.contextmanager
def interrupts_to_this_thread() -> Iterator[None]:
    """Block SIGINT while the block runs (what it starts keeps it blocked); Ctrl-C comes after.

    A SIGINT that arrives meanwhile is handled when the block ends, as it
    would have been (``KeyboardInterrupt``). Where signal masks do not exist
    (Windows), or off the main thread, nothing changes.
    """
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not (
        threading.main_thread()
    ):
        yield
        return
    from multiprocessing import resource_tracker

    # Whichever thread starts multiprocessing's resource tracker unblocks SIGINT
    # afterwards (the cluster's event loop thread, as it makes a worker's queues):
    # started here first, it is running already then.
    resource_tracker.ensure_running()
    caught: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    handler = signal.signal(signal.SIGINT, note)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
        if caught:
            if callable(handler):
                handler(signal.SIGINT, None)  # Python's own: raises KeyboardInterrupt
            else:
                signal.raise_signal(signal.SIGINT)  # as the process's disposition says
