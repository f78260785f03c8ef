"""ShardReader: open a shard from its tail, then read records by index or key.

Streaming in file order lives in :mod:`.stream`, full verification in
:mod:`.verify`; the reader's ``iter_records`` and ``verify`` call them.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterable, Iterator, Sequence
from itertools import chain
from types import TracebackType
from typing import Any, BinaryIO

from .._ranges import coalesce, split
from .._types import ByteRange, RangeSource
from ..errors import FormatError, KeyNotFoundError, TruncatedError
from . import recordcodec
from .checksums import key_hash
from .entries import Record
from .footer import Footer
from .header import Header, Trailer, describe_bad_magic
from .info import ShardInfo
from .prefetch import ReadSlots
from .records import decode_entry
from .sources import as_source
from .spec import HEADER_MAGIC, HEADER_SIZE, TAIL_READ_SIZE, TRAILER_MAGIC, TRAILER_SIZE
from .stream import stream_record_batches
from .verify import VerifyReport, verify_shard

__all__ = ["ShardReader"]

_CHECK_BEFORE_READING = 64 * 1024 * 1024
"""A footer larger than this is read only after the file's size is checked (one request)."""


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
        self._texts: dict[Any, Any] = {}  # the record codec's memo of entry names and types
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
        return recordcodec.decode_indexed(
            view,
            key=self._footer.key_bytes(i),
            length=length,
            path=self.path,
            offset=offset,
            alignment=self.header.alignment,
            index=i,
            text_cache=self._texts,
        )

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
            out[pos].entries[s.name] = decode_entry(
                view,
                name=s.name,
                content_type=s.content_type,
                codec=s.codec,
                size=r.length,
                crc=int(f.entries[row]["crc"]),
                path=self.path,
                offset=r.start,
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
        # A list of records per read buffer, flattened at C speed: no Python
        # frame resumed per record.
        return chain.from_iterable(self.record_batches(entries))

    def record_batches(
        self, entries: Iterable[str] | None = None, *, read_slots: ReadSlots | None = None
    ) -> Generator[Iterable[Record], None, None]:
        """The records of :meth:`iter_records`, one iterable per decoded run of a read buffer.

        Each iterable must be consumed before the next is asked for. Closing
        the generator stops the stream at once (its read-ahead included):
        what a caller that keeps several streams open does when it stops early.
        ``read_slots``: a remote file's read-ahead shares them with the other
        streams given the same (:class:`~shardcat.format.prefetch.ReadSlots`).
        """
        names = None if entries is None else frozenset(entries)
        self._check_size()  # the stream reads up to footer_offset
        end = self._footer.trailer.footer_offset
        yield from stream_record_batches(
            self._source,
            self.path,
            end,
            names,
            self._footer.trailer.header_crc,
            len(self._footer.records),
            read_slots,
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
        header = self.header  # reads and checks the header first
        return verify_shard(self._source, header, self._footer, path=self.path, size=self.size)

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
