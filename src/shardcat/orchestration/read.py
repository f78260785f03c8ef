"""``shardcat.read``: a dataset as a Dask bag, one partition per shard, streamed."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..shards import ShardReader

__all__ = ["iter_shard", "read"]


def iter_shard(
    url: str,
    entries: Iterable[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    decode: bool = True,
) -> Iterator[dict[str, Any]]:
    """Every sample of one shard in file order: ``{"__key__": ..., name: value, ...}``.

    With ``decode`` values are decoded by content type (JSON → dict, npy →
    array, text → str); otherwise entries are :class:`~shardcat.Entry` objects.
    """
    with ShardReader(url, storage_options=dict(storage_options or {})) as r:
        for rec in r.iter_records(entries):
            if decode:
                yield rec.decode()
            else:
                yield {"__key__": rec.key, **rec.entries}


def _read_partition(
    url: str, entries: list[str] | None, storage_options: dict[str, Any], decode: bool
) -> list[dict[str, Any]]:
    return list(iter_shard(url, entries, storage_options, decode))


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
        fsspec options for the workers.
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
    urls = [s.url for s in cat.shards(dataset, state="committed")]
    names = None if entries is None else list(entries)
    opts = dict(storage_options or {})
    parts = [
        delayed(_read_partition)(url, names, opts, decode, dask_key_name=f"shardcat-read-{i}-{url}")
        for i, url in enumerate(urls)
    ]
    if not parts:
        return db.from_sequence([], npartitions=1)
    return db.from_delayed(parts)
