"""From a tar stream to WebDataset samples: keys, byte ranges and checksummed entries.

A WebDataset key is the member path up to the first dot of its basename,
directory included; the rest of the name (lower-cased) names the entry:
``train/0001.seg.png`` is entry ``seg.png`` of sample ``train/0001``. The
members of a sample are adjacent in the archive, so a sample is one byte
range, from its first member's first header to the end of its last payload.
"""

from __future__ import annotations

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
from .walk import DEFAULT_CHUNK, Batch, Member, TarWalker

__all__ = ["iter_tar_samples", "scan_tar", "split_member_name"]

# WebDataset's own rules (webdataset.tariterators): the key/extension split
# and the metadata members it skips. The regex is the fallback for names the
# fast path below does not decide.
_WDS_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_WDS_META = re.compile(r"__[^/]*__($|/)")


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


class _Grouper:
    """Turns members (in archive order) into sample columns; checks adjacency and names."""

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
        group = tarwalker.group
        if group is None:
            self._feed(zip(*batch))
            return
        # The compiled grouping takes the plain members; the reference reads each other one.
        names, firsts, payloads, sizes, crcs = batch
        at = 0
        while at < len(names):
            stop, exts, keys, offsets, lengths, counts, self._key, self._start, self._end = group(
                names,
                firsts,
                payloads,
                sizes,
                self._seen,
                self._key,
                self._start,
                self._end,
                self._current,
                at,
            )
            self.names.extend(exts)
            if keys:
                raws = [k.encode("utf-8") for k in keys]
                self.keys.extend(keys)
                self.key_hashes.extend(map(key_hash, raws))
                self.key_lengths.extend(map(len, raws))
                self.offsets.extend(offsets)
                self.lengths.extend(lengths)
                self.counts.extend(counts)
            if at == 0 and stop == len(names):
                self.payloads.extend(payloads)
                self.sizes.extend(sizes)
                self.crcs.extend(crcs)
                return
            self.payloads.extend(payloads[at:stop])
            self.sizes.extend(sizes[at:stop])
            self.crcs.extend(crcs[at:stop])
            if stop < len(names):
                self._feed([(names[stop], firsts[stop], payloads[stop], sizes[stop], crcs[stop])])
                stop += 1
            at = stop

    def _feed(self, members: Iterable[Member]) -> None:
        names = self.names
        payloads = self.payloads
        sizes = self.sizes
        crcs = self.crcs
        for raw, first, payload, size, crc in members:
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise TarMemberNameError(
                    f"member name {raw!r:.120} is not valid UTF-8, so it cannot be a sample key; "
                    "rename the member",
                    path=self.path,
                    offset=payload - BLOCK,
                ) from None
            # split_member_name's fast path, inline (this loop runs once per member).
            slash = name.rfind("/")
            dot = name.find(".", slash + 1)
            if dot > slash + 1 and dot < len(name) - 1 and name[0] != "_" and "\n" not in name:
                key = name[:dot]
                ext = name[dot + 1 :].lower()
            else:
                parts = split_member_name(name)
                if parts is None:
                    self.skipped += 1
                    continue
                key, ext = parts
            if key != self._key:
                self._close()
                if key in self._seen:
                    raise SplitSampleError(
                        f"member {name!r} belongs to sample {key!r}, whose other members "
                        f"start at byte {self._seen[key]} and are not adjacent to it; "
                        "a WebDataset sample's members must be consecutive (re-write the tar "
                        "with each sample's files together)",
                        key=key,
                        first_offset=self._seen[key],
                        path=self.path,
                        offset=first,
                    )
                self._key = key
                self._start = first
                self._current = []
            elif ext in self._current:
                raise DuplicateMemberError(
                    f"sample {key!r} has two members named {ext!r} (the second is {name!r}); "
                    "remove one of them",
                    path=self.path,
                    offset=first,
                )
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
            raise TarMemberNameError(
                f"sample key of {len(raw)} bytes is longer than {MAX_KEY_BYTES}",
                path=self.path,
                offset=self._start,
            )
        if len(self._current) > MAX_ENTRIES:
            raise TarError(
                f"sample {key!r} has {len(self._current)} members, more than {MAX_ENTRIES}",
                path=self.path,
                offset=self._start,
            )
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
        raises in it is raised here. A mapped file needs no thread.
    map_file:
        Walk a local file (a path, or an open regular file at offset 0) in a
        read-only mapping instead of reading it: no read copy, but a page
        fault per 64 KiB instead, which costs more CPU than the copy on the
        VMs measured (``benchmarks/README.md``), hence off by default. A
        file cut short while it is walked is reported as a truncated tar.
        Other streams are read.

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
    stream, url, owned = _open(source, path)
    walker: TarWalker | None = None
    try:
        walker = TarWalker(
            stream, url, size=size, chunk_size=chunk_size, readahead=readahead, map_file=map_file
        )
        grouper = _Grouper(url)
        for batch in walker:
            grouper.feed(batch)
            yield from grouper.drain()
        grouper.finish()
        yield from grouper.drain()
    finally:
        if walker is not None:
            walker.close()  # before the stream: the thread may be reading it
        if owned:
            stream.close()


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
    stream, url, owned = _open(source, path)
    walker: TarWalker | None = None
    try:
        walker = TarWalker(
            stream, url, size=size, chunk_size=chunk_size, readahead=readahead, map_file=map_file
        )
        grouper = _Grouper(url)
        for batch in walker:
            grouper.feed(batch)
        grouper.finish()
    finally:
        if walker is not None:
            walker.close()  # before the stream: the thread may be reading it
        if owned:
            stream.close()
    return _summary(url, walker, grouper)


def _summary(url: str, walker: TarWalker, g: _Grouper) -> TarShardInfo:
    n = len(g.keys)
    records = np.zeros(n, dtype=RECORD_ROW_DTYPE)
    records["offset"] = g.offsets
    records["length"] = g.lengths
    records["key_hash"] = np.asarray(g.key_hashes, dtype=np.uint64)
    records["key_length"] = g.key_lengths
    records["entry_count"] = g.counts
    # Entry names in first-seen order, then one id per entry: loops run in C.
    spec_ids = {name: i for i, name in enumerate(dict.fromkeys(g.names))}
    specs = [EntrySpec(name, guess_content_type(name), Codec.NONE) for name in spec_ids]
    ids = list(map(spec_ids.__getitem__, g.names))
    entries = np.zeros(len(g.names), dtype=ENTRY_ROW_DTYPE)
    base = np.repeat(records["offset"], records["entry_count"].astype(np.int64))
    entries["offset"] = np.asarray(g.payloads, dtype=np.uint64) - base
    entries["size"] = g.sizes
    entries["crc"] = g.crcs
    entries["spec"] = ids
    return TarShardInfo(
        path=url,
        size=walker.size,
        end_offset=walker.end_offset,
        member_count=walker.member_count,
        skipped=walker.skipped + g.skipped,
        keys=g.keys,
        records=records,
        entries=entries,
        specs=specs,
    )
