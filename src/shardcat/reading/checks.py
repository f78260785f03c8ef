"""Reading shard files again: rebuilding their summaries (reindex) and checking every byte (verify).

The shards are the source of truth: everything the catalog stores about a
shard can be recomputed from its header and footer (a tar: from a scan).
Reading files takes time, so it happens here, outside any transaction
(:func:`prepare_from_footers`, :func:`check_files`); the catalog's
:mod:`~shardcat.catalog.maintenance` then only runs SQL with what was read.
How a file is read depends on its kind: a native shard's footer and every
CRC, a tar's full re-scan, every file of a folder group read again, an MDS
shard or LitData chunk scanned again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any

from .._redact import redact_url
from ..catalog.kinds import FileCheck, Summary, shard_kind
from ..catalog.register import PreparedShard, prepare_shard
from ..catalog.results import Problem
from ..errors import FormatError, ShardcatError, ShardNotFoundError
from ..storage import open_source

if TYPE_CHECKING:
    from ..catalog.models import Shard
    from ..format.tar import TarShardInfo

__all__ = [
    "CHECKS",
    "NAMED_BY_CATALOG",
    "SUMMARIES",
    "FolderSamples",
    "check_files",
    "prepare_from_footers",
    "read_footers",
    "scan_tar_url",
]


def _native_check(url: str, storage_options: Any) -> FileCheck:
    try:
        # The URL-aware shard reader loads on first use: a lookup needs none of it.
        from ..storage.shards import ShardReader

        reader = ShardReader(url, storage_options=storage_options)
    except ShardNotFoundError as e:
        return None, [Problem(url, "missing", f"the shard file does not exist: {e}")], 0
    except (ShardcatError, OSError) as e:
        return None, [Problem(url, "unreadable", str(e))], 0
    with reader:
        try:
            info = reader.info
        except (ShardcatError, OSError) as e:
            return None, [Problem(url, "unreadable", str(e))], 0
        try:
            checked = reader.verify().records
        except (FormatError, OSError) as e:
            # The footer is still compared with the catalog.
            return info, [Problem(url, "corrupt", str(e))], 0
    return info, [], checked


def _native_summary(url: str, storage_options: Any) -> Summary:
    from ..storage.shards import ShardReader

    with ShardReader(url, storage_options=storage_options) as reader:
        return reader.info


def scan_tar_url(url: str, storage_options: Any) -> TarShardInfo:
    """Scan the tar at ``url`` once, streaming (one request per 8 MiB, never one per member).

    Raises
    ------
    ShardNotFoundError
        No file at ``url``.
    TarError
        The tar is damaged (the error names the file and the byte offset).
    """
    from ..format.tar import scan_tar

    source = open_source(url, storage_options)
    try:
        size = source.size()
        stream = source.open_stream()
        try:
            return scan_tar(stream, url, size=size)
        finally:
            stream.close()
    finally:
        source.close()


def _scanned(url: str, what: str, scan: Callable[[], Any]) -> FileCheck:
    """A file of data indexed in place scanned again: its summary, or why there is none."""
    try:
        info = scan()
    except ShardNotFoundError as e:
        return None, [Problem(url, "missing", f"the {what} does not exist: {e}")], 0
    except FormatError as e:
        return None, [Problem(url, "corrupt", f"the {what} cannot be scanned: {e}")], 0
    except (ShardcatError, OSError) as e:
        return None, [Problem(url, "unreadable", str(e))], 0
    return info, [], len(info.records)


def _tar_check(url: str, storage_options: Any) -> FileCheck:
    # Scanning reads every byte and checks every header; the payload CRCs it
    # computes are then compared with the rows (a changed payload is a mismatch).
    return _scanned(url, "tar", lambda: scan_tar_url(url, storage_options))


def _columnar_check(
    kind: str, url: str, storage_options: Any, samples: FolderSamples = ()
) -> FileCheck:
    # The file is scanned again as its index.json now says (every column's CRC32C);
    # the catalog's rows name the key column (the one column that is no entry).
    from .columnar import rescan

    return _scanned(url, f"{kind} file", lambda: rescan(kind, url, storage_options, samples))


FolderSamples = Sequence[tuple[str, int, list[str]]]
"""A folder group's records as the catalog names them: ``(key, offset, entry names)``."""


def _files_check(url: str, storage_options: Any, samples: FolderSamples = ()) -> FileCheck:
    from .folder import check_folder

    return check_folder(url, samples, storage_options)


