"""The whole, sound records of a stream buffer, in Python: the twins of the compiled runs.

:func:`decode_run`, :func:`decode_records` and :func:`iter_records` take the
compiled codec's arguments (``format/ccodec/stream.c``) and return what it
returns, so :mod:`.stream` calls one name whichever codec runs. Each decodes
records with :func:`.records.decode_record` until the first that is not
whole in ``view[at:stop]``, would pass the file offset ``end`` (-1: none), or
does not decode; it stops in front of that record, and the stream's
one-record path reads more or raises the reference's error there. As the compiled
runs, they read only a read-only byte memoryview (anything else: no record).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..errors import ShardcatError
from .entries import Record
from .records import decode_record
from .spec import ALIGNMENTS, RECORD_HEAD_STRUCT

__all__ = ["RecordRun", "decode_records", "decode_run", "iter_records"]

_HEAD = RECORD_HEAD_STRUCT.size
_LAST = (1 << 63) - 1  # the compiled runs count offsets and indexes in signed 64 bits


def _length(
    view: memoryview, at: int, stop: int, pos: int, end: int, index: int, alignment: int
) -> int:
    """The length of the record at ``view[at:]`` if it lies whole before ``stop`` and ``end``, else 0."""
    if (end >= 0 and pos >= end) or stop - at < _HEAD or index == _LAST:
        return 0
    length = int.from_bytes(view[at + 8 : at + 16], "little")
    if (
        length < _HEAD
        or length % alignment
        or (end >= 0 and length > end - pos)
        or stop - at < length
        or length > _LAST - pos
    ):
        return 0
    return length


def _plain(view: Any) -> bool:
    """Whether ``view`` is what the compiled runs read: a read-only, contiguous byte memoryview."""
    try:
        return (
            type(view) is memoryview
            and view.readonly
            and view.ndim == 1
            and view.format == "B"
            and view.c_contiguous
        )
    except ValueError:  # released
        return False


class RecordRun:
    """:func:`iter_records`'s iterator: records decoded as they are asked for.

    After it stops, :attr:`used` is the bytes it consumed and :attr:`count`
    the records it yielded.
    """

    __slots__ = (
        "_args",
        "_at",
        "_done",
        "_end",
        "_index",
        "_pos",
        "_start",
        "_stop",
        "_view",
        "count",
    )

    def __init__(
        self,
        view: memoryview,
        at: int,
        stop: int,
        pos: int,
        end: int,
        alignment: int,
        index: int,
        names: frozenset[str] | None,
        text_cache: dict[Any, Any],
        check_padding: bool,
        path: str | None,
    ) -> None:
        self._view = view
        self._start = self._at = at
        self._pos = pos
        self._end = end
        self._index = index
        self._args = (alignment, names, text_cache, check_padding, path)
        self.count = 0
        # As the compiled run: a wrong alignment or a range outside the view decodes nothing.
        self._done = (
            alignment not in ALIGNMENTS or not _plain(view) or at < 0 or pos < 0 or stop > len(view)
        )
        self._stop = stop

    @property
    def used(self) -> int:
        """Bytes of the buffer consumed so far (the records yielded)."""
        return self._at - self._start

    def __iter__(self) -> Iterator[Record]:
        return self

    def __next__(self) -> Record:
        if self._done:
            raise StopIteration
        at, pos, index = self._at, self._pos, self._index
        alignment, names, cache, check_padding, path = self._args
        length = _length(self._view, at, self._stop, pos, self._end, index, alignment)
        if not length:
            self._done = True
            raise StopIteration
        try:
            rec = decode_record(
                self._view[at : at + length],
                path=path,
                offset=pos,
                alignment=alignment,
                index=index,
                names=names,
                text_cache=cache,
                check_padding=check_padding,
            )
        except (ShardcatError, ValueError):
            # The one-record path decodes this record again and raises its error.
            self._done = True
            raise StopIteration from None
        self._at, self._pos, self._index = at + length, pos + length, index + 1
        self.count += 1
        return rec


def iter_records(
    view: memoryview,
    at: int,
    stop: int,
    pos: int,
    end: int,
    alignment: int,
    index: int,
    names: frozenset[str] | None,
    text_cache: dict[Any, Any],
    check_padding: bool,
    path: str | None,
) -> RecordRun:
    """The whole, sound records of ``view[at:stop]`` as an iterator (``_ccodec.iter_records``)."""
    return RecordRun(
        view, at, stop, pos, end, alignment, index, names, text_cache, check_padding, path
    )


def decode_records(
    view: memoryview,
    at: int,
    stop: int,
    pos: int,
    end: int,
    alignment: int,
    index: int,
    names: frozenset[str] | None,
    text_cache: dict[Any, Any],
    check_padding: bool,
    path: str | None,
) -> tuple[list[Record], int]:
    """The whole, sound records of ``view[at:stop]`` and the bytes they use (``_ccodec.decode_records``)."""
    run = RecordRun(
        view, at, stop, pos, end, alignment, index, names, text_cache, check_padding, path
    )
    return list(run), run.used


def decode_run(
    view: memoryview,
    at: int,
    stop: int,
    pos: int,
    end: int,
    alignment: int,
    index: int,
    names: frozenset[str] | None,
    text_cache: dict[Any, Any],
    check_padding: bool,
    path: str | None,
) -> tuple[list[tuple[memoryview, Record]], int]:
    """:func:`decode_records` with each record's view (``_ccodec.decode_run``)."""
    run = RecordRun(
        view, at, stop, pos, end, alignment, index, names, text_cache, check_padding, path
    )
    pairs = []
    start = at
    for rec in run:
        pairs.append((view[start : start + rec.length], rec))
        start += rec.length
    return pairs, run.used
