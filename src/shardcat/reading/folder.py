"""Reading a record of a folder indexed in place: one read per entry, each a whole file.

A ``files`` shard's record is its sample's files laid end to end in layout
order (:mod:`shardcat.format.folder`); its row's spans place each file in
that range. Where a lookup of another kind reads ``[lo, hi)`` of the
record from the shard's URL, a folder's record is read here from the
files that range covers, ``folder/key.entry``, in one batch of requests
(concurrent on object stores), and laid end to end again, so the kind's
decoder checks every entry's size and CRC32C exactly as for a tar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._pread import pread_file, read_whole
from .._types import ByteRange
from ..catalog.kinds import FileCheck
from ..catalog.results import Problem
from ..errors import ChecksumError, ShardNotFoundError, StorageError, TruncatedError
from ..format import recordcodec
from ..format.checksums import crc32c
from ..format.entries import Record
from ..format.folder import checked_file, entry_path, folder_of
from ..format.footer import EntrySpec
from ..format.spans import unpack_spans
from ..format.tar.read import read_tar_record
from ..storage import is_local, local_path, redact, resolve
from .decode import inconsistent_row, row_spans

if TYPE_CHECKING:
    from ..storage import SourceCache

__all__ = [
    "FILES_OPEN",
    "check_folder",
    "check_read",
    "folder_requests",
    "join_reads",
    "read_files",
    "read_folder_record",
    "read_local_record",
    "read_requests",
]

_CAT_BATCH = 64
"""Files one concurrent ``cat`` asks an object store for: the memory a batch holds stays bounded."""

FILES_OPEN = 32
"""Remote files of folders a lookup keeps (their filesystem and source), apart from its shards."""

Request = tuple[str, ByteRange, int]
"""A file, the range of it read, and how many of those bytes the record wants."""
Requests = list[Request]


def folder_requests(
    url: str, key: str, names: Sequence[str], spans: bytes, lo: int, hi: int
) -> Requests:
    """The file reads that give bytes ``[lo, hi)`` of record ``key`` of the folder group ``url``.

    A read that reaches a file's indexed end asks for one byte more: a file
    that grew since it was indexed says so in the same request
    (:func:`join_reads`), where its CRC32C, computed on the indexed size,
    would still match.

    Raises
    ------
    FormatError
        The row's spans do not fit its layout.
    """
    try:
        located = unpack_spans(spans, len(names))
        folder = folder_of(url)
    except ValueError as e:
        raise inconsistent_row(e, url, "index the folder again") from e
    out: Requests = []
    for name, (at, size, _) in zip(names, located):
        start, end = max(lo, at), min(hi, at + size)
        if start < end:
            past = end == at + size  # one byte past the indexed end: a grown file shows
            rng = ByteRange(start - at, end - at + past)
            out.append((entry_path(folder, key, name), rng, end - start))
    return out


def join_reads(requests: Requests, views: Sequence[memoryview | bytes]) -> bytes:
    """The reads laid end to end, each checked to be exactly the bytes wanted.

    Raises
    ------
    TruncatedError
        A file is now shorter than when it was indexed.
    ChecksumError
        A file is now longer than when it was indexed (its indexed bytes may
        be unchanged: it is not the file that was indexed).
    """
    for (path, rng, wanted), view in zip(requests, views):
        if len(view) != wanted:
            check_read(view, path, rng.start, wanted)
    if len(views) == 1:
        return bytes(views[0])
    return b"".join(views)


def check_read(view: memoryview | bytes, path: str, start: int, wanted: int) -> None:
    """Raise unless ``view``, read from byte ``start`` of the file ``path``, is ``wanted`` bytes long.

    Raises
    ------
    TruncatedError
        It is shorter: the file is shorter than when it was indexed.
    ChecksumError
        It is longer (the read asked one byte past the indexed end): the file
        grew, and may hold its indexed bytes unchanged, but it is not the file
        that was indexed.
    """
    if len(view) > wanted:
        raise ChecksumError(
            f"the file is longer than its {start + wanted:,} bytes when it was indexed "
            "(appended to or rewritten since); index the folder again",
            path=redact(path),
        )
    if len(view) < wanted:
        raise TruncatedError(
            f"{len(view)} of {wanted} bytes from byte {start}: the file is shorter than "
            "when it was indexed; index the folder again",
            path=redact(path),
            offset=start + len(view),
        )


def read_requests(requests: Requests, files: SourceCache) -> list[memoryview | bytes]:
    """The bytes of each request: local files opened, read and closed; others through ``files``.

    ``files`` is the lookup's cache of remote files, apart from its shards'
    (whose cache a folder's many files would churn); their reads go out in
    one batch, concurrent on object stores. Local files are not kept open:
    measured on 20,000 samples of two files (bench_index_files.py), a
    descriptor kept in the cache was no faster on a hit (its ``fstat`` +
    ``pread`` against ``open`` + ``pread`` + ``close`` of a file whose name
    the kernel has cached) and ~20 µs slower on a miss (the cache's source
    object), and random keys of a large folder miss.

    Raises
    ------
    ShardNotFoundError
        A file is gone (``error.path`` names it).
    StorageError
        A file cannot be read.
    """
    if not requests:
        return []
    if is_local(requests[0][0]):
        out: list[memoryview | bytes] = []
        for url, rng, _ in requests:
            try:
                out.append(pread_file(local_path(url), rng.end - rng.start, rng.start))
            except FileNotFoundError as e:
                raise ShardNotFoundError(f"{url}: no such file", path=url) from e
            except OSError as e:
                raise StorageError(f"cannot read {url}: {e}", path=url) from e
        return out
    return list(files.read_batch([(url, rng) for url, rng, _ in requests]))


def read_local_record(
    url: str,
    folder: str,
    key: str,
    specs: Sequence[EntrySpec],
    spans: bytes,
    offset: int,
    pairs: tuple[tuple[str, str], ...] | None = None,
) -> Record:
    """A whole record of a local folder group: each file opened, read, closed; every one checked.

    The point lookup's path for local folders (``url``: the group's, ``folder``: its path): the
    steps of :func:`read_folder_record` and the ``files`` decoder without
    their general cases. Each file is asked for one byte past its indexed
    size (one that grew says so); the files laid end to end are checked and
    decoded by the record codec's ``tar_record`` (compiled where built: every
    CRC32C in one call), given ``pairs``, the layout's ``(name, content_type)``
    pairs (the caller's cached ones; made from ``specs`` if None). Where it
    declines, each file is checked alone, so the error names its file.

    Raises
    ------
    ShardNotFoundError
        A file of the sample is gone (``error.path`` names it).
    StorageError
        A file cannot be read.
    FormatError
        The row's spans do not fit its layout; or a file is shorter, longer or
        other than indexed (:class:`TruncatedError`, :class:`ChecksumError`).
    """
    located = row_spans(spans, len(specs), url, "index the folder again", offset)
    parts: list[bytes] = []
    for spec, (_, size, _) in zip(specs, located):
        path = f"{folder}/{key}.{spec.name}"
        try:
            data = pread_file(path, size + 1, 0)
        except FileNotFoundError as e:
            raise ShardNotFoundError(f"{path}: no such file", path=path) from e
        except OSError as e:
            raise StorageError(f"cannot read {path}: {e}", path=path) from e
        if len(data) != size:
            check_read(data, path, 0, size)
        parts.append(data)
    joined = parts[0] if len(parts) == 1 else b"".join(parts)
    if pairs is None:
        pairs = tuple((spec.name, spec.content_type) for spec in specs)
    record = recordcodec.tar_record(joined, key, pairs, spans, offset, Record)
    if record is not None:
        return record
    # Declined: a file's bytes are not those indexed. Each alone names the one that failed.
    for spec, (_, size, crc), data in zip(specs, located, parts):
        checked_file(data, key, spec, size, crc, f"{folder}/{key}.{spec.name}")
    return read_tar_record(joined, key, specs, located, offset=offset, holder="file")


def read_folder_record(
    files: SourceCache, url: str, key: str, names: Sequence[str], spans: bytes, lo: int, hi: int
) -> bytes:
    """Bytes ``[lo, hi)`` of a folder group's record, read from its files.

    Raises
    ------
    ShardNotFoundError
        A file of the sample is gone (``error.path`` names it).
    StorageError, FormatError
        As :func:`folder_requests`, :func:`join_reads` and the storage layer.
    """
    requests = folder_requests(url, key, names, spans, lo, hi)
    if not requests:
        return b""
    return join_reads(requests, read_requests(requests, files))


def read_files(
    paths: Sequence[str], storage_options: Mapping[str, Any]
) -> dict[str, bytes | Exception]:
    """Each file's bytes, whole, or the error reading it raised (a file's error spares the others).

    Object stores get their files in one concurrent ``cat`` per 64; local
    files with :func:`~shardcat._pread.read_whole` (fsspec's ``cat_file``
    costs ~3 times a plain ``open``, which costs ~2 times that per small file).
    """
    from fsspec.implementations.local import LocalFileSystem

    if not paths:
        return {}
    fs, _ = resolve(paths[0], dict(storage_options))
    local = isinstance(fs, LocalFileSystem)
    stripped = [p if local else fs._strip_protocol(p) for p in paths]
    out: dict[str, bytes | Exception] = {}
    if local:
        for url, path in zip(paths, stripped):
            try:
                out[url] = read_whole(path)
            except OSError as e:
                out[url] = e
        return out
    for i in range(0, len(paths), _CAT_BATCH):
        urls, batch = paths[i : i + _CAT_BATCH], stripped[i : i + _CAT_BATCH]
        try:
            got = fs.cat(batch, on_error="return")
        except OSError as e:  # the store failed as a whole: every file of the batch says so
            got = dict.fromkeys(batch, e)
        for url, path in zip(urls, batch):
            data = got.get(path, FileNotFoundError(path))
            out[url] = data if isinstance(data, bytes | Exception) else bytes(data)
    return out


def check_folder(
    url: str, samples: Sequence[tuple[str, int, list[str]]], storage_options: Any
) -> FileCheck:
    """Read every file of a folder group again: its summary as the files are now, and problems.

    ``samples``: the catalog's ``(key, offset, entry names)`` of each record,
    which is where a folder group's files are named. A file that is gone or
    cannot be read is a problem; a file changed since indexing gives another
    size or CRC32C, which the comparison with the catalog reports.
    """
    from ..format.folder import FolderSample, folder_info

    folder = folder_of(url)
    paths = [entry_path(folder, key, name) for key, _, names in samples for name in names]
    data = read_files(paths, storage_options)
    problems: list[Problem] = []
    read: list[FolderSample] = []
    offsets: list[int] = []
    for key, offset, names in samples:
        files = []
        for name in names:
            path = entry_path(folder, key, name)
            got = data[path]
            if isinstance(got, FileNotFoundError):
                problems.append(Problem(redact(path), "missing", f"key {key!r}: the file is gone"))
            elif isinstance(got, Exception):
                problems.append(
                    Problem(redact(path), "unreadable", f"key {key!r}: {type(got).__name__}: {got}")
                )
            else:
                files.append((name, len(got), crc32c(got)))
        if len(files) == len(names):
            read.append(FolderSample(key, tuple(files)))
            offsets.append(offset)
    # What was read is compared with the catalog too: a changed file is a mismatch of its key.
    return folder_info(url, read, offsets), problems, len(read)
