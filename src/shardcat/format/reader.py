"""ShardReader: open a shard from its tail, stream it, or read records by index or key."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO

from .._ranges import coalesce, split
from .._types import ByteRange, RangeSource
from ..errors import ChecksumError, FormatError, KeyNotFoundError, TruncatedError
from .checksums import crc32c, key_hash
from .codecs import check_frame
from .entries import Entry, Record
from .footer import Footer
from .header import Header, Trailer, describe_bad_magic
from .info import ShardInfo
from .records import check_payload, decode_record
from .sources import BytesSource, FileSource
from .spec import (
    ENTRY_DESC_STRUCT,
    HEADER_MAGIC,
    HEADER_SIZE,
    RECORD_HEAD_STRUCT,
    TAIL_READ_SIZE,
    TRAILER_MAGIC,
    TRAILER_SIZE,
    Codec,
    data_start,
)

__all__ = ["ShardReader", "VerifyReport", "as_source"]

_STREAM_CHUNK = 8 * 1024 * 1024
_CHECK_BEFORE_READING = 64 * 1024 * 1024
"""A footer larger than this is read only after the file's size is checked (one request)."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """What a full verification checked."""

    path: str
    records: int
    entries: int
    bytes: int
    data_crc: int


def as_source(
    source: RangeSource | BinaryIO | bytes | bytearray | memoryview | str | os.PathLike[str],
    name: str | None = None,
) -> tuple[RangeSource, bool]:
    """Wrap what the caller passed as a RangeSource; the flag says whether we own it."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return BytesSource(source, name or "<bytes>"), True
    if isinstance(source, (str, os.PathLike)):
        return FileSource(source, name), True
    if isinstance(source, RangeSource):
        return source, False
    if hasattr(source, "read") and hasattr(source, "seek"):
        return FileSource(source, name), False
    raise TypeError(f"cannot read a shard from a {type(source).__name__}")


class ShardReader:
    """Read one shard: streaming in file order, or random access through its footer.

    Opening costs one ranged read of the file's tail (``tail_size`` bytes),
    plus a second one only when the footer is larger than that.

    Parameters
    ----------
    source:
        A :class:`~shardcat.RangeSource`, a seekable binary file, bytes, or a
        local path. (``shardcat.ShardReader`` also takes fsspec URLs.)
    name:
        Name for error messages, when the source has none.
    tail_size:
        Bytes to read speculatively from the end when opening.

    Raises
    ------
    FormatError
        Not a shard (wrong magic), or its footer is inconsistent.
    TruncatedError
        The shard has no trailer: the write was interrupted or the copy cut short.
    VersionError
        The shard is from another major format version.
    ChecksumError
        The trailer or the footer does not match its CRC.
    """

    def __init__(
        self,
        source: RangeSource | BinaryIO | bytes | bytearray | memoryview | str | os.PathLike[str],
        *,
        name: str | None = None,
        tail_size: int = TAIL_READ_SIZE,
    ) -> None:
        self._source, self._owned = as_source(source, name)
        self.path = self._source.name
        self._header: Header | None = None
        self._size_checked = False
        try:
            self._footer = self._open(max(tail_size, TRAILER_SIZE))
        except BaseException:
            self.close()
            raise

    def _open(self, tail_size: int) -> Footer:
        tail = self._source.read_suffix(tail_size)
        if len(tail) < TRAILER_SIZE or tail[-8:] != TRAILER_MAGIC:
            self._raise_no_trailer(tail)
        whole_file = len(tail) < tail_size
        trailer = Trailer.decode(
            tail, path=self.path, file_offset=(len(tail) - TRAILER_SIZE) if whole_file else None
        )
        footer_size = Footer.size_from(trailer)
        expected_size = trailer.footer_offset + footer_size
        if trailer.footer_offset < HEADER_SIZE:
            raise FormatError(
                f"trailer puts the footer at offset {trailer.footer_offset}, inside the header",
                path=self.path,
            )
        if whole_file and len(tail) != expected_size:
            raise FormatError(
                f"file is {len(tail)} bytes but its trailer describes {expected_size}; the shard was altered",
                path=self.path,
            )
        if footer_size <= len(tail):
            body = memoryview(tail)[len(tail) - footer_size : len(tail) - TRAILER_SIZE]
        else:
            # A suffix read of the claimed size returns at most the whole file, so
            # absurd sizes in a damaged trailer cannot make us allocate them; but
            # "the whole file" may be gigabytes, so a large claim is checked first.
            if footer_size > _CHECK_BEFORE_READING:
                self._check_size(expected_size)
            tail = self._source.read_suffix(footer_size)
            if len(tail) != footer_size:
                raise FormatError(
                    f"file is {len(tail)} bytes, shorter than the {footer_size}-byte footer its "
                    "trailer describes; the shard was altered or cut short",
                    path=self.path,
                )
            body = memoryview(tail)[: footer_size - TRAILER_SIZE]
        footer = Footer.decode(body, trailer, path=self.path)
        if whole_file:
            self._set_header(tail[:HEADER_SIZE], trailer)
            self._size_checked = True  # the tail was the whole file, of the size described
        return footer

    def _check_size(self, expected: int | None = None) -> None:
        """Check once that the file is as large as its trailer says, before trusting its rows.

        Opening reads only the tail, which cannot tell the file's size when the
        file is larger than the tail read: a trailer that claims a longer data
        region would otherwise let a stream read past the end of the file, and a
        catalog register rows that do. Costs one size request, only for such
        files, and only before streaming, :attr:`info`, or reading a footer
        larger than 64 MiB. Ranged reads need no check: a source returns only
        the bytes the file has (FileSource never allocates more), and a short
        record is a TruncatedError.
        """
        if self._size_checked:
            return
        if expected is None:
            expected = self.size
        actual = self._source.size()
        if actual != expected:
            raise FormatError(
                f"file is {actual:,} bytes but its trailer describes {expected:,}; the shard "
                "was altered or cut short",
                path=self.path,
            )
        self._size_checked = True

    def _raise_no_trailer(self, tail: bytes) -> None:
        head = self._source.read(0, 8)
        if head != HEADER_MAGIC:
            raise FormatError(
                describe_bad_magic(head, HEADER_MAGIC, "a shardcat shard"), path=self.path, offset=0
            )
        if len(tail) >= 8 and TRAILER_MAGIC not in tail[-TRAILER_SIZE - 8 :]:
            raise TruncatedError(
                "the shard has a header but no trailer at its end: its write was interrupted or the copy "
                "cut short; rewrite it (its complete records can still be streamed with iter_partial())",
                path=self.path,
            )
        raise FormatError(
            describe_bad_magic(tail[-8:], TRAILER_MAGIC, "a complete shardcat shard"),
            path=self.path,
        )

    def _set_header(self, data: bytes, trailer: Trailer) -> Header:
        header = Header.decode(data, path=self.path, warn=False)  # the trailer warned already
        if header.version != trailer.version:
            raise FormatError(
                f"header says format {header.version[0]}.{header.version[1]}, the trailer "
                f"{trailer.version[0]}.{trailer.version[1]}: parts of two shards were joined",
                path=self.path,
                offset=8,
            )
        if header.crc != trailer.header_crc:
            raise FormatError(
                f"header (CRC {header.crc:#010x}) does not belong to this footer (which names "
                f"{trailer.header_crc:#010x}): parts of two shards were joined",
                path=self.path,
                offset=0,
            )
        self._header = header
        return header

    # --- metadata ----------------------------------------------------------

    @property
    def header(self) -> Header:
        """The 64-byte header (read on first use when the tail read did not include it)."""
        if self._header is not None:
            return self._header
        return self._set_header(self._source.read(0, HEADER_SIZE), self._footer.trailer)

    @property
    def trailer(self) -> Trailer:
        return self._footer.trailer

    @property
    def footer(self) -> Footer:
        return self._footer

    @property
    def metadata(self) -> dict[str, object]:
        """The user metadata given to the writer."""
        user = self._footer.metadata.get("user", {})
        return user if isinstance(user, dict) else {}

    @property
    def info(self) -> ShardInfo:
        """Everything a catalog registers about this shard, from the footer.

        The file's size is checked against the trailer first, so a catalog
        never registers rows that point past the end of the file.
        """
        self._check_size()
        return ShardInfo.from_footer(self.path, self.header, self._footer)

    @property
    def size(self) -> int:
        return self._footer.trailer.footer_offset + Footer.size_from(self._footer.trailer)

    @property
    def num_records(self) -> int:
        return len(self._footer.records)

    def __len__(self) -> int:
        return len(self._footer.records)

    def keys(self) -> list[str]:
        return self._footer.keys()

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        raw = key.encode("utf-8", "surrogatepass")
        return self._footer.find(raw, key_hash(raw)) >= 0

    # --- random access -----------------------------------------------------

    def index_of(self, key: str) -> int:
        """Index of the record with exactly this key; KeyNotFoundError if none."""
        if not isinstance(key, str):
            raise TypeError(f"keys are strings, not {type(key).__name__} ({key!r})")
        raw = key.encode("utf-8", "surrogatepass")
        i = self._footer.find(raw, key_hash(raw))
        if i < 0:
            raise KeyNotFoundError(f"{self.path}: no record with key {key!r}")
        return i

    def get(self, key: str, entries: Iterable[str] | None = None) -> Record:
        """The record with exactly this key (a hash collision never returns another)."""
        return self.read(self.index_of(key), entries)

    def read(self, i: int, entries: Iterable[str] | None = None) -> Record:
        """Record number ``i`` (file order); with ``entries``, read only those entries' bytes."""
        i = self._index(i)
        if entries is not None:
            return self._read_entries([i], frozenset(entries))[0]
        row = self._footer.records[i]
        start = int(row["offset"])
        length = int(row["length"])
        data = self._source.read(start, start + length)
        return self._decode_checked(i, memoryview(data), start, length)

    def _index(self, i: int) -> int:
        n = len(self._footer.records)
        if not -n <= i < n:
            raise IndexError(f"{self.path}: record {i} out of range; the shard has {n}")
        return int(i) % n

    def read_range(self, start: int, count: int) -> list[Record]:
        """``count`` consecutive records from index ``start``, in one read."""
        if start < 0:
            start = max(0, start + len(self._footer.records))
        rows = self._footer.records[start : start + count]
        if not len(rows):
            return []
        first = int(rows[0]["offset"])
        last = int(rows[-1]["offset"]) + int(rows[-1]["length"])
        view = memoryview(self._source.read(first, last))
        out = []
        for j, row in enumerate(rows):
            off, length = int(row["offset"]), int(row["length"])
            out.append(
                self._decode_checked(
                    start + j, view[off - first : off - first + length], off, length
                )
            )
        return out

    def take(self, indices: Sequence[int], entries: Iterable[str] | None = None) -> list[Record]:
        """Records at ``indices`` (any order, negative from the end), with nearby reads merged."""
        indices = [self._index(i) for i in indices]
        if entries is not None:
            return self._read_entries(list(indices), frozenset(entries))
        recs = self._footer.records
        ranges = [
            ByteRange(int(recs[i]["offset"]), int(recs[i]["offset"] + recs[i]["length"]))
            for i in indices
        ]
        merged = coalesce(ranges)
        views = split(merged, self._source.read_ranges([m.range for m in merged]), ranges)
        return [
            self._decode_checked(i, v, r.start, r.length) for i, v, r in zip(indices, views, ranges)
        ]

    def _decode_checked(self, i: int, view: memoryview, offset: int, length: int) -> Record:
        if len(view) != length:
            raise TruncatedError(
                f"record {i} needs {length} bytes, the file has {len(view)}",
                path=self.path,
                offset=offset,
            )
        rec = decode_record(
            view, path=self.path, offset=offset, alignment=self._alignment(), index=i
        )
        if rec.key.encode("utf-8") != self._footer.key_bytes(i):
            raise FormatError(
                f"record {i} holds key {rec.key!r} but the index names {self._footer.key_bytes(i)!r}",
                path=self.path,
                offset=offset,
            )
        return rec

    def _alignment(self) -> int:
        return self.header.alignment

    def _read_entries(self, indices: list[int], names: frozenset[str]) -> list[Record]:
        f = self._footer
        starts = f.entry_starts
        specs = f.specs
        wanted: list[tuple[int, int, int]] = []  # (record position, entry row, spec)
        ranges: list[ByteRange] = []
        for pos, i in enumerate(indices):
            base = int(f.records[i]["offset"])
            for row in range(int(starts[i]), int(starts[i + 1])):
                e = f.entries[row]
                spec = int(e["spec"])
                if specs[spec].name in names:
                    wanted.append((pos, row, spec))
                    off = base + int(e["offset"])
                    ranges.append(ByteRange(off, off + int(e["size"])))
        merged = coalesce(ranges)
        views = (
            split(merged, self._source.read_ranges([m.range for m in merged]), ranges)
            if ranges
            else []
        )
        out = [
            Record(
                f.key(i),
                {},
                index=i,
                offset=int(f.records[i]["offset"]),
                length=int(f.records[i]["length"]),
            )
            for i in indices
        ]
        for (pos, row, spec), view, r in zip(wanted, views, ranges):
            s = specs[spec]
            if len(view) != r.length:
                raise TruncatedError(
                    f"entry {s.name!r} needs {r.length} bytes, the file has {len(view)}",
                    path=self.path,
                    offset=r.start,
                )
            check_payload(
                view, int(f.entries[row]["crc"]), path=self.path, offset=r.start, name=s.name
            )
            out[pos].entries[s.name] = Entry._from_stored(
                view, s.content_type, s.codec, name=s.name, path=self.path, offset=r.start
            )
        return out

    # --- streaming ---------------------------------------------------------

    def __iter__(self) -> Iterator[Record]:
        return self.iter_records()

    def iter_records(self, entries: Iterable[str] | None = None) -> Iterator[Record]:
        """Every record in file order, read sequentially without the index.

        Records are views of large read buffers: no per-record request and no
        copy. With ``entries``, other entries are skipped (but still read).
        """
        names = None if entries is None else frozenset(entries)
        self._check_size()  # the stream reads up to footer_offset
        end = self._footer.trailer.footer_offset
        count = 0
        for _, rec in _stream_records(
            self._source, self.path, end, names, self._footer.trailer.header_crc
        ):
            count += 1
            yield rec
        if count != len(self._footer.records):
            raise FormatError(
                f"streamed {count} records but the footer lists {len(self._footer.records)}",
                path=self.path,
            )

    # --- verification ------------------------------------------------------

    def verify(self) -> VerifyReport:
        """Read every byte and check every CRC, padding and the index against the records.

        Each compressed entry's frame header must also declare a decompressed
        size within the limit (:func:`~shardcat.format.codecs.max_decompressed_bytes`);
        frames are not decompressed.

        Returns a report on success; raises the first problem found as a
        :class:`~shardcat.errors.FormatError` subclass naming the offset.
        """
        f = self._footer
        t = f.trailer
        start = data_start(self.header.alignment)  # reads and checks the header too
        first = int(f.records[0]["offset"]) if len(f.records) else t.footer_offset
        if first != start:
            raise FormatError(
                f"data region should start at {start} for alignment {self.header.alignment}, "
                f"the index starts it at {first}",
                path=self.path,
            )
        actual_size = self._source.size()
        if actual_size != self.size:
            raise FormatError(
                f"file is {actual_size} bytes, its trailer describes {self.size}", path=self.path
            )
        data_crc = crc32c(bytes(start - HEADER_SIZE))  # the padding after the header, checked zero
        starts = f.entry_starts
        n_entries = 0
        i = -1
        records = _stream_records(
            self._source, self.path, t.footer_offset, None, t.header_crc, verify=True
        )
        for i, (view, rec) in enumerate(records):
            data_crc = crc32c(view, data_crc)
            if i >= len(f.records):
                raise FormatError(
                    f"more records in the data region than the footer's {len(f.records)}",
                    path=self.path,
                    offset=rec.offset,
                )
            row = f.records[i]
            key = rec.key.encode("utf-8")
            if (
                int(row["offset"]) != rec.offset
                or int(row["length"]) != rec.length
                or key != f.key_bytes(i)
                or int(row["key_hash"]) != key_hash(key)
                or RECORD_HEAD_STRUCT.unpack_from(view)[3] != int(row["key_hash"])
                or int(row["entry_count"]) != len(rec.entries)
            ):
                raise FormatError(
                    f"index row {i} disagrees with the record it points at (key {rec.key!r})",
                    path=self.path,
                    offset=rec.offset,
                )
            first = int(starts[i])
            for j, (name, entry) in enumerate(rec.entries.items()):
                e = f.entries[first + j]
                spec = f.specs[int(e["spec"])]
                # The descriptor's CRC was checked against the payload by decode_record.
                p_off, p_size, p_crc = ENTRY_DESC_STRUCT.unpack_from(view, 32 + 32 * j)[:3]
                if (
                    spec.name != name
                    or spec.content_type != entry.content_type
                    or spec.codec != entry.codec
                    or (int(e["offset"]), int(e["size"]), int(e["crc"])) != (p_off, p_size, p_crc)
                ):
                    raise FormatError(
                        f"entry row {first + j} disagrees with entry {name!r} of record {rec.key!r}",
                        path=self.path,
                        offset=rec.offset,
                    )
                if entry.codec is not Codec.NONE and entry.codec.known:
                    # Its frame header must declare a size a reader will accept; the
                    # frame itself is not decompressed (verification stays I/O-bound).
                    check_frame(
                        entry._stored,  # type: ignore[arg-type]
                        entry.codec,
                        name=name,
                        path=self.path,
                        offset=rec.offset + p_off,
                    )
            n_entries += len(rec.entries)
        if i + 1 != len(f.records):
            raise FormatError(
                f"found {i + 1} records, the footer lists {len(f.records)}", path=self.path
            )
        if data_crc != t.data_crc:
            raise ChecksumError(
                f"data region CRC32C mismatch (stored {t.data_crc:#010x}, computed {data_crc:#010x})",
                path=self.path,
                offset=HEADER_SIZE,
            )
        return VerifyReport(self.path, len(f.records), n_entries, self.size, data_crc)

    # --- lifetime ----------------------------------------------------------

    def close(self) -> None:
        """Close the source if this reader opened it."""
        if getattr(self, "_owned", False):
            self._source.close()
            self._owned = False

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShardReader({self.path!r}, records={len(self)}, bytes={self.size})"


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
            for _, rec in _stream_records(src, src.name, src.size(), None, None):
                yield rec
        except FormatError:
            return
    finally:
        if owned:
            src.close()


def _stream_records(
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
        cache: dict[object, tuple[str, str, Codec]] = {}
        pos = data_start(alignment)
        pad = buf.take(pos - HEADER_SIZE)
        if verify and pad != bytes(len(pad)):
            raise FormatError("non-zero padding after the header", path=path, offset=HEADER_SIZE)
        index = 0
        # Without ``end`` (salvage), the first damaged or incomplete record
        # raises and the caller stops there.
        while end is None or pos < end:
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
            yield view, rec
            pos += length
            index += 1
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

    def __init__(self, stream: BinaryIO, limit: int | None = None) -> None:
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
