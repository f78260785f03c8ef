"""A key prefix as a range of the key index, in the order both databases keep keys.

Every key starting with ``P`` lies in ``[P, P')``, where ``P'``
(:func:`prefix_end`) is ``P`` with its last character incremented. That
holds in code point order, which is UTF-8 byte order: SQLite's BINARY
collation, and ``COLLATE "C"`` on PostgreSQL (:data:`KEY_ORDER`), which the
key index and the statements over it both use. No SQLAlchemy here: the
ORM's statements (``keys.py``) and the lookups' text (``reading/listing.py``)
share it.

The index is partial (:data:`SORTED_ROWS`): it holds the rows that have key
text and whose dataset keeps keys in order (``records.key_sorted``; false in a
dataset created with ``keys="unsorted"``). A statement reads it only if its
WHERE clause says so in the same words (SQLite proves a partial index usable
term by term, and a bare ``key_sorted`` is not ``key_sorted = 1`` to it):
:func:`sorted_rows` is that condition.
"""

from __future__ import annotations

import sys

__all__ = ["KEY_ORDER", "SORTED_ROWS", "prefix_end", "sorted_rows"]

KEY_ORDER = 'COLLATE "C"'
"""PostgreSQL: how ``ix_records_dataset_id_key`` orders keys (bytes, like SQLite)."""

SORTED_ROWS = "key IS NOT NULL AND key_sorted"
"""The key index's predicate (revision 0018). ``key_sorted`` is a BOOLEAN named bare, which
both databases read alike (SQLite stores 0 or 1): the same words work in anyone's SQL."""


def sorted_rows(alias: str) -> str:
    """The WHERE condition under which a statement over ``records AS alias`` may read the key index."""
    return f"{alias}.key IS NOT NULL AND {alias}.key_sorted"


_SURROGATES = range(0xD800, 0xE000)  # not characters: UTF-8 cannot encode them


def prefix_end(prefix: str) -> str | None:
    """The first string after every string that starts with ``prefix`` (None: no such string).

    >>> prefix_end("cam3/")
    'cam30'
    """
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if code in _SURROGATES:
            code = _SURROGATES.stop
        if code <= sys.maxunicode:
            return "".join(chars) + chr(code)
        # The last character is the largest there is: the range ends after the one before it.
    return None
