"""Ranges of many S3 objects read through obstore, a bounded number of requests in flight.

A batch lookup's merged reads span many shards. object_store's ``get_ranges``
reads one object (10 requests at once); called per file, one file after
another, a batch over 50 shards waited at least 50 round trips, 20-80 ms each
at cloud latency. Here each range of each file is one ``get_range_async``,
all on one event loop (fsspec's IO thread, which s3fs runs on too), at most
``remote_in_flight`` (:func:`.gap.requests_in_flight`) at once across all
files: a batch takes about ``requests / in_flight`` round trips. Memory: the
bytes of the batch's merged reads, which the caller keeps anyway.

A range whose request failed is read again after the others are done,
through its file's own :meth:`.ObstoreSource.read_many` (transient failures
retried under the deadline, a short read where the file ends, a region
redirect, a forked child's s3fs): a failed request never hangs the batch,
and one that keeps failing raises its file's typed error (``error.path``
names it) through the caller's ``failed``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from . import gap

if TYPE_CHECKING:
    from .objstore import ObstoreSource

__all__ = ["read_across"]

Job = tuple["ObstoreSource", Sequence[int], Sequence[int]]
"""One file's reads: its source, the starts and the ends of its (merged) ranges."""


async def _gather(
    requests: list[tuple[Any, str, int, int]], limit: int
) -> list[memoryview | BaseException]:
    # Here, not at the top: asyncio imports ssl (~20 ms), which a local lookup never needs.
    import asyncio

    import obstore

    gate = asyncio.Semaphore(limit)

    async def one(store: Any, path: str, start: int, end: int) -> memoryview:
        async with gate:
            return memoryview(await obstore.get_range_async(store, path, start=start, end=end))

    return await asyncio.gather(*(one(*r) for r in requests), return_exceptions=True)


def read_across(
    jobs: Sequence[Job], failed: Callable[[int, BaseException], NoReturn]
) -> list[list[memoryview]]:
    """The bytes of each job's ranges (``out[k][i]``: job ``k``'s ``i``-th range), as views of
    obstore's buffers; fewer bytes only where a file ends.

    ``failed(k, error)`` is called (and must raise) when job ``k``'s file cannot be read:
    its ranges' requests failed, and so did its own retried read of them.
    """
    from fsspec.asyn import get_loop, sync

    out: list[list[memoryview]] = [[memoryview(b"")] * len(starts) for _, starts, _ in jobs]
    requests: list[tuple[Any, str, int, int]] = []
    where: list[tuple[int, int]] = []
    for k, (src, starts, ends) in enumerate(jobs):
        if src.transport != "obstore":
            # A forked child or a redirected bucket: the file reads through s3fs itself.
            try:
                out[k] = src.read_many(starts, ends)
            except OSError as e:
                failed(k, e)
            continue
        for i, (a, b) in enumerate(zip(starts, ends)):
            if b > a:
                requests.append((src.store, src.path, a, b))
                where.append((k, i))
    if not requests:
        return out
    limit = gap.requests_in_flight()
    started = time.perf_counter()
    results = sync(get_loop(), _gather, requests, limit)
    again: dict[int, list[int]] = defaultdict(list)
    sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # store key: requests, bytes
    for (k, i), got in zip(where, results):
        if isinstance(got, BaseException):
            again[k].append(i)
            continue
        out[k][i] = got
        size = sizes[jobs[k][0].store_key]
        size[0] += 1
        size[1] += len(got)
    for key, (n, nbytes) in sizes.items():
        gap.record(key, n, nbytes, started, limit)
    for k, idx in again.items():
        src, starts, ends = jobs[k]
        try:
            views = src.read_many([starts[i] for i in idx], [ends[i] for i in idx])
        except OSError as e:
            failed(k, e)
        for i, view in zip(idx, views):
            out[k][i] = view
    return out
