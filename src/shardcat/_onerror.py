"""What a reader does with a sample that does not decode: ``on_error="raise"|"skip"|"log"``.

One rule for every reader (the streaming ones, the map-style ones, the
Dask bag and dataframe): a sample is bad when decoding it raises
:class:`~shardcat.errors.SampleDecodeError` (its bytes are not what its
content type says; the shard is sound). Nothing else is the sample's fault:
a store that cannot be reached, a missing or replaced shard, a catalog
error raise under every ``on_error``. :func:`drop_or_raise` applies the
choice, so readers differ only in what takes a dropped sample's place.

Standard library and :mod:`shardcat.errors` only: ``orchestration``
(``shardcat.read``) and ``readers`` both use it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from typing import Final, Literal

from .errors import SampleDecodeError

__all__ = [
    "BAD_SAMPLE",
    "DROPPED",
    "ON_ERROR",
    "Dropped",
    "OnError",
    "Skipped",
    "check_on_error",
    "drop_or_raise",
]

log = logging.getLogger("shardcat.readers")

OnError = Literal["raise", "skip", "log"]
"""What a reader does with a sample that does not decode (:class:`~shardcat.errors.SampleDecodeError`):
raise it, drop it silently, or drop it with a warning; dropped samples are counted."""
ON_ERROR: tuple[OnError, ...] = ("raise", "skip", "log")

BAD_SAMPLE: Final = SampleDecodeError
"""The error that means "this sample is bad" (catch it, then call :func:`drop_or_raise`)."""

Skipped = Callable[[SampleDecodeError], None]
"""Told of each sample a reader dropped (``on_error="skip"`` or ``"log"``)."""


class Dropped(enum.Enum):
    """The type of :data:`DROPPED` (an enum of one, so ``x is DROPPED`` narrows for mypy)."""

    DROPPED = "dropped"


DROPPED: Final = Dropped.DROPPED
"""What :func:`drop_or_raise` returns in a dropped sample's place."""


def check_on_error(on_error: str) -> OnError:
    """``on_error`` if it is one of :data:`ON_ERROR`.

    Raises
    ------
    ValueError
        If it is not.
    """
    if on_error not in ON_ERROR:
        raise ValueError(
            f"on_error must be one of {', '.join(map(repr, ON_ERROR))}, not {on_error!r}"
        )
    return on_error


def drop_or_raise(
    error: SampleDecodeError,
    on_error: OnError,
    skipped: Skipped | None = None,
    *,
    dataset: str | None = None,
    path: str | None = None,
) -> Dropped:
    """Raise ``error`` (``"raise"``), or drop its sample: warn (``"log"``), tell ``skipped``.

    ``dataset`` and ``path`` (the shard as registered, without credentials)
    complete what the error names; ``path`` replaces the record's own (which
    may be a cached copy).

    Raises
    ------
    SampleDecodeError
        ``error``, with ``on_error="raise"``.
    """
    error.locate(dataset=dataset)
    if path:
        error.path = path
    if on_error == "raise":
        raise error
    if on_error == "log":
        log.warning("skipped a sample: %s", error.message)
    if skipped is not None:
        skipped(error)
    return DROPPED
