"""The merge gap of remote batch reads, derived from what the store's own requests measure.

The cost model. A batch sends its merged ranges ``C`` at a time (the
requests it keeps in flight: the ``remote_in_flight`` setting,
:func:`requests_in_flight`, 64 by default; s3fs's connection pool is sized
to match, :func:`.fs.resolve`). One request
costs a first-byte latency ``L``; its bytes then come at ``B`` bytes/s
(what one request gets). Reading through a gap of ``g`` bytes instead of
sending another request trades ``L / C`` of the batch's time (the request's
latency, overlapped with the ``C - 1`` others in flight) for ``g / B`` of
transfer, so gaps up to::

    gap = L * B / C        clamped to [MIN_GAP, MAX_GAP]

are read through. Where every connection has a bandwidth of its own, the
time-optimal gap is ``C`` times larger (``L * B``), but each byte of it is
also a byte of egress and of memory; ``/ C`` is the gap that is right when the
requests in flight share the link, and errs towards fewer bytes otherwise.

A second bound holds whatever the measurements say: the gaps one batch reads
through add at most :data:`READ_BUDGET` (0.75) times the bytes it wants
(:func:`budget_gap`), so a batch never fetches more than 1.75 times its
records' bytes, under twice their payloads (the records' keys and framing
take the rest). Merging the smallest gaps first is what saves the most requests for a
given number of bytes, so the bound is one more threshold.

``L`` and ``B`` come from the requests themselves: every remote read reports
``(requests, bytes, seconds, requests in flight)`` to its store's
:class:`Estimator` (one per store, keyed by client and endpoint,
:data:`MAX_STORES` of them at most; a store's first call, which also sets up
the client, is not counted). From one call it takes a request's time
``y = seconds * min(requests, C) / requests`` and mean size ``x``; a small
request (transfer under half the latency) updates the latency with
``y - x / B``, a large one (a stream's chunk, a wide merge) the bandwidth with
``x / (y - L)``; both as exponentially weighted means (weight
:data:`ALPHA`). Before a store has answered, :data:`PRIOR_LATENCY` and
:data:`PRIOR_BANDWIDTH` (S3 in its region) stand in: a start gap of
``20 ms * 100 MB/s / 64 = 30 KiB``, held to the read budget like any other.

An explicit ``remote_max_gap`` (argument, setting or ``SHARDCAT_REMOTE_MAX_GAP``)
replaces all of this; local files keep ``LOCAL_MAX_GAP``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import config
from .._ranges import furthest_ends

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "IN_FLIGHT_ENV",
    "MAX_GAP",
    "MIN_GAP",
    "PRIOR_BANDWIDTH",
    "PRIOR_LATENCY",
    "READ_BUDGET",
    "Estimate",
    "Estimator",
    "budget_gap",
    "derived_gap",
    "estimate",
    "fsspec_store_key",
    "gap_for",
    "observe",
    "record",
    "requests_in_flight",
    "stream_chunk",
]

MIN_GAP = 16 * 1024
"""The derived gap is never below this: a gap this small costs little whatever the link."""
MAX_GAP = 1024 * 1024
"""Nor above this: beyond it a merged read holds mostly bytes nobody asked for."""
PRIOR_LATENCY = 0.020
"""Seconds to the first byte assumed before a store has answered (S3 in the caller's region)."""
PRIOR_BANDWIDTH = 100e6
"""Bytes/s one request is assumed to get before a large request has measured it."""
IN_FLIGHT_ENV = config.env_var("remote_in_flight")
"""Environment variable: requests a remote batch keeps in flight (:func:`requests_in_flight`)."""
READ_BUDGET = 0.75
"""Gaps a batch reads through add at most this many times the bytes it wants: a batch
fetches at most 1.75 x its records, under twice their payloads with the records' framing."""
ALPHA = 0.2
"""Weight of each new measurement in the running means."""
MAX_STORES = 64
"""Stores whose estimates are kept (the least recently used is dropped beyond this)."""
_MIN_BANDWIDTH, _MAX_BANDWIDTH = 1e6, 1e11


def requests_in_flight() -> int:
    """Requests a batch read keeps in flight on an object store: the ``remote_in_flight``
    setting (``SHARDCAT_REMOTE_IN_FLIGHT``, docs/CONFIG.md).

    Raises
    ------
    ValueError
        The setting is not a whole number of at least 1 (the message names the variable).
    """
    raw = config.get("remote_in_flight")
    try:
        value = int(str(raw).strip()) if not isinstance(raw, bool) else 0
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"{IN_FLIGHT_ENV}={raw!r} is not a number of requests: write a whole number of at"
            " least 1 (e.g. 64; 1 sends a batch's requests one after another)"
        )
    return value


