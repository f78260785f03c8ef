"""``shardcat.update_fields``: a new dataset version with new values of declared fields."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ..catalog.results import FieldsUpdate
    from ..reading import Catalog

__all__ = ["update_fields"]


def update_fields(
    catalog: Catalog | str,
    dataset: str,
    values: Mapping[str, Mapping[str, Any]] | Iterable[tuple[str, Mapping[str, Any]]],
    *,
    message: str | None = None,
    on_missing: Literal["error", "skip"] = "error",
    declare: Mapping[str, type] | None = None,
) -> FieldsUpdate:
    """Set declared fields' values of some samples in a new version; no shard is written.

    Small scalar labels that change often (a quality score, a split) are
    updated here, and ``where=`` filters on them at once. Older versions keep
    the values they had: ``select(where=..., version=V)`` reads them as of V
    (until V expires).

    Parameters
    ----------
    catalog:
        A :class:`shardcat.Catalog` or its SQLAlchemy URL.
    dataset:
        The dataset's name.
    values:
        Key → {field: value}, or ``(key, {field: value})`` pairs. Each field
        must be declared (``Catalog.declare_fields``); ``None`` unsets a value.
    message:
        Recorded with the new version (``shardcat log``).
    on_missing:
        A key without a live record: ``"error"`` (KeyNotFoundError naming
        some, nothing changes) or ``"skip"`` (counted in ``skipped``).
    declare:
        Fields to declare first (name → int, float, bool or str), in the
        same transaction: an update refused declares nothing.

    Returns
    -------
    FieldsUpdate
        The new version, and the keys, values set, values unset and keys skipped.

    Raises
    ------
    CatalogError
        A field that is not declared, or a value of the wrong kind.
    UnknownKeysError
        A key has no live record and ``on_missing`` is ``"error"`` (a
        :class:`KeyNotFoundError`; ``.keys`` names at most 1,000 of them).
    KeyTextUnavailableError
        The dataset keeps only key hashes (``keys="hash"``).
    DatasetNotFoundError
        No such dataset.

    Examples
    --------
    >>> shardcat.update_fields(url, "train", {"img/0001": {"quality": 0.9}})  # doctest: +SKIP
    FieldsUpdate(dataset='train', version=4, keys=1, values=1, unset=0, skipped=0, fields=('quality',))
    """
    from ..reading import Catalog

    with Catalog.opened(catalog) as cat:
        return cat.update_fields(
            dataset, values, message=message, on_missing=on_missing, declare=declare
        )
