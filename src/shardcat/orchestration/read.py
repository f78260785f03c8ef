"""``shardcat.read``: a dataset as a Dask bag, one partition per shard, streamed."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._onerror import BAD_SAMPLE, OnError, check_on_error, drop_or_raise
from .._types import ByteRange
from ..catalog import internal
from ..catalog.kinds import shard_kind
from ..errors import ChecksumError, ShardNotFoundError, StorageError
from ..format import Record
from ..format.folder import checked_file, entry_path, folder_of
from ..format.footer import EntrySpec
from ..format.spec import Codec
from ..format.tar import read_tar_record
from ..reading.folder import read_files
from ..storage import open_source, redact
from ..storage.shards import ShardReader
from .joins import GroupJoin, join_records, join_summary, log_joins, plan_joins
from .tasks import catalog_for

if TYPE_CHECKING:
    from dask.bag import Bag

    from ..catalog.results import RecordRow, ShardRow
    from ..reading import Catalog, CatalogHandle

__all__ = [
    "iter_shard",
    "iter_tar_records",
    "iter_tar_shard",
    "open_registered",
    "read",
    "tar_rows",
]


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
    *,
    on_error: OnError = "raise",
    dataset: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Every sample of one shard in file order: ``{"__key__": ..., name: value, ...}``.

    With ``decode`` values are decoded by content type (JSON → dict, npy →
    array, text → str); otherwise entries are :class:`~shardcat.Entry` objects.
    ``expect`` is the ``(file_id, footer_crc)`` the catalog registered: a
    shard replaced since (even by a valid one) raises ChecksumError instead
    of streaming other records. Records starting at an offset in ``hidden``
    (not visible at the version being read) are skipped. A sample that does
    not decode is raised or dropped as ``on_error`` says (see
    :func:`read`); ``dataset`` is named in the error.

    Raises
    ------
    SampleDecodeError
        A sample does not decode, with ``decode`` and ``on_error="raise"``.
    """
    with open_registered(url, storage_options, expect) as r:
        records = r.iter_records(entries)
        if hidden:
            records = (rec for rec in records if rec.offset not in hidden)
        yield from _samples(records, url, decode, on_error, dataset)


def _samples(
    records: Iterable[Record], url: str, decode: bool, on_error: OnError, dataset: str | None
) -> Iterator[dict[str, Any]]:
    """``records`` as sample dicts (decoded, or raw entries); a bad one raised or dropped."""
    for rec in records:
        if not decode:
            yield {"__key__": rec.key, **rec.entries}
            continue
        try:
            sample = rec.decode()
        except BAD_SAMPLE as e:
            drop_or_raise(e, on_error, dataset=dataset, path=redact(url))
            continue
        yield sample


_TAR_READ_BYTES = 8 * 2**20
"""A tar is read in ranges of about this many bytes (whole samples), in file order."""


def iter_tar_shard(
    url: str,
    rows: Sequence[RecordRow],
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
    *,
    on_error: OnError = "raise",
    dataset: str | None = None,
    kind: str = "tar",
) -> Iterator[dict[str, Any]]:
    """Every sample of a tar shard, from its catalog rows, each entry's CRC32C checked.

    ``kind="files"``: a folder group's (its files read, :func:`iter_folder_records`).

    ``rows`` are the shard's :meth:`Catalog.record_rows` (file order). The
    tar is read in ranges of whole samples (~8 MiB each), never per member;
    a payload that changed since indexing raises ChecksumError. A sample
    that does not decode is raised or dropped as ``on_error`` says.
    """
    records = iter_row_records(kind, url, rows, entries, storage_options)
    yield from _samples(records, url, decode, on_error, dataset)


