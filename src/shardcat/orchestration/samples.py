"""Turning user data into samples: dicts with a ``__key__`` and named entries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import InvalidKeyError
from ..format.entries import KEY

__all__ = ["KEY", "as_sample", "rows_to_samples"]


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


def rows_to_samples(frame: Any, key_column: str) -> Iterator[dict[str, Any]]:
    """Samples from a pandas DataFrame: ``key_column`` is the key, other columns are entries.

    Missing values (None/NaN) leave the entry out of that sample.
    """
    import pandas as pd

    if key_column not in frame.columns:
        raise InvalidKeyError(
            f"the dataframe has no key column {key_column!r}; its columns are {list(frame.columns)[:12]}"
        )
    columns = [c for c in frame.columns if c != key_column]
    for row in frame.itertuples(index=False, name=None):
        values = dict(zip(frame.columns, row))
        sample: dict[str, Any] = {KEY: str(values[key_column])}
        for c in columns:
            v = values[c]
            if v is None or (isinstance(v, float) and pd.isna(v)):
                continue
            sample[str(c)] = v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else v
        yield sample


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
