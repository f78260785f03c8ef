"""Dependency-free contracts shared by the layers.

``format`` reads bytes through :class:`RangeSource`; ``storage`` implements it
on top of fsspec. Nothing here imports fsspec, SQLAlchemy or Dask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal, Protocol, get_args, runtime_checkable

__all__ = ["ON_DUPLICATE", "ByteRange", "OnDuplicate", "RangeSource", "StorageOptions"]

OnDuplicate = Literal["error", "replace", "skip"]
"""What an append does with a key already live in the dataset (see ``shardcat.write``)."""
ON_DUPLICATE: tuple[str, ...] = get_args(OnDuplicate)

StorageOptions = Mapping[str, Any]
"""Keyword arguments for an fsspec filesystem (credentials, endpoint, ...)."""


@dataclass(frozen=True, slots=True)
class ByteRange:
    """The half-open byte range ``[start, end)`` of one file."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end < self.start:
            raise ValueError(f"invalid byte range [{self.start}, {self.end})")

    @property
    def length(self) -> int:
        return self.end - self.start


@runtime_checkable
class RangeSource(Protocol):
    """Random and sequential read access to one immutable file.

    Implementations must be safe to call from one thread at a time; readers
    that need concurrency open one source per thread.
    """

    @property
    def name(self) -> str:
        """The path or URL, for error messages (never with credentials)."""
        ...

    def size(self) -> int:
        """The file's size in bytes."""
        ...

    def read(self, start: int, end: int) -> bytes:
        """Return bytes ``[start, end)``; fewer only if the file is shorter."""
        ...

    def read_suffix(self, length: int) -> bytes:
        """Return the last ``length`` bytes, or the whole file if it is shorter."""
        ...

    def read_ranges(self, ranges: Sequence[ByteRange]) -> list[bytes]:
        """Return the bytes of each range, in order (concurrently where possible)."""
        ...

    def open_stream(self, start: int = 0) -> BinaryIO:
        """Return a sequential binary stream positioned at ``start``; caller closes it."""
        ...

    def close(self) -> None:
        """Release what the source opened."""
        ...