def iter_row_records(
    kind: str,
    url: str,
    rows: Sequence[RecordRow],
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[Record]:
    """The records of ``rows`` of a shard read from its catalog rows, by its kind (a tar's, a
    folder group's), each entry's CRC32C checked."""
    walk = iter_folder_records if kind == "files" else iter_tar_records
    return walk(url, rows, entries, storage_options)


def iter_tar_records(
    url: str,
    rows: Sequence[RecordRow],
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[Record]:
    """The records of ``rows`` (catalog rows of one tar, in file order), each entry CRC-checked.

    Rows that are close together are read in one range of at most ~8 MiB
    (whole samples); bytes between rows far apart are not read. Entries are
    views of that range. A row none of whose entries ``entries`` names (a
    read of a column group's entries only) is yielded empty, its bytes unread.

    Raises
    ------
    ChecksumError
        A payload changed since the tar was indexed.
    TruncatedError, ShardNotFoundError
        The tar is shorter than indexed, or gone.
    """
    names = None if entries is None else frozenset(entries)
    picks = [
        [k for k, e in enumerate(row.entries) if names is None or e[0] in names] for row in rows
    ]
    source = open_source(url, dict(storage_options or {}))
    try:
        i = 0
        while i < len(rows):
            if not picks[i]:
                # None of its entries asked (``entries`` naming a column group's only): its
                # record is joined to the group's, and none of its bytes are read.
                yield Record(rows[i].key, {}, -1, rows[i].offset, rows[i].length)
                i += 1
                continue
            j = i + 1
            while (
                j < len(rows)
                and picks[j]
                and rows[j].offset + rows[j].length - rows[i].offset <= _TAR_READ_BYTES
            ):
                j += 1
            lo, hi = rows[i].offset, rows[j - 1].offset + rows[j - 1].length
            (data,) = source.read_ranges([ByteRange(lo, hi)])
            view = memoryview(data)
            for row, pick in zip(rows[i:j], picks[i:j]):
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


_FOLDER_READ_FILES = 64
"""A folder group's files are read this many at a time (concurrently on object stores)."""


def iter_folder_records(
    url: str,
    rows: Sequence[RecordRow],
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> Iterator[Record]:
    """The records of ``rows`` (catalog rows of one folder group), each file's CRC32C checked.

    Raises
    ------
    ChecksumError
        A file changed since the folder was indexed.
    ShardNotFoundError, StorageError
        A file is gone, or cannot be read.
    """
    names = None if entries is None else frozenset(entries)
    folder = folder_of(url)
    opts = dict(storage_options or {})
    for i in range(0, len(rows), _FOLDER_READ_FILES):
        part = rows[i : i + _FOLDER_READ_FILES]
        picks = [
            [k for k, e in enumerate(row.entries) if names is None or e[0] in names] for row in part
        ]
        paths = [
            entry_path(folder, row.key, row.entries[k][0])
            for row, pick in zip(part, picks)
            for k in pick
        ]
        data = read_files(paths, opts)
        for row, pick in zip(part, picks):
            record = Record(row.key, {}, -1, row.offset, row.length)
            for k in pick:
                name, content_type, _ = row.entries[k]
                path = entry_path(folder, row.key, name)
                got = data[path]
                if isinstance(got, FileNotFoundError):
                    raise ShardNotFoundError(
                        f"{redact(path)}: the file of key {row.key!r} is gone; restore it, or "
                        "index the folder again (`shardcat index-files`)",
                        path=redact(path),
                    ) from got
                if isinstance(got, Exception):
                    raise StorageError(f"cannot read {redact(path)}: {got}", path=redact(path))
                spec = EntrySpec(name, content_type, Codec.NONE)
                _, size, crc = row.spans[k]
                record.entries[name] = checked_file(got, row.key, spec, size, crc, redact(path))
            yield record


def tar_rows(
    catalog: Catalog,
    shard_id: int,
    offsets: Collection[int] | None = None,
    hidden: frozenset[int] = frozenset(),
) -> list[RecordRow]:
    """The catalog rows of the records a read of one tar sees, in file order.

    ``offsets`` (a filter's choice) keeps those records only; otherwise
    every record but the ``hidden`` ones (deleted or replaced at the
    version read: the catalog keeps their rows).
    """
    rows = internal.record_rows(catalog, shard_id)
    if offsets is not None:
        chosen = frozenset(offsets)
        return [r for r in rows if r.offset in chosen]
    return [r for r in rows if r.offset not in hidden] if hidden else rows


def _read_tar_partition(
    handle: CatalogHandle,
    shard_id: int,
    url: str,
    entries: list[str] | None,
    storage_options: dict[str, Any],
    decode: bool,
    hidden: frozenset[int],
    on_error: OnError,
    dataset: str,
    kind: str = "tar",
    joins: tuple[GroupJoin, ...] = (),
) -> list[dict[str, Any]]:
    rows = tar_rows(catalog_for(handle), shard_id, hidden=hidden)
    records = iter_row_records(kind, url, rows, entries, storage_options)
    if joins:
        # The base records' offsets are their catalog rows' (a member's, a folder
        # group's virtual one): the offsets the join plan pairs group records with.
        records = join_records(records, joins, storage_options, entries)
    return list(_samples(records, url, decode, on_error, dataset))


def _read_partition(
    url: str,
    entries: list[str] | None,
    storage_options: dict[str, Any],
    decode: bool,
    expect: tuple[str, int],
    hidden: frozenset[int],
    on_error: OnError,
    dataset: str,
    joins: tuple[GroupJoin, ...] = (),
) -> list[dict[str, Any]]:
    if not joins:
        samples = iter_shard(
            url,
            entries,
            storage_options,
            decode,
            expect,
            hidden,
            on_error=on_error,
            dataset=dataset,
        )
        return list(samples)
    with open_registered(url, storage_options, expect) as r:
        records: Iterable[Record] = r.iter_records(entries)
        if hidden:
            records = (rec for rec in records if rec.offset not in hidden)
        whole = join_records(records, joins, storage_options, entries)
        return list(_samples(whole, url, decode, on_error, dataset))


def read(
    catalog: Catalog | str,
    dataset: str,
    entries: Iterable[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
    version: int | str | None = None,
    on_error: OnError = "raise",
) -> Bag:
    """The records of ``dataset`` (at a version) as a ``dask.bag.Bag`` with one partition per shard.

    Samples are whole: a dataset's column groups are joined to its base
    records as the version sees them (docs/GROUPS.md §5), and ``entries``
    reads only the groups holding one of them.

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
    on_error:
        A sample whose entries do not decode
        (:class:`~shardcat.errors.SampleDecodeError`; only with ``decode``):
        ``"raise"`` it (default; it names the dataset, key, entry and shard)
        when its partition is computed, ``"skip"`` it, or ``"log"`` a
        warning naming it and skip it. A partition then holds its shard's
        good samples. Other errors (a missing or replaced shard, an
        unreachable store or catalog) raise regardless.

    Raises
    ------
    DatasetNotFoundError
        No such dataset in the catalog.
    VersionNotFoundError
        No such kept version or tag.
    """
    import dask.bag as db
    from dask.base import tokenize
    from dask.delayed import delayed

    from ..reading import Catalog

    check_on_error(on_error)
    names = None if entries is None else list(entries)
    with Catalog.opened(catalog) as cat:
        number, shards = internal.visible_shards(cat, dataset, version)
        # Column groups (docs/GROUPS.md §5): each partition joins its samples' groups.
        joins = plan_joins(internal.group_rows(cat, dataset, number), names)
        opts = dict(cat.storage_options if storage_options is None else storage_options)
        handle = cat.handle()  # the partitions read shards only; a tar's reopens the catalog
    if joins:
        log_joins(dataset, join_summary(joins.values()))
    # Every argument that changes a partition's samples is in its key: Dask
    # reuses a result held under the same key (another read's, in one client).
    read_token = tokenize(handle.url, dataset, number, names, opts, decode, on_error)
    parts = [
        # Data indexed in place has no footer: its partition walks the shard's catalog rows.
        delayed(_read_tar_partition)(
            handle,
            s.id,
            s.url,
            names,
            opts,
            decode,
            hidden,
            on_error,
            dataset,
            s.kind,
            joins.get(s.id, ()),
            dask_key_name=_partition_key(read_token, i, s, hidden, joins.get(s.id, ())),
        )
        if shard_kind(s.kind).from_rows
        else delayed(_read_partition)(
            s.url,
            names,
            opts,
            decode,
            (s.file_id, s.footer_crc),
            hidden,
            on_error,
            dataset,
            joins.get(s.id, ()),
            dask_key_name=_partition_key(read_token, i, s, hidden, joins.get(s.id, ())),
        )
        for i, (s, hidden) in enumerate(shards)
    ]
    bag: Bag = db.from_delayed(parts) if parts else db.from_sequence([], npartitions=1)
    return bag


def _partition_key(
    read_token: str,
    i: int,
    shard: ShardRow,
    hidden: frozenset[int],
    joins: tuple[GroupJoin, ...] = (),
) -> str:
    """The Dask key of partition ``i``: equal for equal reads, another for any difference.

    ``read_token`` covers the read's options and the catalog, dataset and
    version; the shard adds its row id and content identity (a shard
    replaced at the same URL has another file id), ``hidden`` the
    records the version does not see and ``joins`` its column groups' records. No URL in the key: keys are shown
    (dashboard, logs) and a URL may hold a secret.
    """
    from dask.base import tokenize

    token = tokenize(
        read_token,
        shard.id,
        shard.url,
        shard.kind,
        shard.file_id,
        shard.footer_crc,
        hidden,
        [(j.group, j.streamed, j.keyed) for j in joins],
    )
    return f"shardcat-read-{i}-{token}"
