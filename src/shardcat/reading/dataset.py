"""A dataset handle: ``cat.dataset("train")``, every per-dataset call with the name bound.

As pyiceberg's ``catalog.load_table(name)``: the handle is looked up once
(an unknown name fails there) and each method delegates to the
:class:`~shardcat.reading.Catalog` that made it, so it sees every commit
made since. The dataset's row is :meth:`Dataset.info` (or ``cat.info(name)``).
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal

from ..catalog.history import Version
from ..catalog.results import (
    BatchResult,
    CatalogReport,
    DatasetInfo,
    EntryInfo,
    EntryKind,
    Location,
    ShardRow,
    VersionDiff,
    VersionInfo,
)
from ..format import Record

if TYPE_CHECKING:
    from ..catalog.results import FieldsUpdate
    from ..catalog.selection import FilterLimits, Selection
    from ..catalog.versions import ExpireResult
    from .catalog import Catalog

__all__ = ["Dataset", "DatasetStats"]

_ROW_FIELDS = frozenset(f.name for f in fields(DatasetInfo))


@dataclass(frozen=True, slots=True)
class DatasetStats:
    """What a version of a dataset holds: its row, shards, hidden records and entry kinds."""

    info: DatasetInfo
    version: int
    """The version these counts are of (the latest unless one was asked for)."""
    shards: list[ShardRow]
    """The shards that version reads."""
    hidden_records: int
    """Records in those shards the version no longer serves (replaced or deleted since)."""
    entry_kinds: list[EntryKind]

    @property
    def record_count(self) -> int:
        """Records the version serves."""
        return sum(s.record_count for s in self.shards) - self.hidden_records

    @property
    def size_bytes(self) -> int:
        """Bytes of the shards the version reads."""
        return sum(s.size_bytes for s in self.shards)


class Dataset:
    """One dataset of a catalog: reads, queries and versions without repeating its name.

    Made by :meth:`Catalog.dataset <shardcat.reading.Catalog.dataset>`; each
    method is the catalog's method of the same name for this dataset (see
    it for the parameters and errors). It holds no connection of its own:
    it is valid while its catalog is open.

    Examples
    --------
    >>> train = cat.dataset("train")  # doctest: +SKIP
    >>> train.get("img/00412345")["jpg"].data  # doctest: +SKIP
    >>> train.count(prefix="img/")  # doctest: +SKIP
    >>> train.tag(train.info().version, "v1")  # doctest: +SKIP
    """

    __slots__ = ("_catalog", "_row", "name")

    def __init__(self, catalog: Catalog, row: DatasetInfo) -> None:
        self._catalog = catalog
        self._row = row  # as loaded: only the deprecated attribute access reads it
        self.name = row.name

    @property
    def catalog(self) -> Catalog:
        """The catalog this handle reads through."""
        return self._catalog

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, catalog={self._catalog.url!r})"

    def __getattr__(self, attr: str) -> Any:
        # Catalog.dataset() returned the row before it returned a handle: its
        # fields keep working for one release, as they were when it was loaded.
        if attr in _ROW_FIELDS:
            warnings.warn(
                f"cat.dataset({self.name!r}) is a dataset handle now: read .{attr} from "
                f"its row, cat.info({self.name!r}).{attr} (or .info().{attr}); "
                "attribute access on the handle goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(self._row, attr)
        raise AttributeError(f"'Dataset' object has no attribute {attr!r}")

    # --- the row ---------------------------------------------------------

    def info(self) -> DatasetInfo:
        """The dataset's row as it is now (a query): root URL, version, properties, ..."""
        return self._catalog.info(self.name)

    # --- reads -----------------------------------------------------------

    def get(
        self, key: str, entries: Iterable[str] | None = None, *, version: Version = None
    ) -> Record:
        """The record with exactly this key (:meth:`Catalog.get`)."""
        return self._catalog.get(self.name, key, entries, version=version)

    def get_many(
        self,
        keys: Iterable[str],
        entries: Iterable[str] | None = None,
        *,
        version: Version = None,
    ) -> BatchResult:
        """Records for many keys, in input order (:meth:`Catalog.get_many`)."""
        return self._catalog.get_many(self.name, keys, entries, version=version)

    def describe(self, key: str, *, version: Version = None) -> list[EntryInfo]:
        """The record's entries from its catalog row, no read (:meth:`Catalog.describe`)."""
        return self._catalog.describe(self.name, key, version=version)

    def locate(self, key: str, *, version: Version = None) -> Location:
        """Where the record is: shard URL, offset and length (:meth:`Catalog.locate`)."""
        return self._catalog.locate(self.name, key, version=version)

    def keys(
        self,
        *,
        prefix: str | None = None,
        limit: int | None = None,
        after: str | None = None,
        version: Version = None,
    ) -> Iterator[str]:
        """The committed keys in byte order, streamed (:meth:`Catalog.keys`)."""
        return self._catalog.keys(
            self.name, prefix=prefix, limit=limit, after=after, version=version
        )

    def count(self, *, prefix: str | None = None) -> int:
        """How many committed keys (starting with ``prefix``) (:meth:`Catalog.count`)."""
        return self._catalog.count(self.name, prefix=prefix)

    def select(
        self,
        where: str,
        params: Mapping[str, Any] | None = None,
        *,
        version: Version = None,
        limits: FilterLimits | None = None,
    ) -> Selection:
        """The records for which the SQL filter ``where`` holds (:meth:`Catalog.select`)."""
        return self._catalog.select(self.name, where, params, version=version, limits=limits)

    where = select

    def shards(self, state: str | None = "committed", *, version: Version = None) -> list[ShardRow]:
        """The dataset's shards in one state (:meth:`Catalog.shards`), or those ``version`` reads.

        Raises
        ------
        ValueError
            ``version`` with a state other than ``"committed"``.
        VersionNotFoundError
            If there is no such kept version or tag.
        """
        if version is None:
            return self._catalog.shards(self.name, state)
        if state != "committed":
            raise ValueError("a version reads committed shards only: pass state='committed'")
        from ..catalog import internal

        return [row for row, _ in internal.visible_shards(self._catalog, self.name, version)[1]]

    def entry_kinds(self, *, version: Version = None) -> list[EntryKind]:
        """The kinds of entry and the records holding each (:meth:`Catalog.entry_kinds`)."""
        return self._catalog.entry_kinds(self.name, version=version)

    def fields(self) -> dict[str, str]:
        """The declared fields: name -> kind (:meth:`Catalog.fields`)."""
        return self._catalog.fields(self.name)

    def stats(self, *, version: Version = None) -> DatasetStats:
        """What a version holds (default the latest): shards, hidden records, entry kinds.

        What ``shardcat dataset stats`` prints; one query each for the row,
        the shards and the entry kinds, no shard read.
        """
        from ..catalog import internal

        info = self._catalog.info(self.name)
        number, visible = internal.visible_shards(self._catalog, self.name, version)
        return DatasetStats(
            info=info,
            version=number,
            shards=[s for s, _ in visible],
            hidden_records=sum(len(offsets) for _, offsets in visible),
            entry_kinds=self._catalog.entry_kinds(self.name, version=version),
        )

    def verify(
        self,
        *,
        workers: int = 4,
        on_shard: Callable[[str, int], None] | None = None,
        version: Version = None,
        quick: bool = False,
    ) -> CatalogReport:
        """Check every shard against the catalog, and every CRC (:meth:`Catalog.verify`;
        ``quick``: each shard's ends and its rows' count, no record read)."""
        return self._catalog.verify(
            self.name, workers=workers, on_shard=on_shard, version=version, quick=quick
        )

    # --- versions --------------------------------------------------------

    def log(self) -> list[VersionInfo]:
        """The kept versions, newest first (:meth:`Catalog.log`)."""
        return self._catalog.log(self.name)

    def tag(self, version: int | str, name: str, *, move: bool = False) -> int:
        """Name a kept version (:meth:`Catalog.tag`); returns its number."""
        return self._catalog.tag(self.name, version, name, move=move)

    def untag(self, name: str) -> int:
        """Remove a tag (:meth:`Catalog.untag`); returns the version it named."""
        return self._catalog.untag(self.name, name)

    def diff(self, old: int | str, new: int | str, *, keys: bool = False) -> VersionDiff:
        """Keys added, removed and replaced from ``old`` to ``new`` (:meth:`Catalog.diff`)."""
        return self._catalog.diff(self.name, old, new, keys=keys)

    def delete_keys(
        self, keys: Iterable[str], *, missing_ok: bool = False, message: str | None = None
    ) -> int:
        """A new version without these keys (:meth:`Catalog.delete_keys`); returns its number."""
        return self._catalog.delete_keys(self.name, keys, missing_ok=missing_ok, message=message)

    def update_fields(
        self,
        values: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]],
        *,
        message: str | None = None,
        on_missing: Literal["error", "skip"] = "error",
    ) -> FieldsUpdate:
        """A new version with these declared fields' values (:meth:`Catalog.update_fields`)."""
        return self._catalog.update_fields(
            self.name, values, message=message, on_missing=on_missing
        )

    def expire(
        self,
        *,
        keep_last: int,
        older_than: dt.timedelta | None = None,
        dry_run: bool = False,
    ) -> ExpireResult:
        """Drop old untagged versions (:meth:`Catalog.expire`)."""
        return self._catalog.expire(
            self.name, keep_last=keep_last, older_than=older_than, dry_run=dry_run
        )
