"""What a dataset's catalog keeps of its keys: text in key order, text alone, or the hash.

``keys="text"`` (the default) keeps each key's text and hash, the text in the
key-order index ``ix_records_dataset_id_key`` (listings, ``keys --prefix``);
``keys="unsorted"`` keeps the text but leaves its rows out of that index
(``records.key_sorted`` false: 28-65 bytes a key less, no listing in key order);
``keys="hash"`` keeps only the hash.

Hash-only datasets (``keys="hash"``): the catalog keeps each key's hash, its shard the text.

A dataset created with ``keys="hash"`` registers ``records.key`` as NULL: a
row is its position, its key's 64-bit hash and its spans. Exactness comes
from the shard: every record's head carries its key, and whatever finds rows
by hash (lookups, the commit's duplicate check) reads the key of each
candidate and keeps the rows whose key is the one asked for. Two keys with
one hash (a collision; about one expected among 5.85 billion keys) are two
candidates, never a match and never a duplicate.

The catalog layer reads no shard itself: the commit is handed a
:data:`KeyReader` by the layer that reads (``shardcat.reading``), which
reads each candidate record's head (a few hundred bytes) and returns its key
(:func:`.duplicates.resolve_duplicates`).
docs/CATALOG.md ("Hash-only datasets") describes the rules and their costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .._keymodes import KEY_MODES
from ..errors import Hint, KeyOrderUnavailableError, KeyTextUnavailableError

__all__ = [
    "GROUPS_OPERATION",
    "HASH",
    "KEY_MODES",
    "KEY_READER",
    "TEXT",
    "UNSORTED",
    "KeyReader",
    "check_key_mode",
    "needs_key_order",
    "needs_key_text",
]

# What a dataset's records keep of their key (``datasets.key_mode``): defined in
# shardcat._keymodes, free of every import, so that the command line and the lookup path
# name the modes without loading the catalog or the ORM. Checked by check_key_mode, not by
# a CHECK constraint: adding one to ``datasets`` on SQLite would rebuild the table every
# other table refers to.
TEXT, HASH, UNSORTED = KEY_MODES

KeyReader = Callable[[Sequence[tuple[str, int, int]]], list[str]]
"""Reads the key of each record ``(shard url, byte offset, byte length)`` from its shard."""

KEY_READER = "shardcat.key_reader"
"""``Session.info`` key of the unit of work's :data:`KeyReader` (None: the catalog reads no shard)."""


def check_key_mode(keys: str) -> str:
    """``keys`` if it is a key mode (``"text"``, ``"hash"`` or ``"unsorted"``).

    Raises
    ------
    ValueError
        Any other value.
    """
    if keys not in KEY_MODES:
        raise ValueError(f"keys must be one of {KEY_MODES}, not {keys!r}")
    return keys


GROUPS_OPERATION = "a column group (its entries are matched to samples by key text)"
"""What :func:`needs_key_text` names for ``add_entries``, checked before its job and at commit."""


def needs_key_text(dataset: str, key_mode: str, operation: str) -> None:
    """Raise if ``operation`` needs keys' text and the dataset keeps only their hashes.

    Raises
    ------
    KeyTextUnavailableError
        ``key_mode`` is ``"hash"``.
    """
    if key_mode == HASH:
        raise KeyTextUnavailableError(
            f"{operation} needs the keys' text, and dataset {dataset!r} was created with "
            'keys="hash" (the catalog keeps only their hashes; the shards hold the text)',
            hint=_KEY_TEXT_HINT,
        )


def needs_key_order(dataset: str, key_mode: str, operation: str) -> None:
    """Raise if ``operation`` reads keys in key order and the dataset keeps no key-order index.

    Raises
    ------
    KeyTextUnavailableError
        ``key_mode`` is ``"hash"`` (no key text at all).
    KeyOrderUnavailableError
        ``key_mode`` is ``"unsorted"``.
    """
    needs_key_text(dataset, key_mode, operation)
    if key_mode == UNSORTED:
        raise KeyOrderUnavailableError(
            f"{operation} reads keys in key order, and dataset {dataset!r} was created with "
            'keys="unsorted" (the catalog keeps the keys\' text but no index in key order)',
            hint=_KEY_ORDER_HINT,
        )


_KEY_ORDER_HINT = Hint(
    python="select keys with where= (a scan of the dataset's rows, e.g. "
    "\"key LIKE 'cam3/%'\"), look them up by name (get, get_many), or copy the dataset "
    'with its keys in order (shardcat.copy_dataset(..., keys="text"))',
    cli="select keys with `shardcat sql` or where= (a scan of the dataset's rows), look them "
    "up by name (`shardcat get`), or copy the dataset with its keys in order (`shardcat copy "
    "... --keys text`)",
)

_KEY_TEXT_HINT = Hint(
    python="look keys up one by one (get, get_many, locate work), read the shards "
    "(shardcat.read), or copy the dataset (shardcat.copy_dataset: the copy keeps key text, "
    "taken from the shards' footers)",
    cli="look keys up one by one (`shardcat get` works), read the shards, or copy the "
    "dataset (`shardcat copy`: the copy keeps key text, taken from the shards' footers)",
)
