"""Requests to an object store retried through transient failures, up to a deadline: one policy,
reads and writes, every transport.

A request that fails because the store could not be reached, did not answer
in time, dropped the connection, or answered HTTP 5xx or "slow down" is sent
again after a pause that grows exponentially with full jitter (a random
pause between 0 and ``min(cap, base * 2**n)``, AWS's "full jitter": clients
that failed together do not come back together), until it succeeds or
``storage_retry_deadline`` seconds (docs/CONFIG.md) have passed since its
first try. Then it fails with :class:`~shardcat.errors.StorageUnreachableError`,
saying what to check. A failure that another try cannot mend (a missing
bucket or object, missing or refused credentials, a full disk, a bug) fails
at once: which is which is :func:`.translate.is_transient`'s call.

Both S3 transports go through :func:`call`, for reads and for uploads:
obstore (whose own retries are off, so that this is the one policy:
:mod:`.objstore`, :mod:`.objput`) and fsspec (:mod:`.sources`,
:mod:`.cache`, :mod:`.multipart`). Only requests that may be sent twice are
retried: a read, a part of a multipart upload (same part number, same
bytes), a PUT of a whole object (same key, same bytes). A publication that
must happen once (``If-None-Match: *``, a multipart completion) is sent
again too, and a refusal that says the object exists (or the upload is
gone) is checked against the object: if it is the one this upload sent (its
token, :data:`.multipart.TOKEN`), a try that failed had in fact been
applied, and the upload succeeded; else it is another writer's, and
nothing is replaced (:mod:`.atomic`). Each try is bounded too, so that a
store that accepts connections and never answers fails in time: an async
fsspec filesystem's call (s3fs, gcsfs, adlfs) is cancelled when the time
left runs out (fsspec's ``timeout=``); obstore's requests time out after
:func:`request_timeout`. An s3fs request that carries an upload's bytes (a
PUT, a part) is not cut off: on a slow link it may rightly outlast the
deadline, and botocore's read timeout catches a store that stops answering.
botocore's and s3fs's own retries stay as they are configured: they happen
within one try.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from .. import config
from ..errors import ShardcatError, StorageError, StorageUnreachableError
from .fs import redact
from .translate import first_line, is_backend_error, is_timeout, is_transient, translate

__all__ = [
    "DEFAULT_DEADLINE",
    "RetryPolicy",
    "call",
    "gave_up",
    "is_retryable",
    "obstore_retry_config",
    "request_timeout",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_DEADLINE = 60.0
"""Seconds a request keeps retrying (``storage_retry_deadline``)."""
_KEY = "storage_retry_deadline"
# A try gets at least this long, even when less of the deadline is left: a
# store that has just come back answers, rather than the last try being cut
# off before its first byte.
_MIN_TRY = 1.0
# obstore's request timeout (its default): a try of a healthy store never
# nears it; a hung one is given up on after it, and tried again.
_MAX_REQUEST = 30.0
_CONNECT = 5.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How requests retry: until ``deadline`` seconds after the first try, pausing
    ``uniform(0, min(cap, base * 2**n))`` seconds after the n-th failure (n from 0).

    ``deadline`` 0: one try, no retries (each library's own behaviour).
    """

    deadline: float = DEFAULT_DEADLINE
    base: float = 0.1
    cap: float = 5.0

    def __post_init__(self) -> None:
        if not (self.deadline >= 0 and self.base > 0 and self.cap >= self.base):
            raise ValueError(f"a retry policy needs deadline >= 0 and 0 < base <= cap: {self}")

    @classmethod
    def from_config(cls) -> RetryPolicy:
        """The policy of the ``storage_retry_deadline`` setting (``SHARDCAT_STORAGE_RETRY_DEADLINE``).

        Raises
        ------
        StorageError
            The setting is not a number of seconds, 0 or more.
        """
        raw = config.get(_KEY)
        if isinstance(raw, str):
            raw = raw.strip()
        if raw is None or raw == "":
            return cls()
        try:
            deadline = float(raw)
            if isinstance(raw, bool) or not deadline >= 0 or deadline == float("inf"):
                raise ValueError
        except (TypeError, ValueError):
            raise StorageError(
                f"{config.env_var(_KEY)}={raw!r}: give the seconds a storage request may retry, e.g. 60 "
                "(0: no retries)"
            ) from None
        return cls(deadline=deadline)

    def pause(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 for the first)."""
        ceiling = min(self.cap, self.base * 2.0 ** min(failures - 1, 32))
        return random.uniform(0.0, ceiling)


def request_timeout(policy: RetryPolicy | None = None) -> float:
    """Seconds one request of obstore may take: 30, or less under a short deadline
    (half of it, at least a second), so that a hung store is tried more than once."""
    policy = RetryPolicy.from_config() if policy is None else policy
    if policy.deadline == 0:
        return _MAX_REQUEST
    return max(_MIN_TRY, min(_MAX_REQUEST, policy.deadline / 2))


def obstore_retry_config(*, parts: bool = False) -> dict[str, Any]:
    """obstore's ``retry_config`` and ``client_options`` timeouts, as
    ``{"retry_config": ..., "client_options": ...}``.

    No retries of obstore's own: :func:`call` retries reads and PUTs, under
    the one deadline. ``parts``: a store for obstore's multipart upload from
    memory (:mod:`.objput`), whose parts only object_store can send again
    (obstore has no call that sends one part): it retries each request
    itself, for at most the same deadline, its pauses within the same bounds.
    """
    policy = RetryPolicy.from_config()
    timeout = request_timeout(policy)
    retries = parts and policy.deadline > 0
    return {
        "retry_config": {
            # Bounded: at the policy's longest pause (cap), the deadline allows no more.
            "max_retries": int(policy.deadline / policy.base) + 1 if retries else 0,
            "backoff": {
                "init_backoff": timedelta(seconds=policy.base),
                "max_backoff": timedelta(seconds=policy.cap),
                "base": 2,
            },
            "retry_timeout": timedelta(seconds=policy.deadline if retries else _MAX_REQUEST),
        },
        "client_options": {
            "timeout": timedelta(seconds=timeout),
            "connect_timeout": timedelta(seconds=min(_CONNECT, timeout)),
        },
    }


def call(
    attempt: Callable[[float | None], T],
    url: str,
    *,
    policy: RetryPolicy | None = None,
) -> T:
    """``attempt(timeout)`` until it returns, retrying transient failures under ``policy``.

    ``attempt`` sends one request (a read, a part, a PUT): it must be safe to
    send again (see the module's docstring for a publication that must happen
    once). ``timeout`` is how long this try may take (the deadline's time
    left, at least a second), or None without a deadline; a request that
    cannot be cut off ignores it. ``url`` names the file in messages (without credentials).

    Raises
    ------
    StorageUnreachableError
        Transient failures went on past the deadline: the message says what
        to check (the endpoint, the network) and how to wait longer.
    ShardcatError
        A permanent failure, at its first try, translated as
        :func:`.translate.translate` does; other exceptions (bugs) as they are.
    """
    policy = RetryPolicy.from_config() if policy is None else policy
    if policy.deadline == 0:
        return attempt(None)
    start = time.monotonic()
    stop = start + policy.deadline
    failures = 0
    telling: BaseException | None = None  # the last failure that says more than "no answer"
    while True:
        try:
            return attempt(max(_MIN_TRY, stop - time.monotonic()))
        except Exception as e:
            if not is_retryable(e):
                raise
            url = redact(url)
            failures += 1
            if not is_timeout(e):
                telling = e
            left = stop - time.monotonic()
            if left <= 0:
                last = telling or e
                raise _gave_up(last, url, failures, time.monotonic() - start, policy) from e
            pause = min(policy.pause(failures), left)
            if failures == 1:
                # INFO, not WARNING: the CLI prints warnings, and a failed request is one line.
                _log.info(
                    "%s: %s; retrying for up to %.0f s (%s)",
                    url,
                    _why(e, url),
                    policy.deadline,
                    config.env_var(_KEY),
                )
            _log.debug("%s: try %d failed; next in %.2f s", url, failures, pause)
            time.sleep(pause)


def is_retryable(e: BaseException) -> bool:
    """Whether :func:`call` retries after ``e``: a transient failure of the store."""
    if isinstance(e, ShardcatError):
        return isinstance(e, StorageUnreachableError) and not gave_up(e)
    return is_backend_error(e) and is_transient(e)


def gave_up(e: BaseException) -> bool:
    """Whether ``e`` is :func:`call` giving up: the store stayed unreachable past the deadline
    (an operation of many requests stops there, rather than wait a deadline per request)."""
    return isinstance(e, StorageUnreachableError) and getattr(e, "deadline_passed", False)


def _why(e: BaseException, url: str) -> str:
    """What went wrong, without translate's advice (the final message gives its own)."""
    error = translate(e, url)
    text = first_line(error)
    if isinstance(error, StorageUnreachableError):
        return text.split(": check ", 1)[0]
    if "answered HTTP" in text:
        return text.split("; retry later", 1)[0]
    if is_timeout(e):
        return f"{url}: no answer in time"
    # obstore: "Generic S3 error: Error performing GET <url> in 1.5s - HTTP error: <why>"
    detail = first_line(e).rsplit(" - ", 1)[-1]
    return f"{url}: no answer ({detail[:200]})"


def _gave_up(
    e: BaseException, url: str, tries: int, took: float, policy: RetryPolicy
) -> StorageUnreachableError:
    counted = f"{tries} try" if tries == 1 else f"{tries} tries"
    error = StorageUnreachableError(
        f"{_why(e, url)}; still failing after {counted} in {took:.1f} s: check the endpoint "
        "and that the store is up and reachable from here, or wait longer "
        f"({config.env_var(_KEY)}, now {policy.deadline:g} s)",
        path=url,
    )
    error.deadline_passed = True  # type: ignore[attr-defined]  # not retried again by an outer call
    return error
