"""From a tar stream to WebDataset samples: keys, byte ranges and checksummed entries.

A WebDataset key is the member path up to the first dot of its basename,
directory included; the rest of the name (lower-cased) names the entry:
``train/0001.seg.png`` is entry ``seg.png`` of sample ``train/0001``. The
members of a sample are adjacent in the archive, so a sample is one byte
range, from its first member's first header to the end of its last payload.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from ..checksums import key_hash
from ..entries import guess_content_type
from ..footer import EntrySpec
from ..spec import ENTRY_ROW_DTYPE, MAX_ENTRIES, MAX_KEY_BYTES, RECORD_ROW_DTYPE, Codec
from . import tarwalker
from .errors import DuplicateMemberError, SplitSampleError, TarError, TarMemberNameError
from .info import TarEntry, TarSample, TarShardInfo
from .spec import BLOCK
from .walk import DEFAULT_CHUNK, Batch, Pieces, TarWalker

__all__ = ["iter_tar_samples", "scan_tar", "split_member_name"]

# WebDataset's own rules (webdataset.tariterators): the key/extension split
# and the metadata members it skips. The regex is the fallback for names the
# fast path below does not decide.
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_WDS_META = re.compile(r"__[^/]*__($|/)")
MAX_SPECS = 1 << 16
"""Distinct entry names a tar may have: an entry row's ``spec`` is a ``<u2``."""


def split_member_name(name: str) -> tuple[str, str] | None:
    """``(key, entry name)`` of a member path, or ``None`` when it belongs to no sample.

    ``None`` for names WebDataset skips too: no dot in the basename,
    ``__meta__``-style names; and for an empty entry name (``"x."``), which
    shardcat cannot store.
    """
    if name.startswith("__") and (
        _WDS_META.match(name) or ("/" not in name and name.endswith("__"))
    ):
        return None
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot > slash + 1 and "\n" not in name:
        key, ext = name[:dot], name[dot + 1 :]
    else:
        match = _WDS_KEY.match(name)
        if match is None:
            return None
        key, ext = match.group(1), match.group(2)
    if not ext:
        return None
    return key, ext.lower()


def _name_error(raw: bytes | bytearray, path: str, offset: int) -> TarMemberNameError:
    return TarMemberNameError(
        f"member name {bytes(raw)!r:.120} is not valid UTF-8, so it cannot be a sample key; "
        "rename the member",
        path=path,
        offset=offset,
    )


def _split_error(name: str, key: str, seen: int, path: str, offset: int) -> SplitSampleError:
    return SplitSampleError(
        f"member {name!r} belongs to sample {key!r}, whose other members "
        f"start at byte {seen} and are not adjacent to it; "
        "a WebDataset sample's members must be consecutive (re-write the tar "
        "with each sample's files together)",
        key=key,
        first_offset=seen,
        path=path,
        offset=offset,
    )


def _duplicate_error(name: str, key: str, ext: str, path: str, offset: int) -> DuplicateMemberError:
    return DuplicateMemberError(
        f"sample {key!r} has two members named {ext!r} (the second is {name!r}); remove one of them",
        path=path,
        offset=offset,
    )


def _long_key_error(length: int, path: str, offset: int) -> TarMemberNameError:
    return TarMemberNameError(
        f"sample key of {length} bytes is longer than {MAX_KEY_BYTES}", path=path, offset=offset
    )


def _many_error(key: str, count: int, path: str, offset: int) -> TarError:
    return TarError(
        f"sample {key!r} has {count} members, more than {MAX_ENTRIES}", path=path, offset=offset
    )


def _split_name(name: str) -> tuple[str, str] | None:
    """:func:`split_member_name`, with its fast path inline (this runs once per member)."""
    slash = name.rfind("/")
    dot = name.find(".", slash + 1)
    if dot > slash + 1 and dot < len(name) - 1 and name[0] != "_" and "\n" not in name:
        return name[:dot], name[dot + 1 :].lower()
    return split_member_name(name)


def _member_parts(raw: bytes | bytearray, path: str, payload: int) -> tuple[str, str] | None:
    """``(key, entry name)`` of a member's raw name, or None for a member that is no sample's."""
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _name_error(raw, path, payload - BLOCK) from None
    return _split_name(name)


