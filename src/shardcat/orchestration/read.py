"""``shardcat.read``: a dataset as a Dask bag, one partition per shard, streamed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._types import ByteRange
from ..catalog import internal
from ..errors import ChecksumError
from ..format import Record
from ..format.footer import EntrySpec
from ..format.spec import Codec
from ..format.tar import read_tar_record
from ..storage import open_source, redact
from ..storage.shards import ShardReader
from .tasks import catalog_for

if TYPE_CHECKING:
    from dask.bag import Bag

    from ..catalog.results import RecordRow
    from ..reading import Catalog, CatalogHandle

__all__ = ["iter_shard", "iter_tar_records", "iter_tar_shard", "open_registered", "read"]


def open_registered(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    expect: tuple[str, int] | None = None,
) -> ShardReader:
    """Open a shard, checking it is the one the catalog registered.

    ``expect`` is the registered ``(file_id, footer_crc)``.

    Raises
    ------
    ChecksumError
        The file was replaced since it was registered (even by a valid shard).
    ShardNotFoundError, FormatError
        As :class:`ShardReader` does.
    """
    r = ShardReader(url, storage_options=dict(storage_options or {}))
    if expect is None:
        return r
    info = r.info  # built once: it decodes every key of the footer
    if (info.file_id, info.footer_crc) != expect:
        r.close()
        raise ChecksumError(
            f"the shard is not the one registered (file id {info.file_id}, footer CRC32C "
            f"{info.footer_crc:#010x}; registered {expect[0]}, {expect[1]:#010x}): it was "
            "replaced since; run `shardcat verify`, then restore it or reindex it",
            path=redact(url),
        )
    return r


def iter_shard(
    url: str,
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
    expect: tuple[str, int] | None = None,
    hidden: frozenset[int] = frozenset(),
) -> Iterator[dict[str, Any]]:
    """Every sample of one shard in file order: ``{"__key__": ..., name: value, ...}``.

    With ``decode`` values are decoded by content type (JSON → dict, npy →
    array, text → str); otherwise entries are :class:`~shardcat.Entry` objects.
    ``expect`` is the ``(file_id, footer_crc)`` the catalog registered: a
    shard replaced since (even by a valid one) raises ChecksumError instead
    of streaming other records. Records starting at an offset in ``hidden``
    (not visible at the version being read) are skipped.
    """
    with open_registered(url, storage_options, expect) as r:
        for rec in r.iter_records(entries):
            if hidden and rec.offset in hidden:
                continue
            if decode:
                yield rec.decode()
            else:
                yield {"__key__": rec.key, **rec.entries}


_TAR_READ_BYTES = 8 * 2**20
"""A tar is read in ranges of about this many bytes (whole samples), in file order."""


def iter_tar_shard(
    url: str,
    rows: Sequence[RecordRow],
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
) -> Iterator[dict[str, Any]]:
    """Every sample of a tar shard, from its catalog rows, each entry's CRC32C checked.

    ``rows`` are the shard's :meth:`Catalog.record_rows` (file order). The
    tar is read in ranges of whole samples (~8 MiB each), never per member;
    a payload that changed since indexing raises ChecksumError.
    """
    for rec in iter_tar_records(url, rows, entries, storage_options):
        yield rec.decode() if decode else {"__key__": rec.key, **rec.entries}


def iter_tar_records(
    url: str,
    rows: Sequence[RecordRow],
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[Record]:
    """The records of ``rows`` (catalog rows of one tar, in file order), each entry CRC-checked.

    Rows that are close together are read in one range of at most ~8 MiB
    (whole samples); bytes between rows far apart are not read. Entries are
    views of that range.

    Raises
    ------
    ChecksumError
        A payload changed since the tar was indexed.
    TruncatedError, ShardNotFoundError
        The tar is shorter than indexed, or gone.
    """
    names = None if entries is None else frozenset(entries)
    source = open_source(url, dict(storage_options or {}))
    try:
        i = 0
        while i < len(rows):
            j = i + 1
            while (
                j < len(rows)
                and rows[j].offset + rows[j].length - rows[i].offset <= _TAR_READ_BYTES
            ):
                j += 1
            lo, hi = rows[i].offset, rows[j - 1].offset + rows[j - 1].length
            (data,) = source.read_ranges([ByteRange(lo, hi)])
            view = memoryview(data)
            for row in rows[i:j]:
                pick = [k for k, e in enumerate(row.entries) if names is None or e[0] in names]
                yield read_tar_record(
                    view[row.offset - lo : row.offset - lo + row.length],
                    row.key,
                    [EntrySpec(row.entries[k][0], row.entries[k][1], Codec.NONE) for k in pick],
                    [row.spans[k] for k in pick],
                    path=redact(url),
                    offset=row.offset,
                )
            i = j
    finally:
        source.close()


def _read_tar_partition(
    handle: CatalogHandle,
    shard_id: int,
    url: str,
    entries: list[str] | None,
    storage_options: dict[str, Any],
    decode: bool,
) -> list[dict[str, Any]]:
    rows = internal.record_rows(catalog_for(handle), shard_id)
    return list(iter_tar_shard(url, rows, entries, storage_options, decode))


def _read_partition(
    url: str,
    entries: list[str] | None,
    storage_options: dict[str, Any],
    decode: bool,
    expect: tuple[str, int],
    hidden: frozenset[int],
) -> list[dict[str, Any]]:
    return list(iter_shard(url, entries, storage_options, decode, expect, hidden))


def read(
    catalog: Catalog | str,
    dataset: str,
    entries: Iterable[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
    version: int | str | None = None,
) -> Bag:
    """The records of ``dataset`` (at a version) as a ``dask.bag.Bag`` with one partition per shard.

    Parameters
    ----------
    catalog:
        A :class:`shardcat.Catalog` or its URL.
    entries:
        Read only these entries of each record.
    storage_options:
        fsspec options for the workers (default: the catalog's own ``storage_options``).
    decode:
        Decode values by content type (default) or return raw entries.
    version:
        A kept version's number or a tag (default: the latest).

    Raises
    ------
    DatasetNotFoundError
        No such dataset in the catalog.
    VersionNotFoundError
        No such kept version or tag.
    """
    import dask.bag as db
    from dask.delayed import delayed

    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        number, shards = internal.visible_shards(cat, dataset, version)
        opts = dict(cat.storage_options if storage_options is None else storage_options)
        handle = cat.handle()  # the partitions read shards only; a tar's reopens the catalog
    names = None if entries is None else list(entries)
    parts = [
        # A tar has no footer: its partition walks the shard's catalog rows (kind "tar").
        delayed(_read_tar_partition)(
            handle, s.id, s.url, names, opts, decode, dask_key_name=f"shardcat-read-{i}-{s.url}"
        )
        if s.kind == "tar"
        else delayed(_read_partition)(
            s.url,
            names,
            opts,
            decode,
            (s.file_id, s.footer_crc),
            hidden,
            dask_key_name=f"shardcat-read-{number}-{i}-{s.url}",
        )
        for i, (s, hidden) in enumerate(shards)
    ]
    bag: Bag = db.from_delayed(parts) if parts else db.from_sequence([], npartitions=1)
    return bag
