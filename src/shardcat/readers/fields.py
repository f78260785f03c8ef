"""Filling declared fields from a JSON entry of every record, for shards of every kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..orchestration.fields import store_shard_fields
from ..reading import Catalog

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

    Reads only that entry of every committed shard (those only older kept
    versions read too), in shard order (a
    native shard in one sequential read; a tar indexed in place, only that
    member of each sample, CRC-checked), and stores each shard's values in
    its own transaction (running it again replaces them). Afterwards ``where="label = 3"`` works in
    :meth:`Catalog.select <shardcat.Catalog.select>`, the torch
    datasets and :func:`~shardcat.readers.to_dask_dataframe`. A record
    whose entry is missing, lacks a field or is not a JSON object has NULL there.
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
        return sum(
            store_shard_fields(cat, dataset, shard, tuple(fields), entry, opts)
            # Every committed shard a kept version reads: older versions filter on them too.
            for shard in cat.shards(dataset, state=None)
            if shard.state == "committed"
        )
