"""The lookup's SQL statements, as text: one round trip each, on SQLite and PostgreSQL.

Text, not SQLAlchemy expressions: the lookup runs them on the DBAPI connection
(and the compiled point lookup prepares the very same text), where building and
compiling an expression per call would cost more than the statement. What a
version sees comes from :mod:`shardcat.catalog.visibility`, rendered as text
(:mod:`shardcat.catalog.visibility_text`: no SQLAlchemy on a lookup's path).
``{p}`` is the dialect's parameter marker.
"""

from __future__ import annotations

from typing import Any

from ..catalog import visibility_text
from ..catalog.history import Version

__all__ = [
    "BATCH_GROUP",
    "BATCH_KEY_HASH",
    "COMMITTED",
    "DATASET",
    "GROUP",
    "RECORD_BY_SHARD_SELECT",
    "REMOVED",
    "SELECT",
    "SHARDS",
    "batch_sql",
    "point_sql",
    "record_sql",
    "visible_at",
]

# Every statement ends with r.group_id (0: the base): a key's rows are one per
# column group its version sees, merged by the lookup in group order (docs/GROUPS.md).
GROUP = 7
"""The column of ``group_id`` in the point statement's rows (``SELECT``, ``RECORD_SELECT``)."""
SELECT = (
    "SELECT s.url, s.alignment, r.byte_offset, r.byte_length, r.spans, s.kind, l.signature,"
    " r.group_id{extra}"
    " FROM records r JOIN shards s ON s.id = r.shard_id JOIN layouts l ON l.id = r.layout_id"
)
# A whole record's point lookup: the same row, but a native shard's record
# names its own entries, so its layout is not fetched (CASE evaluates the
# subquery for tar rows only) and its kind comes back as NULL (no string
# to make per lookup): SQLite plans the layouts join as a scan of layouts.
RECORD_SELECT = (
    "SELECT s.url, s.alignment, r.byte_offset, r.byte_length, r.spans,"
    " CASE WHEN s.kind = 'native' THEN NULL ELSE s.kind END,"
    " CASE WHEN s.kind = 'native' THEN NULL"
    " ELSE (SELECT l.signature FROM layouts l WHERE l.id = r.layout_id) END, r.group_id"
    " FROM records r JOIN shards s ON s.id = r.shard_id"
)
# The latest version's point lookup of a whole record, the hot path: the
# record's shard id, not the shard's URL, alignment and kind, which never
# change for an id (ids are never reused) but a move's new URL; the lookup
# caches them per shard (Lookup._shard_of). The join stays: it is what
# checks, in the same statement, that the shard is committed. The URL's
# text and the CASEs cost a measurable share of a lookup's instructions.
# The layout id names a tar sample's entries (point.TarFinisher):
# an integer of the row already read, no join. A second row (a column group's)
# sends the compiled path to the Python one, which merges them in group order:
# a shard's group comes with the shard cache (SHARDS), not in this statement
# (a column here costs every lookup; docs/GROUPS.md §4).
RECORD_BY_SHARD_SELECT = (
    "SELECT r.shard_id, r.byte_offset, r.byte_length, r.spans, r.layout_id"
    " FROM records r JOIN shards s ON s.id = r.shard_id"
)
# What a miss of that cache loads: every shard of the dataset, in one
# statement, so a thread's later lookups stay one statement each (a shard
# committed since is one more miss and load). A shard's column group is its
# first record's (a group's shards hold its records only): one seek per shard; NULL while
# the shard is not committed (a group job's staged records are group 0 until its commit
# names their group), so the cache learns it once committed.
SHARDS = (
    "SELECT s.id, s.url, s.alignment, s.kind,"
    f" CASE WHEN {visibility_text.sql('committed', 'shards AS s')} THEN"
    " coalesce((SELECT r.group_id FROM records r WHERE r.shard_id = s.id LIMIT 1), 0) END"
    " FROM shards s WHERE s.dataset_id = (SELECT id FROM datasets WHERE name = {p})"
)
DATASET = "r.dataset_id = (SELECT id FROM datasets WHERE name = {p})"
# What each version sees is visibility.py's, rendered once as text: the latest
# version (a committed shard's live records), a kept version given by number
# (visible at it, and not expired), a tag (its subquery is the version; tagged
# versions are never expired).
COMMITTED = visibility_text.sql("live", "records AS r", "shards AS s")
# The latest commit that removed a key's record, from a committed shard (MAX skips NULLs).
REMOVED = (
    "SELECT MAX(r.removed_version) FROM records r JOIN shards s ON s.id = r.shard_id"
    " WHERE r.dataset_id = {p} AND r.key_hash = {p} AND r.key = {p} AND "
    + visibility_text.sql("committed", "shards AS s")
)
TAG = "(SELECT t.version FROM dataset_tags t WHERE t.dataset_id = r.dataset_id AND t.name = {p})"


