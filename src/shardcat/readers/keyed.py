"""Samples by position in a fixed key list, read through the catalog's lookups.

:class:`KeySamples` is what :class:`shardcat.torch.KeyDataset` wraps: the
key list comes from the catalog in one query (all keys in key order, or the
ones a ``where`` filter chose), ``samples[i]`` is one indexed query plus one
ranged read, and :meth:`KeySamples.getitems` fetches a whole batch with
:meth:`Catalog.get_many <shardcat.Catalog.get_many>` (one query and
coalesced reads). The catalog travels to worker processes as its handle and
reconnects there, by fork or by spawn.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from ..errors import KeyNotFoundError, SampleDecodeError
from ..reading import Catalog
from .stream import Decoder, apply_decoder

__all__ = ["KeySamples"]


class KeySamples:
    """Map-style access to a dataset's samples, by position in a fixed key list.

    A catalog opened here from a URL is closed by :meth:`close` (or leaving
    a ``with`` block, or when the object is garbage collected); a
    :class:`~shardcat.Catalog` passed in is left open.

    Parameters
    ----------
    catalog:
        A :class:`~shardcat.Catalog` or its URL.
    dataset:
        The dataset's name.
    keys:
        The keys, in the order positions refer to (default: every committed
        key in key order, or with ``where`` the chosen ones).
    where, params:
        A SQL filter choosing the keys (see :meth:`Catalog.select
        <shardcat.Catalog.select>`).
    version:
        A kept version (number or tag): its keys, and every lookup reads
        the records it sees (default: the latest).
    entries:
        Read only these entries.
    decode:
        Applied to each sample (see :data:`shardcat.readers.Decoder`).

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    VersionNotFoundError
        If there is no such kept version or tag.
    CatalogError
        If ``where`` is refused.
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
        if keys is not None and where is not None:
            raise ValueError("pass keys or where, not both")
        opened = contextlib.ExitStack()
        self.catalog = opened.enter_context(
            Catalog.opened(catalog, storage_options=storage_options, create=False)
        )
        # Not at exit: a daemon thread may still be looking up then.
        self._close = weakref.finalize(self, opened.close)
        self._close.atexit = False
        self.dataset = dataset
        self.version = version
        try:
            if keys is not None:
                self.keys = list(keys)
            elif where is not None or version is not None:
                # Code point order is UTF-8 byte order: the order of Catalog.keys.
                chosen = self.catalog.select(dataset, where or "1 = 1", params, version=version)
                self.keys = sorted(k for ks in chosen.keys.values() for k in ks)
            else:
                self.keys = list(self.catalog.keys(dataset))
        except BaseException:
            self.close()
            raise
        self.entries = None if entries is None else tuple(entries)
        self.decode = decode

    def close(self) -> None:
        """Close the catalog if it was opened here from a URL (idempotent)."""
        self._close()

    def __enter__(self) -> KeySamples:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_close"]  # a finalizer does not pickle
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # The catalog was reopened from its handle for this copy: the copy's to close.
        self._close = weakref.finalize(self, self.catalog.close)
        self._close.atexit = False

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> Any:
        return self.get(self.keys[i])

    def get(self, key: str) -> Any:
        """The sample with this key (it need not be in the key list).

        Raises
        ------
        KeyNotFoundError
            If the dataset has no committed record with this key.
        SampleDecodeError
            If the sample does not decode (it names the dataset, key, entry and shard).
        """
        rec = self.catalog.get(self.dataset, key, self.entries, version=self.version)
        return apply_decoder(rec.decode(writable=True), self.decode)

    def getitems(self, indices: Sequence[int]) -> list[Any]:
        """The samples at these positions, in order: one query, then coalesced reads.

        Raises
        ------
        KeyNotFoundError
            If a key is no longer in the catalog (all missing keys are named).
        SampleDecodeError
            If a sample does not decode (it names the dataset, key, entry and shard).
        """
        keys = [self.keys[i] for i in indices]
        result = self.catalog.get_many(self.dataset, keys, self.entries, version=self.version)
        result.raise_for_missing()
        out = []
        try:
            for key, rec in zip(keys, result):
                if rec is None:  # raise_for_missing raised already; keeps the types honest
                    raise KeyNotFoundError(f"key {key!r} not found in {self.dataset!r}")
                out.append(apply_decoder(rec.decode(writable=True), self.decode))
        except SampleDecodeError as e:  # it names the key and shard; the dataset is ours
            e.locate(dataset=self.dataset)
            raise
        return out
