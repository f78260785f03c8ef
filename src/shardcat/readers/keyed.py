"""Samples by position in a fixed key list, read through the catalog's lookups.

:class:`KeySamples` is what :class:`shardcat.torch.KeyDataset` wraps: the
key list comes from the catalog in one query (all keys in key order, or the
ones a ``where`` filter chose), ``samples[i]`` is one indexed query plus one
ranged read, and :meth:`KeySamples.getitems` fetches a whole batch with
:meth:`Catalog.get_many <shardcat.Catalog.get_many>` (one query and
coalesced reads). The catalog travels to worker processes as its handle and
reconnects there, by fork or by spawn.

A position cannot be dropped from a map-style dataset: with ``on_error``
``"skip"`` or ``"log"`` a sample that does not decode is left out of a
batch (:meth:`KeySamples.getitems`), and a single lookup returns None in
its place.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from .._onerror import BAD_SAMPLE, DROPPED, Dropped, OnError, Skipped, check_on_error, drop_or_raise
from ..errors import KeyNotFoundError, SampleDecodeError
from ..format import Record
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
    on_error:
        A sample whose entries do not decode
        (:class:`~shardcat.errors.SampleDecodeError`): ``"raise"`` it
        (default, naming the dataset, key, entry and shard), ``"skip"`` it,
        or ``"log"`` a warning naming it and skip it. A skipped sample is
        left out of :meth:`getitems`' list; :meth:`get` and ``samples[i]``
        return None in its place. Missing keys, an unreachable store or a
        missing shard raise whatever ``on_error`` says.
    on_skip:
        Also told of each skipped sample (how :class:`shardcat.torch.KeyDataset`
        counts over DataLoader workers); it must pickle to reach them.

    Attributes
    ----------
    skipped:
        Samples skipped by this object in this process (a DataLoader
        worker's copy counts its own).

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
        on_error: OnError = "raise",
        on_skip: Skipped | None = None,
    ) -> None:
        if keys is not None and where is not None:
            raise ValueError("pass keys or where, not both")
        self.on_error = check_on_error(on_error)
        self.on_skip = on_skip
        self.skipped = 0
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
        """The sample of the ``i``-th key (None if it does not decode and ``on_error`` drops it)."""
        return self.get(self.keys[i])

    def get(self, key: str) -> Any:
        """The sample with this key (it need not be in the key list).

        With ``on_error`` ``"skip"`` or ``"log"``, None if it does not decode.

        Raises
        ------
        KeyNotFoundError
            If the dataset has no committed record with this key.
        SampleDecodeError
            If the sample does not decode (it names the dataset, key, entry and
            shard), with ``on_error="raise"``.
        """
        rec = self.catalog.get(self.dataset, key, self.entries, version=self.version)
        sample = self._sample(rec)
        return None if sample is DROPPED else sample

    def getitems(self, indices: Sequence[int]) -> list[Any]:
        """The samples at these positions, in order: one query, then coalesced reads.

        With ``on_error`` ``"skip"`` or ``"log"`` the samples that do not
        decode are left out: the list may be shorter than ``indices`` (even
        empty).

        Raises
        ------
        KeyNotFoundError
            If a key is no longer in the catalog (all missing keys are named).
        SampleDecodeError
            If a sample does not decode (it names the dataset, key, entry and
            shard), with ``on_error="raise"``.
        """
        keys = [self.keys[i] for i in indices]
        result = self.catalog.get_many(self.dataset, keys, self.entries, version=self.version)
        result.raise_for_missing()
        out = []
        for key, rec in zip(keys, result):
            if rec is None:  # raise_for_missing raised already; keeps the types honest
                raise KeyNotFoundError(f"key {key!r} not found in {self.dataset!r}")
            sample = self._sample(rec)
            if sample is not DROPPED:
                out.append(sample)
        return out

    def _sample(self, rec: Record) -> Any | Dropped:
        """``rec`` decoded and through ``decode``; DROPPED if it does not decode and may be dropped."""
        try:
            sample = rec.decode(writable=True)
        except BAD_SAMPLE as e:  # it names the key and shard (the record's); the dataset is ours
            return drop_or_raise(e, self.on_error, self._count, dataset=self.dataset)
        return apply_decoder(sample, self.decode)

    def _count(self, error: SampleDecodeError) -> None:
        self.skipped += 1
        if self.on_skip is not None:
            self.on_skip(error)
