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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._types import ByteRange
from ..catalog.kinds import FileCheck
from ..catalog.results import Problem
from ..catalog.spans import unpack_spans
from ..errors import ShardNotFoundError, StorageError, TruncatedError
from ..format.checksums import crc32c
from ..format.folder import entry_path, folder_of
from ..storage import is_local, local_path, redact, resolve
from .decode import inconsistent_row

__all__ = [
    "check_folder",
    "folder_requests",
    "join_reads",
    "read_files",
    "read_folder_record",
    "read_requests",
]

_CAT_BATCH = 64
"""Files one concurrent ``cat`` asks an object store for: the memory a batch holds stays bounded."""

Requests = list[tuple[str, ByteRange]]


def folder_requests(
    url: str, key: str, names: Sequence[str], spans: bytes, lo: int, hi: int
) -> Requests:
    """The file reads that give bytes ``[lo, hi)`` of record ``key`` of the folder group ``url``.

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
            out.append((entry_path(folder, key, name), ByteRange(start - at, end - at)))
    return out


def join_reads(requests: Requests, views: Sequence[memoryview | bytes]) -> bytes:
    """The reads laid end to end, each checked to be whole.

    A file grown past its indexed size is read only up to it (its CRC32C
    says whether those bytes changed; ``verify`` compares sizes too).

    Raises
    ------
    TruncatedError
        A file is now shorter than when it was indexed.
    """
    for (path, rng), view in zip(requests, views):
        if len(view) != rng.end - rng.start:
            raise TruncatedError(
                f"{len(view)} of {rng.end - rng.start} bytes from byte {rng.start}: the file is "
                "shorter than when it was indexed; index the folder again",
                path=redact(path),
                offset=rng.start + len(view),
            )
    if len(views) == 1:
        return bytes(views[0])
    return b"".join(views)


def read_requests(
    requests: Requests, read_batch: Callable[[Requests], list[memoryview]]
) -> list[memoryview | bytes]:
    """The bytes of each request: local files with a plain ``open``, others by ``read_batch``.

    A local file is opened, read and closed (a folder has far more files than
    a lookup keeps open: keeping them would only churn the cache of open shards).

    Raises
    ------
    ShardNotFoundError
        A local file is gone (``error.path`` names it); remote ones as ``read_batch`` raises.
    """
    if not requests or not is_local(requests[0][0]):
        return list(read_batch(requests))
    out: list[memoryview | bytes] = []
    for url, rng in requests:
        try:
            with open(local_path(url), "rb") as f:
                if rng.start:
                    f.seek(rng.start)
                out.append(f.read(rng.end - rng.start))
        except FileNotFoundError as e:
            raise ShardNotFoundError(f"{url}: no such file", path=url) from e
        except OSError as e:
            raise StorageError(f"cannot read {url}: {e}", path=url) from e
    return out


def read_folder_record(
    read_batch: Callable[[Requests], list[memoryview]],
    url: str,
    key: str,
    names: Sequence[str],
    spans: bytes,
    lo: int,
    hi: int,
) -> bytes:
    """Bytes ``[lo, hi)`` of a folder group's record, read from its files.

    Raises
    ------
    ShardNotFoundError
        A file of the sample is gone (``error.path`` names it).
    StorageError, FormatError
        As :func:`folder_requests` and the storage layer.
    """
    requests = folder_requests(url, key, names, spans, lo, hi)
    if not requests:
        return b""
    return join_reads(requests, read_requests(requests, read_batch))


def read_files(
    paths: Sequence[str], storage_options: Mapping[str, Any]
) -> dict[str, bytes | Exception]:
    """Each file's bytes, whole, or the error reading it raised (a file's error spares the others).

    Object stores get their files in one concurrent ``cat`` per 64; local
    files are read with a plain ``open`` (fsspec's costs ~3 times as much per
    small file).
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
                with open(path, "rb") as f:
                    out[url] = f.read()
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
