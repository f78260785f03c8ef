"""A ``dask worker --preload``: the first read of a folder's ``BLOCK.*`` file never returns.

It stands for the FIFO of issue 35 that a task opened before folder reads
were non-blocking: a task stuck for good in a worker's only thread. The
file holds the path of a marker, created when the read blocks (so a test
knows the task is stuck); once the marker exists, the file reads as usual
(the code "fixed").
"""

from __future__ import annotations

import importlib
import os
import threading

_module = importlib.import_module("shardcat.orchestration.index_files")
# dask runs a preload file once per import path; wrap the original once.
_read_whole = getattr(_module.read_whole, "__wrapped__", _module.read_whole)


def read_whole(path: str) -> bytes:
    data: bytes = _read_whole(path)
    if os.path.basename(path).startswith("BLOCK."):
        marker = data.decode()
        if not os.path.exists(marker):
            with open(marker, "w"):
                pass
            threading.Event().wait()  # for ever: only killing the worker ends it
    return data


read_whole.__wrapped__ = _read_whole  # type: ignore[attr-defined]
_module.read_whole = read_whole  # type: ignore[attr-defined]