def at_number(p: str) -> str:
    return visibility_text.sql("visible_at_kept", "records AS r", "shards AS s", p)


def at_tag(p: str) -> str:
    return visibility_text.sql("visible_at", "records AS r", "shards AS s", TAG.format(p=p))


def visible_at(p: str, version: Version) -> tuple[str, tuple[Any, ...]]:
    """The visibility condition for ``version`` and its parameters (after the statement's own)."""
    if version is None:
        return COMMITTED, ()
    if isinstance(version, int) or version.isdigit():
        n = int(version)
        return at_number(p), (n, n, n)
    return at_tag(p), (version, version)


# Rows: url, alignment, offset, length, spans, kind, signature, group_id. The spans
# (each entry's offset, size and CRC) let every read be checked against what
# was registered, not only against the shard's own CRCs; the kind says how a
# whole record is decoded (decode.py), the layout names a tar sample's entries.


def point_sql(
    p: str, visible: str = COMMITTED, select: str = SELECT.format(extra=""), *, keyed: bool = True
) -> str:
    """The point statement: bound as dataset, key hash, key (``keyed``), then ``visible``'s.

    ``keyed=False``: a hash-only dataset's candidates (``r.key IS NULL``, no key
    parameter): the lookup keeps those whose record holds the key (:mod:`.keyread`).
    """
    key = f"r.key = {p}" if keyed else "r.key IS NULL"
    return select + f" WHERE {DATASET.format(p=p)} AND r.key_hash = {p} AND {key} AND {visible}"


def record_sql(p: str, visible: str = COMMITTED, *, keyed: bool = True) -> str:
    """The point lookup of a whole record: kind and layout NULL for native shards (``RECORD_SELECT``)."""
    return point_sql(p, visible, RECORD_SELECT, keyed=keyed)


# A batch's rows: url, offset, length, spans, key, alignment, kind, signature, group_id
# (and key_hash, for a hash-only dataset: batch_sql's ``hashes``).
# Whole records (no entries=) select kind and layout as NULL for native shards,
# as the point lookup does: no string per row and no layouts join.
_BATCH_FROM = " FROM records r JOIN shards s ON s.id = r.shard_id"
BATCH_SELECT = (
    "SELECT s.url, r.byte_offset, r.byte_length, r.spans, r.key, s.alignment,"
    " CASE WHEN s.kind = 'native' THEN NULL ELSE s.kind END,"
    " CASE WHEN s.kind = 'native' THEN NULL"
    " ELSE (SELECT l.signature FROM layouts l WHERE l.id = r.layout_id) END, r.group_id"
    + _BATCH_FROM
)
BATCH_GROUP = 8
"""The column of ``group_id`` in a batch's rows."""
BATCH_KEY_HASH = 9
"""The column of ``key_hash`` in a batch's rows where ``batch_sql(..., hashes=True)`` made it."""
# Some entries of each record: every row's layout names them.
BATCH_ENTRIES_SELECT = (
    "SELECT s.url, r.byte_offset, r.byte_length, r.spans, r.key, s.alignment, s.kind, l.signature,"
    " r.group_id" + _BATCH_FROM + " JOIN layouts l ON l.id = r.layout_id"
)


def batch_sql(
    dialect: str,
    visible: str = COMMITTED,
    entries: bool = False,
    *,
    partitioned: bool = False,
    hashes: bool = False,
) -> str:
    """The batch statement: bound as dataset, the key hashes (one array or JSON list), ``visible``'s.

    ``hashes``: each row also ends with its ``key_hash`` (:data:`BATCH_KEY_HASH`), which
    a hash-only dataset's batch matches to the asked keys (``lookup._assumed_keys``).

    PostgreSQL: ``key_hash = ANY(...)``, one index scan over the sorted hashes;
    on a partitioned ``records`` (``partitioned``, :mod:`shardcat.catalog.partitions`)
    that scan runs in every partition with the whole array, so there it is
    ``IN (SELECT unnest(...))``: a nested loop over the distinct hashes, each
    probe pruned at run time to its hash's one partition (measured in
    docs/SCALE.md §6: on a plain table ``ANY`` is the faster one).
    """
    if dialect == "postgresql":
        match = (
            "r.key_hash IN (SELECT unnest(%s::int8[]))"
            if partitioned
            else "r.key_hash = ANY(%s::int8[])"
        )
        p = "%s"
    else:  # one JSON parameter, however many keys: no parameter limit to chunk around
        match = "r.key_hash IN (SELECT value FROM json_each(?))"
        p = "?"
    select = BATCH_ENTRIES_SELECT if entries else BATCH_SELECT
    if hashes:
        select = select.replace(_BATCH_FROM, ", r.key_hash" + _BATCH_FROM, 1)
    return select + f" WHERE {DATASET.format(p=p)} AND {match} AND {visible}"
