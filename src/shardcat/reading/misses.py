"""Why a lookup found nothing: the error an empty result raises, with what would help.

An empty result is the cold path, so extra queries are fine here: the
dataset or the version may not exist, a commit may have deleted the key
(and a kept version may still read it), or the key may be a file name
whose sample exists under its stem. Each runs on the lookup's connection
through ``query`` (the thread's :class:`~shardcat.catalog.connection.RawConnection`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..catalog.history import Version
from ..catalog.missing import unknown_dataset
from ..errors import KeyNotFoundError, VersionNotFoundError
from ..format.checksums import signed_key_hash
from . import statements

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    # Runs one statement with its parameters and returns its rows (a type only: nothing to
    # build when a lookup opens).
    Query = Callable[[str, Sequence[Any]], list[Any]]

__all__ = ["missing"]


def missing(
    query: Query,
    p: str,
    point: str,
    dataset: str,
    key: str | None,
    version: Version = None,
    *,
    found: Sequence[Any] | None = None,
) -> Exception:
    """The error for an empty result: unknown dataset or version, or missing key.

    ``p`` is the connection's placeholder, ``point`` the lookup's point
    statement (dataset, key hash, key) at the latest version. ``found``: the
    dataset's row (id first) if the caller read it already (empty: no such dataset).
    """
    if found is None:
        found = query(f"SELECT id FROM datasets WHERE name = {p}", (dataset,))
    if not found:
        return unknown_dataset(
            dataset, [r[0] for r in query("SELECT name FROM datasets ORDER BY name", ())]
        )
    at = ""
    if version is not None:
        gone = _version_missing(query, p, int(found[0][0]), dataset, version)
        if gone is not None:
            return gone
        at = f" at version {version!r}"
    if key is None:
        return KeyNotFoundError(f"no keys found in dataset {dataset!r}{at}")
    hint = ""
    if version is None and "\x00" not in key:  # a hint is extra; PostgreSQL binds no NUL
        hint = _removed_hint(query, p, int(found[0][0]), key) or _stem_hint(
            query, point, dataset, key
        )
    return KeyNotFoundError(
        f"no record with key {key!r} in dataset {dataset!r}{at or ' (among committed shards)'}"
        + hint
    )


def _removed_hint(query: Query, p: str, dataset_id: int, key: str) -> str:
    """A key a commit deleted: which version did, and whether a kept version still reads it."""
    h = signed_key_hash(key.encode("utf-8"))
    rows = query(statements.REMOVED.format(p=p), (dataset_id, h, key))
    gone = rows[0][0] if rows else None
    if gone is None:
        return ""
    before = int(gone) - 1
    sql = f"SELECT 1 FROM dataset_versions WHERE dataset_id = {p} AND number = {p}"
    if before >= 1 and query(sql, (dataset_id, before)):
        still = (
            f"; version {before} still reads it (get(..., version={before}), `--version {before}`)"
        )
    else:
        still = "; no kept version reads it"
    return f": version {gone} deleted it (`shardcat log` says how){still}"


def _stem_hint(query: Query, point: str, dataset: str, key: str) -> str:
    """A file name given as the key (``a/img1.jpg``): the key of its sample, if that exists.

    Packed folders key a sample by its path up to the file name's first
    dot (``--key-rule first-dot``) or last dot; the extension names the
    entry. One more query per miss, only for a name with a dot.
    """
    folder, _, name = key.rpartition("/")
    prefix = f"{folder}/" if folder else ""
    for stem in dict.fromkeys((name.split(".", 1)[0], name.rsplit(".", 1)[0])):
        if not stem or stem == name:
            continue
        h = signed_key_hash((prefix + stem).encode("utf-8"))
        if query(point, (dataset, h, prefix + stem)):
            return (
                f"; keys have no file extension: the sample {prefix + stem!r} exists "
                f"(the extension names its entry: {name[len(stem) + 1 :]!r})"
            )
    return ""


def _version_missing(
    query: Query, p: str, dataset_id: int, dataset: str, version: Version
) -> Exception | None:
    """The error for a version or tag the dataset does not have; None if it has it."""
    if isinstance(version, int) or (isinstance(version, str) and version.isdigit()):
        sql = f"SELECT 1 FROM dataset_versions WHERE dataset_id = {p} AND number = {p}"
        if not query(sql, (dataset_id, int(version))):
            return VersionNotFoundError(
                f"dataset {dataset!r} has no version {version} (never made, or expired); "
                f"list the kept versions with `shardcat log {dataset}`"
            )
        return None
    sql = f"SELECT 1 FROM dataset_tags WHERE dataset_id = {p} AND name = {p}"
    if not query(sql, (dataset_id, version)):
        return VersionNotFoundError(
            f"dataset {dataset!r} has no tag {version!r}; list tags with `shardcat log {dataset}`"
        )
    return None
