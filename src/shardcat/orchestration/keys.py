"""``shardcat.delete_keys``: a new dataset version without some keys, no shard rewritten."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..reading import Catalog

__all__ = ["delete_keys"]


def delete_keys(
    catalog: Catalog | str,
    dataset: str,
    keys: Iterable[str],
    *,
    missing_ok: bool = False,
    message: str | None = None,
) -> int:
    """Remove these keys from the dataset in a new version; returns its number.

    No shard is rewritten: the records stay in their shards, and older
    versions (``version=`` on lookups and reads) still resolve them until
    those versions expire (``Catalog.expire``) and ``gc`` reclaims shards no
    kept version references.

    Parameters
    ----------
    catalog:
        A :class:`shardcat.Catalog` or its SQLAlchemy URL.
    dataset:
        The dataset's name.
    keys:
        The keys to remove.
    missing_ok:
        Ignore keys that have no live record (otherwise nothing changes and
        KeyNotFoundError names them).
    message:
        Recorded with the new version (``shardcat log``).

    Raises
    ------
    KeyNotFoundError
        A key has no live record and ``missing_ok`` is false.
    DatasetNotFoundError
        No such dataset.

    Examples
    --------
    >>> shardcat.delete_keys("sqlite:///shardcat.db", "train", ["img/0001"])  # doctest: +SKIP
    3
    """
    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        return cat.delete_keys(dataset, keys, missing_ok=missing_ok, message=message)
