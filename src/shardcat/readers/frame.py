"""A dataset's JSON and scalar entries as a Dask dataframe, one partition per shard."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import closing
from typing import TYPE_CHECKING, Any

from .._onerror import BAD_SAMPLE, OnError, check_on_error, drop_or_raise
from ..catalog.kinds import shard_kind
from ..reading import Catalog, CatalogHandle
from ..storage import redact
from ..storage.shards import ShardReader
from .plan import ShardTask
from .stream import iter_task_records, plan_tasks

if TYPE_CHECKING:
    from dask.dataframe import DataFrame

__all__ = ["flatten", "to_dask_dataframe"]

_SCALARS = (str, int, float, bool, type(None))


def flatten(sample: Mapping[str, Any]) -> dict[str, Any]:
    """One dataframe row: scalars as they are, each JSON object's scalar fields as ``entry.field``.

    Bytes, arrays and lists are left out (they are not columns).
    """
    row: dict[str, Any] = {}
    for name, value in sample.items():
        if isinstance(value, _SCALARS):
            row[name] = value
        elif isinstance(value, dict):
            for field, v in value.items():
                if isinstance(v, _SCALARS):
                    row[f"{name}.{field}"] = v
    return row


def _frame(
    task: ShardTask,
    storage_options: dict[str, Any],
    entries: tuple[str, ...] | None,
    columns: list[str],
    on_error: OnError = "raise",
    dataset: str | None = None,
    catalog: CatalogHandle | None = None,
) -> Any:
    """One partition: a row per record of ``task`` that decodes (the others raise or are dropped).

    ``catalog`` is needed for a tar task (its records are the catalog's rows).
    """
    import pandas as pd

    rows = []
    for rec in iter_task_records(task, storage_options, entries, catalog=catalog):
        try:
            sample = rec.decode()
        except BAD_SAMPLE as e:
            drop_or_raise(e, on_error, dataset=dataset, path=redact(task.url))
            continue
        rows.append(flatten(sample))
    return pd.DataFrame(rows, columns=columns)


def _first_row(
    tasks: list[ShardTask],
    storage_options: dict[str, Any],
    entries: tuple[str, ...] | None,
    on_error: OnError,
    dataset: str,
    catalog: CatalogHandle,
) -> dict[str, Any]:
    """The row of the first record, read now (it names the columns); of the first that decodes if
    ``on_error`` drops bad samples (the partition that holds them warns and counts, not this)."""
    task = tasks[0]
    if task.offsets is None and not task.joins and not shard_kind(task.kind).from_rows:
        # One ranged read of record 0 rather than the first buffer of a stream.
        with ShardReader(task.url, storage_options=storage_options) as r:
            first = r.read(0, entries)
    else:
        with closing(iter_task_records(task, storage_options, entries, catalog=catalog)) as recs:
            first = next(recs)
    try:
        return flatten(first.decode())
    except BAD_SAMPLE as e:
        if on_error == "raise":
            drop_or_raise(e, on_error, dataset=dataset, path=redact(task.url))
    for task in tasks:
        with closing(iter_task_records(task, storage_options, entries, catalog=catalog)) as recs:
            for rec in recs:
                try:
                    return flatten(rec.decode())
                except BAD_SAMPLE:
                    continue
    return {"__key__": ""}  # no record decodes: every partition is empty


def to_dask_dataframe(
    catalog: Catalog | str,
    dataset: str,
    *,
    entries: Iterable[str] | None = None,
    where: str | None = None,
    params: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    on_error: OnError = "raise",
) -> DataFrame:
    """The dataset as a ``dask.dataframe.DataFrame``: one row per record, one partition per shard.

    Columns: ``__key__``, each scalar entry (text, a JSON number or string),
    and each scalar field of a JSON object entry as ``entry.field``. The
    columns are those of the first record (read now); a shard whose
    records lack one has missing values there.

    Parameters
    ----------
    entries:
        Read only these entries.
    where, params:
        A SQL filter choosing the records (see :meth:`Catalog.select
        <shardcat.Catalog.select>`).
    on_error:
        A record whose entries do not decode
        (:class:`~shardcat.errors.SampleDecodeError`): ``"raise"`` it
        (default; it names the dataset, key, entry and shard) when its
        partition is computed, ``"skip"`` it, or ``"log"`` a warning naming
        it and skip it. A partition's rows are then its good records. Other
        errors (a missing shard, an unreachable store) raise regardless.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    SampleDecodeError
        If the first record (read now for the columns) does not decode, with
        ``on_error="raise"``.
    """
    import dask.dataframe as dd
    import pandas as pd

    check_on_error(on_error)
    # The catalog plans the partitions; they read shards only.
    names = None if entries is None else tuple(entries)
    with Catalog.opened(catalog, storage_options=storage_options, create=False) as cat:
        tasks = plan_tasks(cat, dataset, where, params, entries=names)
        opts = dict(cat.storage_options if storage_options is None else storage_options)
        handle = cat.handle()  # a tar's partition reads its records' rows from the catalog
    tasks = [t for t in tasks if t.count]
    if not tasks:
        empty: DataFrame = dd.from_pandas(
            pd.DataFrame({"__key__": pd.Series([], dtype=object)}), npartitions=1
        )
        return empty
    row = _first_row(tasks, opts, names, on_error, dataset, handle)
    columns = list(row)
    meta = pd.DataFrame([row], columns=columns).iloc[:0]
    # The partitions' keys are a tokenize of _frame and every argument below
    # (each task holds its shard's URL, file id and CRC, hidden records and
    # filter): two reads that differ in anything never share a key, and the
    # same read builds the same keys.
    frame: DataFrame = dd.from_map(
        _frame,
        tasks,
        storage_options=opts,
        entries=names,
        columns=columns,
        on_error=on_error,
        dataset=dataset,
        catalog=handle,
        meta=meta,
        enforce_metadata=False,
        label="shardcat-read",
    )
    return frame
