"""``shardcat.read``: a dataset as a Dask bag, one partition per shard, streamed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import ChecksumError
from ..storage import redact
from ..storage.shards import ShardReader

__all__ = ["iter_shard", "open_registered", "read"]


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
    if expect is not None and (r.info.file_id, r.info.footer_crc) != expect:
        r.close()
        raise ChecksumError(
            f"the shard is not the one registered (file id {r.info.file_id}, footer CRC32C "
            f"{r.info.footer_crc:#010x}; registered {expect[0]}, {expect[1]:#010x}): it was "
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
) -> Iterator[dict[str, Any]]:
    """Every sample of one shard in file order: ``{"__key__": ..., name: value, ...}``.

    With ``decode`` values are decoded by content type (JSON → dict, npy →
    array, text → str); otherwise entries are :class:`~shardcat.Entry` objects.
    ``expect`` is the ``(file_id, footer_crc)`` the catalog registered: a
    shard replaced since (even by a valid one) raises ChecksumError instead
    of streaming other records.
    """
    with open_registered(url, storage_options, expect) as r:
        for rec in r.iter_records(entries):
            if decode:
                yield rec.decode()
            else:
                yield {"__key__": rec.key, **rec.entries}


def _read_partition(
    url: str,
    entries: list[str] | None,
    storage_options: dict[str, Any],
    decode: bool,
    expect: tuple[str, int],
) -> list[dict[str, Any]]:
    return list(iter_shard(url, entries, storage_options, decode, expect))


def read(
    catalog: Any,
    dataset: str,
    entries: Iterable[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
) -> Any:
    """The committed records of ``dataset`` as a ``dask.bag.Bag`` with one partition per shard.

    Parameters
    ----------
    catalog:
        A :class:`shardcat.catalog.Catalog` or its URL.
    entries:
        Read only these entries of each record.
    storage_options:
        fsspec options for the workers (default: the catalog's own ``storage_options``).
    decode:
        Decode values by content type (default) or return raw entries.

    Raises
    ------
    DatasetNotFoundError
        No such dataset in the catalog.
    """
    import dask.bag as db
    from dask.delayed import delayed

    from ..catalog import Catalog

    cat = catalog if isinstance(catalog, Catalog) else Catalog(str(catalog))
    shards = cat.shards(dataset, state="committed")
    names = None if entries is None else list(entries)
    opts = dict(cat.storage_options if storage_options is None else storage_options)
    parts = [
        delayed(_read_partition)(
            s.url,
            names,
            opts,
            decode,
            (s.file_id, s.footer_crc),
            dask_key_name=f"shardcat-read-{i}-{s.url}",
        )
        for i, s in enumerate(shards)
    ]
    if not parts:
        return db.from_sequence([], npartitions=1)
    return db.from_delayed(parts)