def _specs(names: Iterable[str]) -> list[EntrySpec]:
    return [EntrySpec(name, guess_content_type(name), Codec.NONE) for name in names]


class _Grouper:
    """Turns members (in archive order) into sample columns; checks adjacency and names.

    The reference (and the grouping of the Python walker); :class:`_CompiledGrouper`
    gives the same rows and errors.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.keys: list[str] = []
        self.key_hashes: list[int] = []
        self.key_lengths: list[int] = []
        self.offsets: list[int] = []
        self.lengths: list[int] = []
        self.counts: list[int] = []
        self.names: list[str] = []
        self.payloads: list[int] = []
        self.sizes: list[int] = []
        self.crcs: list[int] = []
        self.skipped = 0
        self._seen: dict[str, int] = {}  # every closed key -> its record offset
        self._key: str | None = None
        self._start = 0
        self._end = 0
        self._current: list[str] = []

    def feed(self, batch: Batch) -> None:
        names = self.names
        payloads = self.payloads
        sizes = self.sizes
        crcs = self.crcs
        for raw, first, payload, size, crc in zip(*batch):
            parts = _member_parts(raw, self.path, payload)
            if parts is None:
                self.skipped += 1
                continue
            key, ext = parts
            if key != self._key:
                self._close()
                if key in self._seen:
                    raise _split_error(raw.decode("utf-8"), key, self._seen[key], self.path, first)
                self._key = key
                self._start = first
                self._current = []
            elif ext in self._current:
                raise _duplicate_error(raw.decode("utf-8"), key, ext, self.path, first)
            self._current.append(ext)
            names.append(ext)
            payloads.append(payload)
            sizes.append(size)
            crcs.append(crc)
            self._end = payload + size

    def finish(self) -> None:
        self._close()

    def _close(self) -> None:
        key = self._key
        if key is None:
            return
        raw = key.encode("utf-8")
        if len(raw) > MAX_KEY_BYTES:
            raise _long_key_error(len(raw), self.path, self._start)
        if len(self._current) > MAX_ENTRIES:
            raise _many_error(key, len(self._current), self.path, self._start)
        self._seen[key] = self._start
        self.keys.append(key)
        self.key_hashes.append(key_hash(raw))
        self.key_lengths.append(len(raw))
        self.offsets.append(self._start)
        self.lengths.append(self._end - self._start)
        self.counts.append(len(self._current))
        self._key = None

    def drain(self) -> list[TarSample]:
        """The samples closed so far as objects; forgets their columns."""
        out: list[TarSample] = []
        at = 0
        for key, offset, length, count in zip(self.keys, self.offsets, self.lengths, self.counts):
            entries = tuple(
                TarEntry(name, guess_content_type(name), payload, size, crc)
                for name, payload, size, crc in zip(
                    self.names[at : at + count],
                    self.payloads[at : at + count],
                    self.sizes[at : at + count],
                    self.crcs[at : at + count],
                )
            )
            out.append(TarSample(key, offset, length, entries))
            at += count
        for column in (self.keys, self.key_hashes, self.key_lengths, self.offsets):
            column.clear()
        for column in (self.lengths, self.counts):
            column.clear()
        del self.names[:at], self.payloads[:at], self.sizes[:at], self.crcs[:at]
        return out

    def rows(self) -> tuple[list[str], np.ndarray, np.ndarray, list[EntrySpec]]:
        """``(keys, records, entries, specs)`` of every sample, in the footer's layouts."""
        n = len(self.keys)
        records = np.zeros(n, dtype=RECORD_ROW_DTYPE)
        records["offset"] = self.offsets
        records["length"] = self.lengths
        records["key_hash"] = np.asarray(self.key_hashes, dtype=np.uint64)
        records["key_length"] = self.key_lengths
        records["entry_count"] = self.counts
        # Entry names in first-seen order, then one id per entry: loops run in C.
        spec_ids = {name: i for i, name in enumerate(dict.fromkeys(self.names))}
        ids = list(map(spec_ids.__getitem__, self.names))
        entries = np.zeros(len(self.names), dtype=ENTRY_ROW_DTYPE)
        base = np.repeat(records["offset"], records["entry_count"].astype(np.int64))
        entries["offset"] = np.asarray(self.payloads, dtype=np.uint64) - base
        entries["size"] = self.sizes
        entries["crc"] = self.crcs
        entries["spec"] = ids
        return self.keys, records, entries, _specs(spec_ids)