CHECKS: dict[str, Callable[..., FileCheck]] = {
    "native": _native_check,
    "tar": _tar_check,
    "files": _files_check,
    "mds": partial(_columnar_check, "mds"),
    "litdata": partial(_columnar_check, "litdata"),
}
"""Shard kind -> read the file again and check every byte it can: ``(summary, problems, records checked)``.

Called as ``check(url, storage_options)``; a kind whose files only the
catalog names (``files``) also gets its records' :data:`FolderSamples`."""

NAMED_BY_CATALOG = frozenset({"files", "mds", "litdata"})
"""Kinds whose check needs the catalog's rows: a folder group's name its files, an MDS
shard's or LitData chunk's name the column its keys came from."""


def _not_rebuilt(what: str, command: str, url: str, storage_options: Any) -> Summary:
    # A folder group's files (a columnar file's key column) are named by its catalog rows
    # alone: there is nothing to rebuild them from.
    raise ValueError(
        f"{redact_url(url)} is {what} indexed in place: its rows are not rebuilt from one "
        f"file; index it again (`shardcat {command}`)"
    )


SUMMARIES: dict[str, Callable[[str, Any], Summary]] = {
    "native": _native_summary,
    "tar": scan_tar_url,
    "files": partial(_not_rebuilt, "a group of a folder", "index-files"),
    "mds": partial(_not_rebuilt, "a shard of an MDS directory", "index-mds"),
    "litdata": partial(_not_rebuilt, "a chunk of a LitData directory", "index-litdata"),
}
"""Shard kind -> the summary its catalog rows are rebuilt from (reindex)."""


def _by_kind(table: Mapping[str, Callable[..., Any]], kind: str) -> Callable[..., Any]:
    shard_kind(kind)  # a kind this shardcat does not know: the catalog's FormatError
    return table[kind]


def read_footers(
    urls: list[str], storage_options: Any, workers: int, kind: str = "native"
) -> list[Summary]:
    """Each shard's summary (concurrently for several shards).

    From its header and footer for native shards; a tar (``kind="tar"``) is scanned.

    Raises
    ------
    ShardNotFoundError, FormatError
        For the first shard that is missing or unreadable.
    """
    summary = _by_kind(SUMMARIES, kind)

    def one(url: str) -> Summary:
        return summary(url, storage_options)  # type: ignore[no-any-return]

    if len(urls) <= 1 or workers <= 1:
        return [one(u) for u in urls]
    with ThreadPoolExecutor(max_workers=min(workers, len(urls))) as pool:
        return list(pool.map(one, urls))


def prepare_from_footers(
    urls: list[str], storage_options: Any, workers: int, kind: str = "native"
) -> list[PreparedShard]:
    """The catalog rows of each shard, rebuilt from its footer (no SQL: before the transaction).

    Raises
    ------
    ValueError
        If a URL is named twice.
    ShardNotFoundError, FormatError
        For the first shard that is missing or unreadable.
    """
    if len(set(urls)) != len(urls):
        raise ValueError("reindex() got the same shard URL twice")
    preps: list[PreparedShard] = []
    for url, info in zip(urls, read_footers(urls, storage_options, workers, kind)):
        prep = prepare_shard(info)
        prep.url = redact_url(url)  # as the caller names it, not as the reader resolved it
        preps.append(prep)
    return preps


def check_files(
    shards: list[Shard],
    storage_options: Any,
    *,
    workers: int,
    on_shard: Callable[[str, int], None] | None = None,
    samples: Mapping[int, FolderSamples] | None = None,
) -> list[FileCheck]:
    """Read every shard again and check every CRC (no SQL: outside any transaction).

    How a file is checked depends on its kind (:data:`CHECKS`): a native
    shard's footer and every CRC, a tar's full re-scan.

    ``on_shard(url, total)`` is called as each shard's check finishes.
    ``samples``: per shard id of a kind in :data:`NAMED_BY_CATALOG`, its records.
    """

    def check_file(shard: Shard) -> FileCheck:
        url = shard.url
        try:
            check = _by_kind(CHECKS, shard.kind)
            if shard.kind in NAMED_BY_CATALOG:
                return check(url, storage_options, (samples or {}).get(shard.id, ()))  # type: ignore[no-any-return]
            return check(url, storage_options)  # type: ignore[no-any-return]
        except Exception as e:
            # The last line of defence: whatever one shard does, it is reported and the
            # others are still checked (a shard is data from outside, errors or not).
            return None, [Problem(url, "unreadable", f"{type(e).__name__}: {e}")], 0
        finally:
            if on_shard is not None:
                on_shard(url, len(shards))

    if len(shards) > 1 and workers > 1:
        with ThreadPoolExecutor(max_workers=min(workers, len(shards))) as pool:
            return list(pool.map(check_file, shards))
    return [check_file(sh) for sh in shards]
