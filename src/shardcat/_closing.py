"""The writers' ``with`` protocol: close (publish, commit) on success, abort on an error."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeVar

__all__ = ["CloseOrAbort"]

_W = TypeVar("_W", bound="CloseOrAbort")  # typing.Self is Python 3.11+


class CloseOrAbort:
    """Leaving a ``with`` block calls ``close()``, or ``abort()`` if the block raised.

    For :class:`~shardcat.format.ShardWriter`, ``RollingShardWriter`` and
    :class:`~shardcat.DatasetWriter`: nothing half-written is ever published.
    """

    def close(self) -> Any:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
