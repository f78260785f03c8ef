"""Streaming a shard in file order, without its index: the sequential decoder.

Used by :meth:`ShardReader.iter_records <shardcat.format.ShardReader.iter_records>`,
by full verification (:mod:`.verify`) and by :func:`iter_partial`, which
salvages the complete records of a shard whose write was interrupted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import Any, BinaryIO

from .._types import RangeSource
from ..errors import FormatError, TruncatedError
from . import recordcodec
from .entries import Record
from .header import Header
from .prefetch import ReadAhead, ReadSlots, stream_chunk, wants_read_ahead
from .sources import as_source
from .spec import HEADER_SIZE, RECORD_HEAD_STRUCT, data_start

__all__ = ["iter_partial", "stream_record_batches", "stream_records"]

_STREAM_CHUNK = 8 * 1024 * 1024
_RUN_BYTES = 256 * 1024
"""Bytes of records decoded per batch (a chunk is decoded in several batches).

A batch's list keeps its records alive until the caller moves past it, and a
record whose entries were read is back under the cyclic GC. With a whole
8 MiB chunk per batch (~1,600 records of 2-8 KiB) the young collections found
most of them alive and promoted them, so full collections ran every ~20,000
records and walked the whole heap: in a process holding boto3 and a moto
server (the S3 benchmark) 0.3-0.6 s of GC per 210 MB streamed, over half of
the wall time, and 5x the CPU of 256 KiB batches (~50 records), whose
records die young (``benchmarks/README.md`` at a731c64, streaming on S3).
"""


def iter_partial(
    source: RangeSource | BinaryIO | bytes | str | os.PathLike[str], name: str | None = None
) -> Iterator[Record]:
    """Stream the complete records of a shard whose write was interrupted.

    Stops quietly at the first incomplete or damaged record (or at the
    footer of a complete shard); the records it yields have all passed their
    CRCs. Use it to salvage a partial shard.

    Raises
    ------
    FormatError, VersionError, TruncatedError
        The file does not start with a valid shard header.
    """
    src, owned = as_source(source, name)
    try:
        # A file that is not a shard at all (or of another major version) is an error,
        # not an empty salvage.
        Header.decode(src.read(0, HEADER_SIZE), path=src.name)
        try:
            # The file size bounds every record length, so a damaged length cannot
            # make the reader allocate absurd buffers.
            for batch in stream_record_batches(src, src.name, src.size(), None, None):
                yield from batch
        except FormatError:
            return
    finally:
        if owned:
            src.close()


def stream_records(
    source: RangeSource,
    path: str,
    end: int | None,
    names: frozenset[str] | None,
    header_crc: int | None,
    verify: bool = False,
) -> Iterator[tuple[memoryview, Record]]:
    """``(bytes, record)`` pairs in file order from a sequential stream, without the index.

    ``verify`` also checks padding, which carries no data.

    With ``end`` (the footer offset) every record before it must be whole;
    without it (salvage) streaming stops at the first thing that is not a
    complete record. Records are views of large read buffers.
    """
    return chain.from_iterable(_batches(source, path, end, names, header_crc, verify, True))


def stream_record_batches(
    source: RangeSource,
    path: str,
    end: int | None,
    names: frozenset[str] | None,
    header_crc: int | None,
    count: int | None = None,
    slots: ReadSlots | None = None,
) -> Iterator[Iterable[Record]]:
    """The records of :func:`stream_records` without their bytes, an iterable per read buffer.

    For readers: ``chain.from_iterable`` of it yields the records with no
    Python frame and no tuple per record. With the compiled codec each
    iterable decodes its records as they are asked for (a buffer's records
    are never all alive at once); each must be consumed before the next is
    asked for (what ``chain`` and ``yield from`` do).

    With ``count`` (the footer's record count), a stream that ends with
    another number of records raises :class:`~shardcat.errors.FormatError`.
    ``slots``: the read-ahead shares them with other streams (:class:`.prefetch.ReadSlots`).
    """
    return _batches(source, path, end, names, header_crc, False, False, count, slots)


def _batches(
    source: RangeSource,
    path: str,
    end: int | None,
    names: frozenset[str] | None,
    header_crc: int | None,
    verify: bool,
    views: bool,
    count: int | None = None,
    slots: ReadSlots | None = None,
) -> Iterator[Iterable[Any]]:
    """Iterables of records (``views``: lists of ``(bytes, record)`` pairs), in file order.

    A source with ``read_ahead`` (a remote file) is read by a background
    thread a chunk or two ahead of the decoder (:class:`.prefetch.ReadAhead`),
    closed with this generator: also on an error or when the caller stops early.
    """
    stream: BinaryIO | ReadAhead
    if wants_read_ahead(source):
        size = source.size() if end is None else end
        stream = ReadAhead(source, 0, size, stream_chunk(source, _STREAM_CHUNK), slots=slots)
    else:
        stream = source.open_stream(0)
    head_size = RECORD_HEAD_STRUCT.size
    unpack = RECORD_HEAD_STRUCT.unpack_from
    try:
        buf = _StreamBuffer(stream, end)  # never read past the data region
        head = bytes(buf.take(HEADER_SIZE))
        header = Header.decode(head, path=path, warn=header_crc is None)
        if header_crc is not None and header.crc != header_crc:
            raise FormatError("header does not belong to this shard's footer", path=path, offset=0)
        alignment = header.alignment
        cache: dict[Any, Any] = {}  # the codec's memo of entry names and types
        pos = data_start(alignment)
        pad = buf.take(pos - HEADER_SIZE)
        if verify and pad != bytes(len(pad)):
            raise FormatError("non-zero padding after the header", path=path, offset=HEADER_SIZE)
        index = 0
        decode_record = recordcodec.decode_record
        # The codec's run decoder takes every whole, sound record of the
        # buffer in one call; the loop below then handles the record it
        # stopped at (one that straddles two chunks, or a damaged one).
        decode_run = recordcodec.decode_run
        iter_run = recordcodec.iter_records
        stop_at = -1 if end is None else end
        # Without ``end`` (salvage), the first damaged or incomplete record
        # raises and the caller stops there.
        while end is None or pos < end:
            args = (
                buf.view,
                buf.pos,
                min(buf.end, buf.pos + _RUN_BYTES) if views else buf.end,
                pos,
                stop_at,
                alignment,
                index,
                names,
                cache,
                verify,
                path,
            )
            if not views:
                run = iter_run(*args)
                yield run
                for _ in run:  # a consumer that stopped early: skip what it left
                    pass
                used, decoded = run.used, run.count
            else:
                pairs, used = decode_run(*args)
                decoded = len(pairs)
                if used:
                    yield pairs
            if used:
                buf.pos += used
                pos += used
                index += decoded
                continue
            # Inlined buffer bookkeeping: this loop runs once per record.
            at = buf.pos
            if buf.end - at < head_size:
                buf.ensure(head_size)
                at = buf.pos
                if buf.end - at < head_size:
                    raise TruncatedError("file ends inside a record head", path=path, offset=pos)
            mv = buf.view
            length = unpack(mv, at)[2]
            if length < head_size or length % alignment or (end is not None and length > end - pos):
                raise FormatError(
                    f"record length {length} is impossible here", path=path, offset=pos
                )
            if buf.end - at < length:
                buf.ensure(length)
                at, mv = buf.pos, buf.view
                if buf.end - at < length:
                    raise TruncatedError(
                        f"record needs {length} bytes, only {buf.end - at} remain",
                        path=path,
                        offset=pos,
                    )
            view = mv[at : at + length]
            buf.pos = at + length
            rec = decode_record(
                view,
                path=path,
                offset=pos,
                alignment=alignment,
                index=index,
                names=names,
                text_cache=cache,
                check_padding=verify,
            )
            yield [(view, rec)] if views else [rec]
            pos += length
            index += 1
        if count is not None and index != count:
            raise FormatError(f"streamed {index} records but the footer lists {count}", path=path)
    finally:
        stream.close()


class _StreamBuffer:
    """Chunks of a sequential stream, handed out as zero-copy views.

    The caller reads ``view[pos:end]`` directly while the current chunk has
    what it needs (the fast path, inlined in the record loop) and calls
    :meth:`ensure` otherwise. Only a record that straddles two chunks is
    copied, into a small bridge buffer; chunks themselves are never copied
    or reused, so views handed out earlier stay valid.
    """

    __slots__ = ("end", "pending", "pos", "remaining", "stream", "view")

    def __init__(self, stream: BinaryIO | ReadAhead, limit: int | None = None) -> None:
        self.stream = stream
        self.remaining = limit  # bytes still to read from the stream; None: to its end
        self.view = memoryview(b"")
        self.pos = 0
        self.end = 0
        self.pending: list[memoryview] = []

    def _next_chunk(self, at_least: int) -> memoryview | None:
        if self.pending:
            return self.pending.pop(0)
        size = max(_STREAM_CHUNK, at_least)
        if self.remaining is not None:
            size = min(size, self.remaining)
            if size <= 0:
                return None
        data = self.stream.read(size)
        if self.remaining is not None:
            self.remaining -= len(data)
        return memoryview(data).toreadonly() if data else None

    def ensure(self, n: int) -> None:
        """Make the next ``n`` bytes contiguous at ``view[pos:]`` (fewer only at end of file)."""
        have = self.end - self.pos
        if have >= n:
            return
        parts = [self.view[self.pos : self.end]] if have else []
        while have < n:
            chunk = self._next_chunk(n - have)
            if chunk is None:
                break
            if not parts and len(chunk) >= n:
                # Nothing left over: the new chunk becomes the view as it is.
                self.view, self.pos, self.end = chunk, 0, len(chunk)
                return
            need = n - have
            if len(chunk) > need:
                parts.append(chunk[:need])
                self.pending.insert(0, chunk[need:])
                have = n
            else:
                parts.append(chunk)
                have += len(chunk)
        bridge = memoryview(b"".join(parts)).toreadonly()
        self.view, self.pos, self.end = bridge, 0, len(bridge)

    def take(self, n: int) -> memoryview:
        if self.end - self.pos < n:
            self.ensure(n)
        view = self.view[self.pos : min(self.pos + n, self.end)]
        self.pos += len(view)
        return view
