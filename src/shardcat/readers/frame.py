"""A dataset's JSON and scalar entries as a Dask dataframe, one partition per shard."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..reading import Catalog
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
) -> Any:
    import pandas as pd

    rows = [flatten(rec.decode()) for rec in iter_task_records(task, storage_options, entries)]
    return pd.DataFrame(rows, columns=columns)


def to_dask_dataframe(
    catalog: Catalog | str,
    dataset: str,
    *,
    entries: Iterable[str] | None = None,
    where: str | None = None,
    params: Mapping[str, Any] | None = None,
    storage_options: Mapping[str, Any] | None = None,
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

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    import dask.dataframe as dd
    import pandas as pd

    # The catalog plans the partitions; they read shards only.
    with Catalog.opened(catalog, storage_options=storage_options, create=False) as cat:
        tasks = plan_tasks(cat, dataset, where, params)
        opts = dict(cat.storage_options if storage_options is None else storage_options)
    names = None if entries is None else tuple(entries)
    tasks = [t for t in tasks if t.count]
    if not tasks:
        empty: DataFrame = dd.from_pandas(
            pd.DataFrame({"__key__": pd.Series([], dtype=object)}), npartitions=1
        )
        return empty
    first = next(iter_task_records(tasks[0], opts, names)) if tasks[0].offsets else None
    if first is None:
        with ShardReader(tasks[0].url, storage_options=opts) as r:
            first = r.read(0, names)
    columns = list(flatten(first.decode()))
    meta = pd.DataFrame([flatten(first.decode())], columns=columns).iloc[:0]
    frame: DataFrame = dd.from_map(
        _frame,
        tasks,
        storage_options=opts,
        entries=names,
        columns=columns,
        meta=meta,
        enforce_metadata=False,
        label="shardcat-read",
    )
    return frame
