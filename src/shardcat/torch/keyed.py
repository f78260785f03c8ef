"""``KeyDataset``: map-style, a sample by position or by key; batches by one query."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from torch.utils.data import Dataset

from ..readers import Decoder, KeySamples
from ..reading import Catalog

__all__ = ["KeyDataset"]


class KeyDataset(Dataset[Any]):
    """Map-style: ``ds[i]`` is the sample of the ``i``-th key, ``ds.get(key)`` any sample by key.

    The key list is read from the catalog once (every committed key in key
    order, the keys a ``where`` filter chose, or ``keys``). A DataLoader
    asks for whole batches through ``__getitems__``: one query and
    coalesced, concurrent reads per batch. A catalog opened here from a URL
    is closed by :meth:`close` (or a ``with`` block, or garbage collection).

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.Catalog` or its URL.
    dataset:
        The dataset's name.
    keys:
        The keys positions refer to.
    where, params:
        A SQL filter choosing the keys instead.
    version:
        Read the dataset as of this kept version (number or tag): its keys,
        and their records at that version; default the latest.
    entries:
        Read only these entries.
    decode:
        As for :class:`ShardIterableDataset`.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    VersionNotFoundError
        If there is no such kept version or tag.
    """

    def __init__(
        self,
        catalog: Catalog | str,
        dataset: str,
        keys: Iterable[str] | None = None,
        *,
        where: str | None = None,
        params: Mapping[str, Any] | None = None,
        version: int | str | None = None,
        entries: Iterable[str] | None = None,
        decode: Decoder = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.samples = KeySamples(
            catalog,
            dataset,
            keys,
            where=where,
            params=params,
            version=version,
            entries=entries,
            decode=decode,
            storage_options=storage_options,
        )

    @property
    def keys(self) -> list[str]:
        return self.samples.keys

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        return self.samples[i]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        return self.samples.getitems(indices)

    def get(self, key: str) -> Any:
        """The sample with this key.

        Raises
        ------
        KeyNotFoundError
            If the dataset has no committed record with this key.
        """
        return self.samples.get(key)

    def close(self) -> None:
        """Close the catalog if it was opened here from a URL (idempotent)."""
        self.samples.close()

    def __enter__(self) -> KeyDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
