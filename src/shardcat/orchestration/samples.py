"""Turning user data into samples: dicts with a ``__key__`` and named entries."""

from __future__ import annotations

import datetime as dt
import decimal
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from ..errors import InvalidKeyError
from ..format.entries import KEY

__all__ = ["KEY", "as_sample", "batched", "check_frame", "is_pandas_frame", "rows_to_samples"]


def as_sample(sample: Any) -> Mapping[str, Any]:
    """The sample, if it is a mapping; its ``__key__`` is the writer's to check.

    ``RollingShardWriter.write`` applies the one ``__key__`` rule
    (:func:`shardcat.format.entries.sample_key`) as it adds the sample.

    Raises
    ------
    TypeError
        If the sample is not a mapping.
    """
    if not isinstance(sample, Mapping):
        raise TypeError(
            f"samples are dicts like {{'__key__': 'img/001', 'jpg': b'...'}}, got a {type(sample).__name__}"
        )
    return sample


def is_pandas_frame(data: Any) -> bool:
    """Whether ``data`` is a pandas DataFrame (pandas is imported only if it already is)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(data, pd.DataFrame)


def check_frame(frame: Any, key_column: str, json_entry: str) -> None:
    """Refuse a dataframe whose rows cannot become samples (checked on the client, up front).

    Raises
    ------
    InvalidKeyError
        The key column is missing.
    ValueError
        A column has the name of the JSON entry.
    """
    columns = [str(c) for c in frame.columns]
    if key_column not in columns:
        raise InvalidKeyError(
            f"the dataframe has no key column {key_column!r}; its columns are {columns[:12]}: "
            "pass key_column='...'"
        )
    if json_entry in columns:
        raise ValueError(
            f"the dataframe has a column {json_entry!r}, the entry that holds each row's scalar "
            "columns: rename the column or pass json_entry='...'"
        )


def rows_to_samples(
    frame: Any, key_column: str, json_entry: str = "json"
) -> Iterator[dict[str, Any]]:
    """Samples from a pandas DataFrame, one per row.

    ``key_column`` is the key; bytes and array values are entries of their
    own (named by their column); every other value (numbers, strings,
    booleans, timestamps, lists, dicts) goes into ONE JSON entry
    ``json_entry`` (one entry per scalar column would cost a frame and an
    index row each). Missing values (None, NaN, NaT) are left out.
    """
    check_frame(frame, key_column, json_entry)
    columns = [str(c) for c in frame.columns]
    for row in frame.itertuples(index=False, name=None):
        sample: dict[str, Any] = {}
        scalars: dict[str, Any] = {}
        for c, v in zip(columns, row):
            if c == key_column:
                sample[KEY] = str(v)
            elif isinstance(v, (bytes, bytearray, memoryview)) or (
                isinstance(v, np.ndarray) and v.ndim > 0
            ):
                sample[c] = v
            elif not _missing(v):
                scalars[c] = _json_value(v)
        if scalars:
            sample[json_entry] = scalars
        yield sample


def _missing(v: Any) -> bool:
    if v is None:
        return True
    pd = sys.modules.get("pandas")
    if pd is not None and pd.api.types.is_scalar(v):
        return bool(pd.isna(v))
    return isinstance(v, float) and v != v


def _json_value(v: Any) -> Any:
    """A value JSON can hold: numpy scalars as Python ones, times as ISO 8601 text."""
    if isinstance(v, np.ndarray):  # a 0-d array
        return v.item()
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, (dt.timedelta, decimal.Decimal)) or type(v).__name__ == "Timedelta":
        return str(v)
    return v


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