STREAM_CHUNK_MIN = 8 * 1024 * 1024
"""A stream's requests are never smaller than this (each costs a round trip and some CPU)."""
STREAM_CHUNK_MAX = 16 * 1024 * 1024
"""Nor larger: the read-ahead holds a few of them (memory, format/prefetch.py)."""
STREAM_IDLE = 0.1
"""The share of a streaming request's time its connection may spend waiting for the first byte."""


def stream_chunk(key: str) -> int:
    """Bytes per streaming request to store ``key``: long enough that the first-byte latency
    is at most :data:`STREAM_IDLE` of the request (``L * B * (1 - f) / f``: 9 x L x B), in whole
    MiB within [:data:`STREAM_CHUNK_MIN`, :data:`STREAM_CHUNK_MAX`].

    A connection that waits ``L`` for every chunk of ``T = chunk / B`` seconds moves
    ``T / (T + L)`` of its line rate: 8 MiB at 20 ms and 90 MB/s is 0.82 of it, 16 MiB 0.90.
    """
    e = estimate(key)
    want = e.latency * e.bandwidth * (1 - STREAM_IDLE) / STREAM_IDLE
    mib = 1024 * 1024
    return int(min(STREAM_CHUNK_MAX, max(STREAM_CHUNK_MIN, -(-want // mib) * mib)))


def derived_gap(latency: float, bandwidth: float, in_flight: int) -> int:
    """``latency * bandwidth / in_flight`` bytes, clamped to ``[MIN_GAP, MAX_GAP]``.

    Raises
    ------
    ValueError
        ``in_flight`` is below 1, or ``latency`` or ``bandwidth`` is negative.
    """
    if in_flight < 1 or latency < 0 or bandwidth < 0:
        raise ValueError(
            f"derived_gap: latency={latency!r} s, bandwidth={bandwidth!r} B/s and "
            f"in_flight={in_flight!r} must be non-negative (in_flight at least 1)"
        )
    return int(min(MAX_GAP, max(MIN_GAP, latency * bandwidth / in_flight)))


@dataclass(frozen=True, slots=True)
class Estimate:
    """What a store's requests measured (the priors where nothing has yet)."""

    latency: float
    """Seconds to the first byte of one request."""
    bandwidth: float
    """Bytes/s one request gets."""
    samples: int
    """Calls measured (0: the priors)."""
    bandwidth_samples: int
    """Of those, calls large enough to measure the bandwidth (0: its prior)."""


class Estimator:
    """Running estimates of one store's latency and per-request bandwidth (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latency = PRIOR_LATENCY
        self._bandwidth = PRIOR_BANDWIDTH
        self._warm = False
        self._samples = 0
        self._latency_samples = 0
        self._bandwidth_samples = 0

    def observe(self, requests: int, nbytes: int, seconds: float, in_flight: int) -> None:
        """One call that sent ``requests`` requests, ``in_flight`` at a time, and got
        ``nbytes`` bytes in ``seconds``."""
        if requests < 1 or seconds <= 0:
            return
        if not self._warm:
            # A store's first call also pays for the client's setup (its session,
            # credentials, the first connections): not a measure of the store.
            self._warm = True
            return
        y = seconds * min(requests, max(1, in_flight)) / requests
        x = max(0, nbytes) / requests
        with self._lock:
            transfer = x / self._bandwidth
            if transfer < self._latency / 2:
                sample = max(0.0, y - transfer)
                # The first measurement replaces the prior rather than averaging with it.
                if self._latency_samples == 0:
                    self._latency = sample
                else:
                    self._latency += ALPHA * (sample - self._latency)
                self._latency_samples += 1
            elif y - self._latency > y / 4:
                sample = min(_MAX_BANDWIDTH, max(_MIN_BANDWIDTH, x / (y - self._latency)))
                if self._bandwidth_samples == 0:
                    self._bandwidth = sample
                else:
                    self._bandwidth += ALPHA * (sample - self._bandwidth)
                self._bandwidth_samples += 1
            self._samples += 1

    def estimate(self) -> Estimate:
        with self._lock:
            return Estimate(self._latency, self._bandwidth, self._samples, self._bandwidth_samples)


_stores: OrderedDict[str, Estimator] = OrderedDict()
_stores_lock = threading.Lock()


def _forget_in_child() -> None:
    # A forked child may inherit a lock another thread of its parent held: it starts
    # afresh (its own connections measure its own requests anyway).
    global _stores, _stores_lock
    _stores = OrderedDict()
    _stores_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _estimator(key: str) -> Estimator:
    with _stores_lock:
        found = _stores.get(key)
        if found is None:
            found = _stores[key] = Estimator()
            while len(_stores) > MAX_STORES:
                _stores.popitem(last=False)
        else:
            _stores.move_to_end(key)
        return found


def observe(key: str, requests: int, nbytes: int, seconds: float, in_flight: int) -> None:
    """Report one call's requests to the estimator of store ``key`` (see :meth:`Estimator.observe`)."""
    _estimator(key).observe(requests, nbytes, seconds, in_flight)


def record(key: str, requests: int, nbytes: int, started: float, in_flight: int) -> None:
    """:func:`observe` a call that began at ``started`` (``time.perf_counter()``) and ends now."""
    _estimator(key).observe(requests, nbytes, time.perf_counter() - started, in_flight)


def estimate(key: str) -> Estimate:
    """What store ``key``'s requests have measured so far (the priors before any)."""
    return _estimator(key).estimate()


def gap_for(key: str, in_flight: int) -> int:
    """The gap batch reads of store ``key`` read through (:func:`derived_gap` of its estimate)."""
    e = estimate(key)
    return derived_gap(e.latency, e.bandwidth, in_flight)


def budget_gap(file: np.ndarray, start: np.ndarray, end: np.ndarray) -> int:
    """The largest gap that keeps the bytes read through gaps within :data:`READ_BUDGET`
    times the bytes of the ranges (sorted by ``(file, start)``, as ``merge_sorted`` takes them).

    Merging reads through every gap of at most the returned size between
    ranges of one file: the smallest gaps first, as many as fit.
    """
    import numpy as np

    file = np.asarray(file, dtype=np.int64)
    start = np.asarray(start, dtype=np.int64)
    end = np.maximum(np.asarray(end, dtype=np.int64), start)
    if len(start) < 2:
        return MAX_GAP
    reach = furthest_ends(file, end)
    gaps = start[1:] - reach[:-1]
    gaps = np.sort(gaps[(file[1:] == file[:-1]) & (gaps > 0)])
    if len(gaps) == 0:
        return MAX_GAP
    fits = int(np.searchsorted(np.cumsum(gaps), READ_BUDGET * int((end - start).sum()), "right"))
    if fits == len(gaps):
        return int(gaps[-1])
    # Just under the first gap that does not fit (gaps of its size do not fit either).
    return max(0, int(gaps[fits]) - 1)


def fsspec_store_key(fs: Any) -> str:
    """The estimator key of an fsspec filesystem: its protocol and endpoint."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    kwargs = getattr(fs, "client_kwargs", None) or {}
    endpoint = getattr(fs, "endpoint_url", None) or kwargs.get("endpoint_url") or "default"
    return f"fsspec {protocol} {endpoint}"
