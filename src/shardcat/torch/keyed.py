"""``KeyDataset``: map-style, a sample by position or by key; batches by one query.

A map-style dataset cannot drop a position: with ``on_error="skip"`` (or
``"log"``) a batch (``__getitems__``, what a batching ``DataLoader`` calls)
comes without its bad samples, and ``ds[i]`` is None for one;
:func:`collate_good` collates what is left of a batch either way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from torch.utils.data import Dataset, default_collate

from ..readers import Decoder, KeySamples, OnError
from ..reading import Catalog
from ._skips import SkipCounts

__all__ = ["KeyDataset", "collate_good"]


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
    on_error:
        A sample whose entries do not decode (an empty or broken ``.json``,
        a bad ``.npy``): ``"raise"`` (default) raises
        :class:`~shardcat.errors.SampleDecodeError` naming the dataset,
        key, entry and shard; ``"skip"`` leaves it out; ``"log"`` leaves it
        out with a warning naming it. Left out means: a batch
        (``__getitems__``) is returned without it, so it may be short or
        empty; ``ds[i]`` and :meth:`get` return None. Use
        ``collate_fn=collate_good`` (it drops Nones, and makes an empty
        batch None) and skip None batches in the loop. Dropped samples are
        counted in :attr:`skipped`, over every DataLoader worker. Errors
        that are not the sample's (a missing key or shard, an unreachable
        store or catalog) raise whatever ``on_error`` says.

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
        on_error: OnError = "raise",
    ) -> None:
        # Shared with DataLoader workers (fork or spawn): their drops count here.
        self._skips = SkipCounts()
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
            on_error=on_error,
            on_skip=self._skips,
        )

    @property
    def keys(self) -> list[str]:
        return self.samples.keys

    @property
    def skipped(self) -> int:
        """Samples dropped because they did not decode (``on_error``), by every worker, since made."""
        return self._skips.total

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        """The sample of the ``i``-th key; None if it does not decode and ``on_error`` drops it."""
        return self.samples[i]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """The samples at ``indices`` (one query), without those ``on_error`` dropped."""
        return self.samples.getitems(indices)

    def get(self, key: str) -> Any:
        """The sample with this key; None if it does not decode and ``on_error`` drops it.

        Raises
        ------
        KeyNotFoundError
            If the dataset has no committed record with this key.
        SampleDecodeError
            If it does not decode, with ``on_error="raise"``.
        """
        return self.samples.get(key)

    def close(self) -> None:
        """Close the catalog if it was opened here from a URL (idempotent)."""
        self.samples.close()

    def __enter__(self) -> KeyDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collate_good(
    batch: Sequence[Any], collate: Callable[[list[Any]], Any] = default_collate
) -> Any:
    """``collate`` of the samples of ``batch`` that are not None; None if none is left.

    The ``collate_fn`` of a batching ``DataLoader`` over a :class:`KeyDataset`
    with ``on_error="skip"`` or ``"log"``: a batch may lose samples (even all
    of them), and a wrapper without ``__getitems__`` (``ConcatDataset``)
    collects ``ds[i]``, None for a dropped sample. Loop with ``if batch is
    None: continue``. For another ``collate``, pass
    ``functools.partial(collate_good, collate=...)``. (With
    ``batch_size=None`` the loop gets each ``ds[i]``, None when dropped.)
    """
    good = [s for s in batch if s is not None]
    return collate(good) if good else None
