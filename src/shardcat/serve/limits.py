"""The limits of ``shardcat serve``: a request rate per token, batch sizes, response bytes.

The rate is a token bucket per caller (a token's id, or an anonymous
client's address): ``burst`` requests at once, refilled at ``rate`` per
second. Each worker process keeps its own buckets, so with ``--workers N``
a caller may reach N times the rate (docs/SERVE.md); what it bounds is the
load one caller puts on one process and on the catalog behind it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

from .._units import format_bytes
from ..errors import RateLimitedError, RequestTooLargeError

__all__ = ["RateLimiter", "check_batch", "check_bytes"]

_MAX_CALLERS = 100_000  # buckets kept; the full ones are dropped beyond it (they hold no debt)


class RateLimiter:
    """Token buckets, one per caller: :meth:`take` one request or raise :class:`RateLimitedError`.

    Parameters
    ----------
    rate:
        Requests per second refilled (0: no limit).
    burst:
        The bucket's size: requests a caller may make at once.
    clock:
        Seconds, monotonic (tests pass their own).
    """

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, at)

    def take(self, caller: str) -> None:
        """Count one request of ``caller``.

        Raises
        ------
        RateLimitedError
            If the caller's bucket is empty; ``retry_after`` says when one is back.
        """
        if self.rate <= 0:
            return
        now = self._clock()
        with self._lock:
            tokens, at = self._buckets.get(caller, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[caller] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
                raise RateLimitedError(
                    f"too many requests: this token may make {self.rate:g} per second "
                    f"(bursts of {self.burst}); retry in {math.ceil(wait)} s",
                    retry_after=wait,
                )
            self._buckets[caller] = (tokens - 1.0, now)
            if len(self._buckets) > _MAX_CALLERS:
                self._forget_full(now)

    def _forget_full(self, now: float) -> None:
        # A full bucket is what a new caller gets: forgetting it changes nothing.
        full = [
            c
            for c, (tokens, at) in self._buckets.items()
            if tokens + (now - at) * self.rate >= self.burst
        ]
        for caller in full:
            del self._buckets[caller]


def check_batch(count: int, limit: int) -> None:
    """Refuse a batch of more than ``limit`` keys.

    Raises
    ------
    RequestTooLargeError
        If ``count > limit``.
    """
    if count > limit:
        raise RequestTooLargeError(
            f"a batch asks for {count} keys; this server answers at most {limit} per request: "
            "split it (the limit is the setting serve_max_batch_keys)"
        )


def check_bytes(size: int, limit: int, what: str, *, ranged: bool = False) -> None:
    """Refuse a response body of more than ``limit`` bytes.

    Raises
    ------
    RequestTooLargeError
        If ``size > limit``; the message says how to get the bytes anyway.
    """
    if size > limit:
        how = (
            "ask for it in parts with Range requests"
            if ranged
            else "ask for fewer keys or entries at a time"
        )
        raise RequestTooLargeError(
            f"{what} is {format_bytes(size)}, more than the {format_bytes(limit)} this server "
            f"sends in one response: {how} (the limit is the setting serve_max_response_bytes)"
        )
