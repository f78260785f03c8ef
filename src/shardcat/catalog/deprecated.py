"""The catalog methods that went internal, kept working for one release with a DeprecationWarning.

shardcat's own layers call :mod:`shardcat.catalog.internal` instead; next
release this module and the base class it gives :class:`~.catalog.SqlCatalog`
go.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, cast

from .._lazy import lazy_module
from .history import Version
from .results import RecordRow, ShardRow

if TYPE_CHECKING:
    from . import internal as _internal
    from .catalog import SqlCatalog
else:
    _internal = lazy_module("shardcat.catalog.internal")

__all__ = ["DeprecatedMethods"]


def _deprecated(name: str) -> None:
    warnings.warn(
        f"Catalog.{name}() is internal now and goes in the next release; shardcat's own "
        f"layers call shardcat.catalog.internal.{name}(catalog, ...)",
        DeprecationWarning,
        stacklevel=3,
    )


def _sql(mixin: DeprecatedMethods) -> SqlCatalog:
    return cast("SqlCatalog", mixin)  # the only class this one is a base of


class DeprecatedMethods:
    """:class:`~.catalog.SqlCatalog`'s methods that moved to :mod:`shardcat.catalog.internal`."""

    def copy_fields(
        self, dataset: str, shard_id: int, moves: Iterable[tuple[int, int, int]]
    ) -> int:
        """Deprecated: shardcat's own layers call :func:`shardcat.catalog.internal.copy_fields`."""
        _deprecated("copy_fields")
        return _internal.copy_fields(_sql(self), dataset, shard_id, moves)

    def set_dataset_root(self, name: str, root_url: str) -> None:
        """Deprecated: shardcat's own layers call :func:`shardcat.catalog.internal.set_dataset_root`."""
        _deprecated("set_dataset_root")
        return _internal.set_dataset_root(_sql(self), name, root_url)

    def move_shards(
        self,
        dataset: str,
        moves: Mapping[str, tuple[str, str]],
        *,
        expected_version: int,
        root_url: str,
    ) -> int:
        """Deprecated: shardcat's own layers call :func:`shardcat.catalog.internal.move_shards`."""
        _deprecated("move_shards")
        return _internal.move_shards(
            _sql(self), dataset, moves, expected_version=expected_version, root_url=root_url
        )

    def record_rows(self, shard_id: int) -> list[RecordRow]:
        """Deprecated: shardcat's own layers call :func:`shardcat.catalog.internal.record_rows`."""
        _deprecated("record_rows")
        return _internal.record_rows(_sql(self), shard_id)

    def visible_shards(
        self, dataset: str, version: Version = None
    ) -> tuple[int, list[tuple[ShardRow, frozenset[int]]]]:
        """Deprecated: shardcat's own layers call :func:`shardcat.catalog.internal.visible_shards`."""
        _deprecated("visible_shards")
        return _internal.visible_shards(_sql(self), dataset, version)

    def purge_shards(self, dataset: str, urls: Iterable[str]) -> int:
        """Deprecated: shardcat's own layers call :func:`shardcat.catalog.internal.purge_shards`."""
        _deprecated("purge_shards")
        return _internal.purge_shards(_sql(self), dataset, urls)
