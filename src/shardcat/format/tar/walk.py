"""Walking a tar stream once, front to back: every regular member, its payload's CRC32C.

The walker reads large chunks into a few reusable buffers (``readinto`` where
the stream has it; by default in a thread, two chunks ahead of the walk:
:mod:`.readahead`), so a local file or an fsspec file opened with a large
block size costs one sequential pass and no request per member. Headers are
parsed inline; their checksums are verified a chunk at a time with numpy
(:func:`~.headers.checksum_mismatches`), and nothing parsed from a header is
handed on before that header's checksum has been checked.

With the compiled walker (:mod:`.tarwalker`), the member groups of each
chunk go through its C loop, and this code reads only the groups it stops at
(one cut by the chunk's end, a damaged header, the end of the archive): the
errors, and every rare case, stay here.

With ``map_file=True`` a local file is not read at all: it is mapped under the
guard of :mod:`shardcat.format.mapguard` (:mod:`.mapped`) and walked in place,
one ``chunk_size`` window at a time, each window cut at the file's current
size; a file cut while it is walked (even inside a window) is a
:class:`~.errors.TarTruncatedError`, never SIGBUS: before every batch it yields,
and when it raises, the walk asks the guard whether anything it read was lost.
No read-ahead thread reads a mapped file, but by default a second thread maps
the next window into the page tables (:mod:`.mapped`; ``readahead=0`` keeps the
walk to one thread). The default reads (measured cheaper here: docs/IN-PLACE.md).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from ..checksums import crc32c
from . import tarwalker
from .errors import NotATarError, TarChecksumError, TarError, TarNumberError, TarTruncatedError
from .headers import checksum_mismatches, parse_number, parse_pax
from .mapped import MappedFile, map_stream
from .readahead import ChunkReader, Slot, is_local_file, open_reader
from .spec import BLOCK, GNU_LONGLINK, GNU_LONGNAME, NO_DATA_TYPES, PAX_GLOBAL, PAX_LOCAL, blocks

__all__ = [
    "DEFAULT_CHUNK",
    "DEFAULT_READAHEAD",
    "MAX_EXTENSION_BYTES",
    "Batch",
    "Member",
    "TarWalker",
]

DEFAULT_CHUNK = 8 << 20
"""Bytes read per call: large enough that a remote stream makes few requests."""
DEFAULT_READAHEAD = 2
"""Chunks a thread reads ahead of the walk (0: no thread, each chunk read when needed)."""
_HEADROOM = BLOCK
"""Bytes in front of each chunk for the end of the previous one (a header cut by the chunk's end)."""
MAX_EXTENSION_BYTES = 16 << 20
"""Largest pax or GNU long-name payload read into memory (they hold a path, not data)."""

Member = tuple[bytes | bytearray, int, int, int, int]
"""One regular member: ``(name, first_header_offset, payload_offset, size, crc32c)``.

``first_header_offset`` is where the member's first header starts (a pax or
GNU long-name header when it has one); its own header is ``payload_offset -
512``. ``name`` is the full path as raw bytes (pax or GNU long name applied).
"""

Batch = tuple[list[bytes | bytearray], list[int], list[int], list[int], list[int]]
"""Members in archive order as columns: names, first header offsets, payload offsets, sizes, CRC32Cs.

Columns, not one tuple per member: the compiled walker returns them so.
"""

Pieces = list[Any]
"""What a walker made with ``blocks=True`` yields: :data:`Batch` es and compiled
``_ctar.Members`` blocks, in archive order (:meth:`TarWalker.__iter__`)."""


def _batch() -> Batch:
    return [], [], [], [], []


def _extend(batch: Batch, columns: Iterable[Sequence[Any]]) -> None:
    """Append columns (or rows' fields, transposed) to ``batch``, column by column."""
    lists: tuple[list[Any], ...] = batch
    for column, values in zip(lists, columns):
        column.extend(values)


_REGULAR = (ord("0"), 0, ord("7"))
_USTAR_POSIX = b"ustar\x00"
_NO_DATA = frozenset(t[0] for t in NO_DATA_TYPES)
_LONGNAME, _LONGLINK = GNU_LONGNAME[0], GNU_LONGLINK[0]
_PAX_LOCAL, _PAX_GLOBAL = PAX_LOCAL[0], PAX_GLOBAL[0]


class _ShortSkip(Exception):
    """The stream ended while skipping bytes the archive promised (payload padding)."""


_EXTENSIONS = (_LONGNAME, _LONGLINK, _PAX_LOCAL, _PAX_GLOBAL)
_ZERO_BLOCK = bytes(BLOCK)


class TarWalker:
    """One pass over a tar stream, yielding its regular members in batches.

    Parameters
    ----------
    stream:
        Anything with ``read(n)`` (``readinto`` is used when present),
        positioned at the archive's first byte.
    path:
        The archive's URL or path, named in every error.
    size:
        The archive's size if known: a member whose size field runs past it is
        reported at its header, before anything is read. Without it the same
        member is reported when the stream ends early.
    chunk_size:
        Bytes per read.
    readahead:
        Chunks a thread reads ahead of the walk; 0 reads each chunk in the
        walk's own thread when it is needed. ``None`` (default): 0 for a
        regular local file (a page-cache read is a copy the thread only moves
        to another core, at a cost in CPU), :data:`DEFAULT_READAHEAD` for any
        other stream (remote: the thread hides the transfer). For a mapped
        file, ``None`` or more than 0 maps the next window into the page
        tables on a second thread while the walk reads this one (where
        :func:`~.mapped.can_map_ahead`), and 0 keeps the walk to one thread.
    map_file:
        Walk a regular local file (``stream.fileno()``, at offset 0) in a
        guarded read-only mapping instead of reading it (:mod:`.mapped`); any
        other stream, or a file that cannot be mapped under the guard, is
        read. Off by default: on the VM measured last the read cost less CPU
        than the mapping's page faults (docs/IN-PLACE.md section 5).
    blocks:
        With the compiled walker, yield :data:`Pieces` instead of batches:
        the compiled loop's members stay in C blocks (``_ctar.Members``)
        that ``_ctar.Grouper`` groups without a Python object per member
        (what ``scan_tar`` does). Batches (plain lists) otherwise.

    After iteration (or :meth:`close`, for a walk given up): ``size`` is the number of bytes the stream held,
    ``end_offset`` where the end-of-archive block starts, ``member_count``
    the headers of real members seen (extension headers not counted) and
    ``skipped`` the members that are not regular files.
    """

    def __init__(
        self,
        stream: Any,
        path: str,
        *,
        size: int | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        readahead: int | None = None,
        map_file: bool = False,
        blocks: bool = False,
    ) -> None:
        if chunk_size < 4 * BLOCK or chunk_size % BLOCK:
            raise ValueError(f"chunk_size must be a multiple of {BLOCK} of at least {4 * BLOCK}")
        self._map_ahead = readahead is None or readahead > 0
        if readahead is None:
            readahead = 0 if is_local_file(stream) else DEFAULT_READAHEAD
        if readahead < 0:
            raise ValueError(f"readahead must be 0 or more, not {readahead}")
        self.path = path
        self.expected_size = size
        self._stream = stream
        self._chunk_size = chunk_size
        self._readahead = readahead
        self._reader: ChunkReader | None = None  # opened when the walk starts
        self._map_file = map_file
        self._mapped: MappedFile | None = None  # mapped when the walk starts
        # The current buffer: the reader's chunk from _HEADROOM on, and in front of it
        # the bytes of the previous chunk the walk still needs (less than a header).
        self._slot = Slot(_HEADROOM)
        self._buf: bytearray | mmap.mmap = self._slot.buf
        self._view = self._slot.view
        self._array = self._slot.array
        self._base = 0  # file offset of _buf[0]
        self._end = 0  # end of the valid bytes in _buf
        self._eof = False
        self._pending: list[int] = []  # header positions in _buf not yet checksum-verified
        self._parsed: list[Member] = []  # members whose headers are all in _pending
        self._ready: Batch = _batch()  # members whose headers were verified
        # With blocks: the compiled loop's member blocks, with the batches before them.
        self._blocks = blocks and tarwalker.walk_block is not None
        self._pieces: Pieces = []
        self.size = 0
        self.end_offset = -1
        self.member_count = 0
        self.skipped = 0

    @property
    def mapped(self) -> bool:
        """Whether the walk reads the file through a mapping (decided when it starts)."""
        return self._mapped is not None

    def close(self) -> None:
        """Stop the read-ahead thread or unmap the file (safe to call twice; the stream stays open)."""
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.close()
        mapped, self._mapped = self._mapped, None
        if mapped is not None:
            # Drop this walker's views of the mapping first: an exported buffer keeps it mapped.
            view = self._view
            self._buf, self._view, self._array = bytearray(), memoryview(b""), np.empty(0, np.uint8)
            view.release()
            mapped.close()

    def _open(self) -> None:
        """Map the stream's file if it is a local one (the walk's first step)."""
        if not self._map_file or self._reader is not None or self._end:
            return
        mapped = map_stream(self._stream, self._chunk_size, ahead=self._map_ahead)
        if mapped is None:
            return
        self._mapped = mapped
        self._buf = mapped.map
        self._view = memoryview(mapped.map)
        self._array = np.frombuffer(mapped.map, dtype=np.uint8)

    # --- the stream ----------------------------------------------------------

    def _fill(self, keep_from: int, need: int) -> int:
        """Keep ``_buf[keep_from:_end]`` and read until ``need`` bytes follow it (or the end).

        Returns the new position of ``keep_from``. Headers are verified first:
        their buffer is about to be given back. ``_end - keep_from`` must be
        less than ``need``, which must be at most ``_HEADROOM``.
        """
        self._verify()
        if keep_from > self._end:
            # Skip padding (or payload) that lies beyond what is buffered.
            keep_from = self._skip(keep_from - self._end)
        while self._end - keep_from < need and not self._eof:
            keep_from = self._next(keep_from)
        return keep_from

    def _next(self, keep_from: int) -> int:
        """Make the stream's next chunk the buffer, with ``_buf[keep_from:_end]`` in front of it.

        Returns the kept bytes' new position (``_end`` when none were kept);
        at the stream's end, the buffer stays and ``_eof`` is set.
        """
        if self._mapped is not None:
            # The mapping is the buffer: the kept bytes stay where they are.
            end = self._mapped.extend(self._end)
            if end == self._end:
                self._eof = True
                self.size = self._end
            self._end = end
            return keep_from
        if self._reader is None:
            self._reader = open_reader(self._stream, self._chunk_size, _HEADROOM, self._readahead)
        slot, n = self._reader.next()
        if slot is None:
            self._eof = True
            self.size = self._base + self._end
            return keep_from
        kept = self._end - keep_from
        if kept > _HEADROOM:
            raise ValueError(f"cannot keep {kept} bytes in front of a chunk (at most {_HEADROOM})")
        start = _HEADROOM - kept
        old = self._slot
        slot.buf[start:_HEADROOM] = old.view[keep_from : self._end]
        self._slot = slot
        self._buf = slot.buf
        self._view = slot.view
        self._array = slot.array
        self._base += keep_from - start
        self._end = _HEADROOM + n
        if len(old.buf) > _HEADROOM:  # not the empty buffer of a walk's start
            self._reader.release(old)
        return start

    def _skip(self, n: int) -> int:
        """Discard the buffer and the next ``n`` bytes of the stream; where the rest starts."""
        while True:
            start = self._next(self._end)
            if self._eof:
                raise _ShortSkip
            available = self._end - start
            if n <= available:
                return start + n
            n -= available

    # --- checks ----------------------------------------------------------------

    def _verify(self) -> None:
        """Check every pending header's checksum; release the members they describe."""
        pending = self._pending
        fast = tarwalker.headers
        if fast is not None and pending:
            # The compiled check passes the common form; the reference decides the rest.
            maybe = fast(self._buf, pending)
            bad = [maybe[i] for i in checksum_mismatches(self._array, [pending[i] for i in maybe])]
        else:
            bad = checksum_mismatches(self._array, pending)
        if bad:
            pos = self._pending[bad[0]]
            offset = self._base + pos
            self._pending.clear()
            self._parsed.clear()
            magic = bytes(self._view[pos + 257 : pos + 262])
            if offset == 0 and magic != b"ustar":
                raise NotATarError(
                    "not a tar archive: the first 512 bytes are not a tar header "
                    "(their checksum does not match and there is no 'ustar' magic)",
                    path=self.path,
                    offset=0,
                )
            stored = bytes(self._view[pos + 148 : pos + 156])
            raise TarChecksumError(
                f"tar header checksum field {stored!r} does not match the header's bytes; "
                "the archive is damaged (re-create or re-download it)",
                path=self.path,
                offset=offset,
            )
        self._pending.clear()
        if self._parsed:
            _extend(self._ready, zip(*self._parsed))
            self._parsed.clear()

    def _fail(self, error: TarError) -> TarError:
        """``error``, unless a header parsed before it has a bad checksum (then that one)."""
        self._verify()
        return error

    def _truncated(self, what: str, offset: int) -> TarTruncatedError:
        if self.expected_size is not None:
            ends = self.expected_size
        else:
            ends = self._base + self._end
        return TarTruncatedError(
            f"{what}, but the file ends at byte {ends}; the archive was cut short "
            "(copy or download it again)",
            path=self.path,
            offset=offset,
        )

    # --- the walk --------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Batches of members, in archive order, each after its headers were verified.

        With ``blocks=True`` and the compiled walker, lists of pieces
        (:data:`Pieces`) instead.

        The read-ahead thread (if any) is stopped when the walk ends, fails or
        is abandoned.

        Raises
        ------
        NotATarError, TarChecksumError, TarTruncatedError, TarNumberError, TarError
            With the archive's path and the offending header's offset.
        Exception
            Whatever the stream's read raised (from the read-ahead thread too).
        """
        try:
            yield from self._walk()
        except TarError:
            self._check_mapped()  # a file cut under the walk explains any error: say so
            raise
        finally:
            self.close()

    def _check_mapped(self) -> None:
        """For a mapped file: raise if what the walk has read may not be the file's any more.

        A page of the file found cut (it read as zeros since) or a file now
        shorter than the walk has read: everything computed from the mapping
        is in doubt, so nothing of it may be yielded.
        """
        mapped = self._mapped
        if mapped is None:
            return
        lost = mapped.lost(self._end)
        if lost is not None:
            raise TarTruncatedError(
                f"the file was cut at byte {lost} while it was walked (the walk had read "
                f"{self._end} bytes); the archive is being rewritten or was cut short "
                "(index it again once it is whole)",
                path=self.path,
                offset=lost,
            )

    def _take(self) -> Batch | Pieces | None:
        """What the walk yields next (members verified since the last), or ``None`` if nothing."""
        self._check_mapped()  # nothing read from a mapping leaves before the guard was asked
        if not self._blocks:
            if not self._ready[0]:
                return None
            ready, self._ready = self._ready, _batch()
            return ready
        if self._ready[0]:
            self._pieces.append(self._ready)
            self._ready = _batch()
        if not self._pieces:
            return None
        pieces, self._pieces = self._pieces, []
        return pieces

    def _add(self, found: Any) -> None:
        """Members of the compiled loop, after the reference's (columns, or a block)."""
        if self._blocks:
            if self._ready[0]:
                self._pieces.append(self._ready)
                self._ready = _batch()
            self._pieces.append(found)
        else:
            _extend(self._ready, found)

    def _walk(self) -> Iterator[Any]:
        self._open()
        pos = self._fill(0, BLOCK)
        buf = self._buf
        view = self._view
        pax_global: dict[str, bytes] = {}
        long_name: bytes | None = None
        pax: dict[str, bytes] | None = None
        first_header = -1  # offset of the pending extension headers' first block
        pending = self._pending
        parsed = self._parsed
        expected = self.expected_size
        header_at = 0
        members = 0  # a local: attribute writes cost in this loop; published below
        fast = tarwalker.walk_block if self._blocks else tarwalker.walk
        fast_stop = -1  # where the compiled loop last stopped without progress
        fast_expected = -1 if expected is None else expected
        while True:
            if self._end - pos < BLOCK:
                self.member_count = members
                try:
                    pos = self._fill(pos, BLOCK)
                except _ShortSkip:
                    raise self._truncated(
                        "the archive ends inside the payload padding of the member here",
                        header_at,
                    ) from None
                out = self._take()
                if out is not None:
                    yield out
                buf = self._buf
                view = self._view
                if self._end - pos < BLOCK:
                    at = self._base + pos
                    if at == 0 and bytes(view[pos + 257 : min(pos + 262, self._end)]) != b"ustar":
                        raise NotATarError(
                            "not a tar archive: the file is empty"
                            if self._end == pos
                            else f"not a tar archive: the file has {self._end - pos} bytes, "
                            f"less than one {BLOCK}-byte header",
                            path=self.path,
                            offset=0,
                        )
                    if self._end == pos:
                        raise self._fail(
                            self._truncated("the archive has no end-of-archive block", at)
                        )
                    raise self._fail(self._truncated("a tar header starts here", at))
            if (
                fast is not None
                and first_header < 0
                and long_name is None
                and pax is None
                and self._base + pos != fast_stop
            ):
                stop, count, skip, global_path, *found = fast(
                    buf, pos, self._end, self._base, fast_expected, pax_global.get("path")
                )
                if stop == pos:
                    # This group is the reference's (an error, a rare case, the chunk's end).
                    fast_stop = self._base + pos
                else:
                    # A block (None when empty), or five columns (empty lists when none).
                    new = found[0] if self._blocks else (found if found[0] else None)
                    if new is not None:
                        if parsed or pending:
                            self._verify()  # members the reference parsed come first
                        self._add(new)
                    members += count
                    self.skipped += skip
                    if global_path is not None:
                        pax_global["path"] = global_path
                    pos = stop
                    continue
            header_at = self._base + pos
            if buf[pos + 148] == 0 and view[pos : pos + BLOCK] == _ZERO_BLOCK:
                self.end_offset = header_at
                break
            pending.append(pos)
            kind = buf[pos + 156]
            size_end = buf[pos + 135]
            try:
                if buf[pos + 124] < 0x80 and size_end in (0, 32):
                    size = int(buf[pos + 124 : pos + 135], 8)
                else:
                    size = parse_number(buf[pos + 124 : pos + 136])
            except ValueError:
                try:
                    size = parse_number(buf[pos + 124 : pos + 136])
                except ValueError:
                    raise self._fail(
                        TarNumberError(
                            f"tar header size field {bytes(buf[pos + 124 : pos + 136])!r} "
                            "is not a number; the archive is damaged",
                            path=self.path,
                            offset=header_at,
                        )
                    ) from None
            if first_header < 0:
                first_header = header_at
            if kind in _NO_DATA:
                size = 0
            elif pax is not None and "size" in pax and kind not in _EXTENSIONS:
                size = self._pax_size(pax, header_at)
            if size < 0:
                raise self._fail(
                    TarNumberError(
                        f"tar header declares a negative size ({size})",
                        path=self.path,
                        offset=header_at,
                    )
                )
            payload_at = header_at + BLOCK
            if expected is not None and payload_at + size > expected:
                raise self._fail(
                    self._truncated(
                        f"the member's header declares {size} bytes of payload from byte "
                        f"{payload_at}",
                        header_at,
                    )
                )
            if kind in _REGULAR and (pax is None or not _sparse(pax)):
                name: bytes | bytearray
                if long_name is None and pax is None and not pax_global and not buf[pos + 345]:
                    # The common case, inline: the name field alone, no prefix.
                    name = buf[pos : pos + 100]
                    cut = name.find(0)
                    if cut >= 0:
                        name = name[:cut]
                else:
                    name = self._name(pos, long_name, pax, pax_global)
                members += 1
                if kind == 0 and name.endswith(b"/"):
                    # A V7 directory: a type-NUL member whose name ends in '/'; no payload.
                    self.skipped += 1
                    pos += BLOCK
                    first_header = -1
                    long_name = None
                    pax = None
                    continue
                start = pos + BLOCK
                stop = start + size
                if stop <= self._end:
                    crc = crc32c(view[start:stop])
                    pos = start + ((size + 511) & -512)
                else:
                    crc = 0

                    def add(piece: memoryview) -> None:
                        nonlocal crc
                        crc = crc32c(piece, crc)

                    pos = self._consume(start, size, header_at, add)
                    buf = self._buf
                    view = self._view
                parsed.append((name, first_header, payload_at, size, crc))
                first_header = -1
                long_name = None
                pax = None
                continue
            if kind in _EXTENSIONS:
                data, pos = self._extension_payload(pos + BLOCK, size, header_at)
                buf = self._buf
                view = self._view
                if kind == _LONGNAME:
                    long_name = data.split(b"\0", 1)[0]
                elif kind in (_PAX_LOCAL, _PAX_GLOBAL):
                    records = self._pax_records(data, header_at)
                    if kind == _PAX_GLOBAL:
                        # Only a global path would matter (and rename every member).
                        if "path" in records:
                            pax_global["path"] = records["path"]
                        first_header = -1
                    elif records:
                        pax = {**(pax or {}), **records}
                continue
            # A directory, link, device, FIFO or unknown type: not a sample member.
            members += 1
            self.skipped += 1
            pos = pos + BLOCK + blocks(size)
            first_header = -1
            long_name = None
            pax = None
        self.member_count = members
        self._verify()
        out = self._take()
        if out is not None:
            yield out
        # Read what follows (the second zero block, record padding) to learn the size.
        while not self._eof:
            self._next(self._end)

    def _name(
        self,
        pos: int,
        long_name: bytes | None,
        pax: dict[str, bytes] | None,
        pax_global: dict[str, bytes],
    ) -> bytes:
        """The member's path: pax ``path``, else GNU long name, else ustar prefix + name."""
        if pax is not None and "path" in pax:
            return pax["path"]
        if long_name is not None:
            return long_name
        if "path" in pax_global:
            return pax_global["path"]
        buf = self._buf
        name = bytes(buf[pos : pos + 100])
        cut = name.find(0)
        if cut >= 0:
            name = name[:cut]
        if buf[pos + 345] and buf[pos + 257 : pos + 263] == _USTAR_POSIX:
            prefix = bytes(buf[pos + 345 : pos + 500])
            cut = prefix.find(0)
            if cut >= 0:
                prefix = prefix[:cut]
            name = prefix + b"/" + name
        return name

    def _consume(
        self, start: int, size: int, header_at: int, sink: Callable[[memoryview], None]
    ) -> int:
        """Pass a payload that runs past the buffer to ``sink`` piece by piece.

        Returns the buffer position after the payload's padding (maybe past
        the buffered bytes: the next fill skips the rest).
        """
        self._verify()  # the buffer is about to be given back
        sink(self._view[start : self._end])
        left = size - (self._end - start)
        while True:
            at = self._next(self._end)
            if self._eof:
                raise self._truncated(
                    f"the member's header declares {size} bytes of payload from byte "
                    f"{header_at + BLOCK}",
                    header_at,
                )
            take = min(left, self._end - at)
            sink(self._view[at : at + take])
            left -= take
            if not left:
                return at + take + blocks(size) - size

    def _extension_payload(self, start: int, size: int, header_at: int) -> tuple[bytes, int]:
        """The payload of a pax or GNU long-name header, and the position after its padding."""
        if size > MAX_EXTENSION_BYTES:
            raise self._fail(
                TarError(
                    f"extension header declares {size} bytes (more than {MAX_EXTENSION_BYTES}); "
                    "the archive is damaged",
                    path=self.path,
                    offset=header_at,
                )
            )
        if start + size <= self._end:
            return bytes(self._view[start : start + size]), start + blocks(size)
        parts: list[bytes] = []
        pos = self._consume(start, size, header_at, lambda piece: parts.append(bytes(piece)))
        return b"".join(parts), pos

    def _pax_records(self, data: bytes, header_at: int) -> dict[str, bytes]:
        """The records of a pax header that matter here: path, size, GNU sparse markers.

        Most pax headers hold only times and ids (webdataset writes an
        ``mtime`` before every member); they are recognised by a substring
        test and not parsed: nothing in them changes where data lies.
        """
        if b" path=" not in data and b" size=" not in data and b" GNU.sparse." not in data:
            return {}
        try:
            records = parse_pax(data)
        except ValueError as e:
            raise self._fail(
                TarError(
                    f"pax extended header is malformed ({e}); the archive is damaged",
                    path=self.path,
                    offset=header_at,
                )
            ) from e
        return {
            k: v for k, v in records.items() if k in ("path", "size") or k.startswith("GNU.sparse.")
        }

    def _pax_size(self, pax: dict[str, bytes], offset: int) -> int:
        try:
            return int(pax["size"])
        except ValueError:
            raise self._fail(
                TarNumberError(
                    f"pax size {pax['size']!r} is not a decimal number",
                    path=self.path,
                    offset=offset,
                )
            ) from None


def _sparse(pax: dict[str, bytes]) -> bool:
    """Whether pax records mark a GNU sparse file (its payload is a map, not the data)."""
    return any(k.startswith("GNU.sparse.") for k in pax)