class _CompiledGrouper:
    """:class:`_Grouper`'s rows and errors from ``_ctar.Grouper`` (members in C blocks).

    The C code groups the members of every block whose names are on
    WebDataset's plain path; this class splits the others' names (and those of
    the members the reference walker read), and raises the reference's errors
    from the C code's rejections.
    """

    def __init__(self, path: str, grouper: Any) -> None:
        self.path = path
        self.skipped = 0
        self._c = grouper

    def feed(self, pieces: Pieces) -> None:
        c = self._c
        for piece in pieces:
            if isinstance(piece, tuple):  # a Batch: members the reference walker read
                for member in zip(*piece):
                    self._member(*member)
                continue
            at, n = 0, len(piece)
            while at < n:
                at, rejected = c.feed(piece, at)
                if at < n:
                    member = piece.member(at)
                    if rejected is not None:
                        raise self._error(rejected, member)
                    self._member(*member)
                    at += 1

    def _member(
        self, raw: bytes | bytearray, first: int, payload: int, size: int, crc: int
    ) -> None:
        parts = _member_parts(raw, self.path, payload)
        if parts is None:
            self.skipped += 1
            return
        rejected = self._c.add(parts[0], parts[1], first, payload, size, crc)
        if rejected is not None:
            raise self._error(rejected, (raw, first, payload, size, crc))

    def _error(self, rejected: tuple[Any, ...], member: tuple[Any, ...]) -> TarError:
        kind = rejected[0]
        if kind == "long_key":
            return _long_key_error(rejected[1], self.path, rejected[2])
        if kind == "many":
            return _many_error(rejected[1], rejected[2], self.path, rejected[3])
        if kind == "names":
            return TarError(
                f"the tar's members have more than {MAX_SPECS} distinct entry names",
                path=self.path,
                offset=member[1],
            )
        name = bytes(member[0]).decode("utf-8")
        parts = _split_name(name) or (name, "")  # always split: the C code grouped it
        if kind == "split":
            return _split_error(name, parts[0], rejected[1], self.path, member[1])
        return _duplicate_error(name, parts[0], parts[1], self.path, member[1])

    def finish(self) -> None:
        rejected = self._c.finish()
        if rejected is not None:
            raise self._error(rejected, (b"", 0, 0, 0, 0))

    def _take(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        records, entries, keys = self._c.take()
        return (
            keys,
            np.frombuffer(records, dtype=RECORD_ROW_DTYPE),
            np.frombuffer(entries, dtype=ENTRY_ROW_DTYPE),
        )

    def drain(self) -> list[TarSample]:
        """The samples closed so far as objects (forgotten here)."""
        keys, records, entries = self._take()
        names = self._c.names()
        types = [guess_content_type(name) for name in names]
        out: list[TarSample] = []
        at = 0
        rows = entries.tolist()
        for key, (offset, length, _, _, count, _) in zip(keys, records.tolist()):
            items = tuple(
                TarEntry(names[spec], types[spec], offset + off, size, crc)
                for off, size, crc, spec, _ in rows[at : at + count]
            )
            out.append(TarSample(key, offset, length, items))
            at += count
        return out

    def rows(self) -> tuple[list[str], np.ndarray, np.ndarray, list[EntrySpec]]:
        """``(keys, records, entries, specs)`` of every sample, in the footer's layouts."""
        keys, records, entries = self._take()
        return keys, records, entries, _specs(self._c.names())


def _grouper(path: str) -> _Grouper | _CompiledGrouper:
    """The compiled grouping with the compiled walker, else the reference."""
    if tarwalker.Grouper is None:
        return _Grouper(path)
    return _CompiledGrouper(path, tarwalker.Grouper())


def _open(source: Any, path: str | None) -> tuple[Any, str, bool]:
    if isinstance(source, (str, os.PathLike)):
        return open(source, "rb", buffering=0), path or os.fspath(source), True
    if not hasattr(source, "read"):
        raise TypeError(f"cannot read a tar from a {type(source).__name__}")
    return source, path or str(getattr(source, "path", getattr(source, "name", "<stream>"))), False


def iter_tar_samples(
    source: Any,
    path: str | None = None,
    *,
    size: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    readahead: int | None = None,
    map_file: bool = False,
) -> Iterator[TarSample]:
    """Stream a tar once and yield its samples in archive order.

    Parameters
    ----------
    source:
        A binary stream (anything with ``read(n)``, e.g. an fsspec file opened
        with a large ``block_size``) at the archive's start, or a local path.
    path:
        The tar's URL for error messages (default: the stream's name).
    size:
        The file's size if known; a size field running past it is then
        reported at its header.
    chunk_size:
        Bytes per read.
    readahead:
        Chunks read ahead of the walk by a thread (0: no thread; ``None``:
        none for a local file, ``DEFAULT_READAHEAD`` for others). The thread
        stops when the walk ends, fails or is abandoned; an error the stream
        raises in it is raised here. A mapped file is not read, but ``None``
        or more than 0 maps its next window on a second thread while this
        one is walked (where the platform can, :func:`.mapped.can_map_ahead`);
        0 keeps the walk to one thread.
    map_file:
        Walk a local file (a path, or an open regular file at offset 0) in a
        guarded read-only mapping instead of reading it: no read copy, page
        faults instead. Off by default (the read cost less CPU when last
        measured, docs/IN-PLACE.md section 5). Mapped or read, a file cut while it
        is walked is a ``TarTruncatedError``, never SIGBUS. Other streams,
        and any file where the guard is not available, are always read.

    Yields
    ------
    TarSample
        Each sample once all of its members' headers and payloads were read.

    Raises
    ------
    NotATarError, TarChecksumError, TarTruncatedError, TarNumberError
        The file is not a tar or is damaged (path and byte offset named).
    SplitSampleError, DuplicateMemberError, TarMemberNameError
        The members do not form WebDataset samples.
    """
    with _walking(source, path, size, chunk_size, readahead, map_file) as (_, walker, grouper):
        for batch in walker:
            grouper.feed(batch)
            yield from grouper.drain()
        grouper.finish()
        yield from grouper.drain()


def scan_tar(
    source: Any,
    path: str | None = None,
    *,
    size: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    readahead: int | None = None,
    map_file: bool = False,
) -> TarShardInfo:
    """Stream a tar once and summarise every sample for the catalog (or TARIDX).

    Parameters and errors are those of :func:`iter_tar_samples`.

    Returns
    -------
    TarShardInfo
        Records and entry rows in the native footer's layouts, in archive order.
    """
    with _walking(source, path, size, chunk_size, readahead, map_file) as (url, walker, grouper):
        for batch in walker:
            grouper.feed(batch)
        grouper.finish()
    return _summary(url, walker, grouper)


@contextlib.contextmanager
def _walking(
    source: Any,
    path: str | None,
    size: int | None,
    chunk_size: int,
    readahead: int | None,
    map_file: bool,
) -> Iterator[tuple[str, TarWalker, _Grouper | _CompiledGrouper]]:
    """The opened tar's URL, its walker and the grouper fed by it; closed in that order."""
    stream, url, owned = _open(source, path)
    walker: TarWalker | None = None
    try:
        grouper = _grouper(url)
        walker = TarWalker(
            stream,
            url,
            size=size,
            chunk_size=chunk_size,
            readahead=readahead,
            map_file=map_file,
            blocks=isinstance(grouper, _CompiledGrouper),
        )
        yield url, walker, grouper
    finally:
        if walker is not None:
            walker.close()  # before the stream: the thread may be reading it
        if owned:
            stream.close()


def _summary(url: str, walker: TarWalker, g: _Grouper | _CompiledGrouper) -> TarShardInfo:
    keys, records, entries, specs = g.rows()
    return TarShardInfo(
        path=url,
        size=walker.size,
        end_offset=walker.end_offset,
        member_count=walker.member_count,
        skipped=walker.skipped + g.skipped,
        keys=keys,
        records=records,
        entries=entries,
        specs=specs,
    )
