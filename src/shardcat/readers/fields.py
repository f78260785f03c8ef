"""Filling declared fields from a JSON entry of every record: one sequential read per shard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..reading import Catalog
from .plan import ShardTask
from .stream import iter_task_records

__all__ = ["index_fields"]


def index_fields(
    catalog: Catalog | str,
    dataset: str,
    fields: Mapping[str, type],
    *,
    entry: str = "json",
    storage_options: Mapping[str, Any] | None = None,
) -> int:
    """Declare ``fields`` and store their values, taken from each record's JSON ``entry``.

    Reads only that entry of every committed shard, in shard order, and
    stores each shard's values in its own transaction (running it again
    replaces them). Afterwards ``where="label = 3"`` works in
    :meth:`Catalog.select <shardcat.Catalog.select>`, the torch
    datasets and :func:`~shardcat.readers.to_dask_dataframe`. A record
    whose entry lacks a field (or is not a JSON object) has NULL there.
    Returns the number of values stored.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    CatalogError
        A field name is not allowed, or a value does not fit its declared type.
    ChecksumError, ShardNotFoundError, FormatError
        A shard cannot be read as registered.
    """
    with Catalog.opened(catalog, storage_options=storage_options, create=False) as cat:
        cat.declare_fields(dataset, fields)
        opts = dict(cat.storage_options if storage_options is None else storage_options)
        stored = 0
        for shard in cat.shards(dataset, state="committed"):
            task = ShardTask(shard.url, shard.record_count, (shard.file_id, shard.footer_crc))
            values = []
            for rec in iter_task_records(task, opts, (entry,)):
                if entry not in rec:
                    continue
                obj = rec[entry].decode()
                if isinstance(obj, dict):
                    values.append((rec.offset, {n: obj[n] for n in fields if n in obj}))
            stored += cat.store_fields(dataset, shard.id, values)
        return stored
