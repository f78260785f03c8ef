"""Turning a ShardInfo into catalog rows, and writing them in bulk.

:func:`prepare_shard` is pure numpy work on the footer arrays (no SQL);
:func:`insert_records` writes the rows with the fastest path each backend
has: ``executemany`` on SQLite, binary ``COPY`` on PostgreSQL. Rows are sent
in key-hash order, which keeps the ``(dataset_id, key_hash)`` index insertions
local (it doubles PostgreSQL's COPY rate on a non-empty table).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from .._redact import redact_url as redact
from ..errors import DuplicateKeyError, FormatError, Hint
from ..format.info import ShardInfo
from ..format.spans import PackedSpans, pack_spans
from .hashkeys import HASH, TEXT, UNSORTED
from .kinds import Summary, kind_of
from .models import Base, Layout, LayoutEntry, Record
from .pgcopy import copy_binary

__all__ = [
    "LayoutSpec",
    "PreparedShard",
    "check_unique_across",
    "ensure_layouts",
    "insert_ignore",
    "insert_records",
    "prepare_shard",
]

MAX_LISTED_KEYS = 20
"""Duplicate keys named in an error message (the exception holds up to 1000)."""


@dataclass(frozen=True, slots=True)
class LayoutSpec:
    """A distinct sequence of entries, as stored in ``layouts``."""

    entries: tuple[tuple[str, str, str], ...]
    """``(name, content_type, codec)`` per entry, in record order."""

    @property
    def signature(self) -> str:
        return json.dumps(
            [list(e) for e in self.entries], ensure_ascii=False, separators=(",", ":")
        )

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.signature.encode("utf-8")).hexdigest()


@dataclass(slots=True)
class PreparedShard:
    """Everything to insert for one shard, computed from its ShardInfo alone."""

    url: str
    columns: dict[str, Any]
    """Values of the ``shards`` columns that come from the file."""
    keys: list[str]
    key_hashes: np.ndarray
    """int64: xxh64 as signed (SQL BIGINT)."""
    offsets: np.ndarray
    lengths: np.ndarray
    layouts: list[LayoutSpec]
    layout_index: np.ndarray
    """Per record: index into ``layouts``."""
    spans: PackedSpans
    group: str | None = None
    """The column group whose entries the shard holds, as its footer names it; None: the base."""

    @property
    def record_count(self) -> int:
        return len(self.keys)


def prepare_shard(info: Summary) -> PreparedShard:
    """Compute a shard's catalog rows from its summary (no database access).

    ``info`` is a native shard's :class:`ShardInfo` or a tar's :class:`TarShardInfo`;
    the columns that differ come from its kind (:mod:`.kinds`).

    Raises
    ------
    DuplicateKeyError
        If the shard holds the same key twice.
    FormatError
        If the summary's arrays disagree with each other.
    """
    url = redact(info.path)
    recs = info.records
    n = len(recs)
    if len(info.keys) != n:
        raise FormatError(f"summary lists {len(info.keys)} keys for {n} records", path=url)
    counts = recs["entry_count"].astype(np.int64)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    if int(starts[-1]) != len(info.entries):
        raise FormatError(
            f"records name {int(starts[-1])} entries, the summary has {len(info.entries)}", path=url
        )
    columns = kind_of(info).columns(info)
    hashes = recs["key_hash"].astype(np.uint64).view(np.int64)
    check_unique(info.keys, hashes, url)
    layouts, layout_index = _layouts(info, counts, starts)
    return PreparedShard(
        url=url,
        columns=columns,
        keys=list(info.keys),
        key_hashes=hashes,
        offsets=recs["offset"].astype(np.int64),
        lengths=recs["length"].astype(np.int64),
        layouts=layouts,
        layout_index=layout_index,
        spans=pack_spans(info.entries, counts),
        group=info.group if isinstance(info, ShardInfo) else None,
    )


def check_unique(keys: list[str], hashes: np.ndarray, where: str) -> None:
    """Raise DuplicateKeyError if ``keys`` repeat (equal hashes, then equal text)."""
    if len(hashes) < 2:
        return
    order = np.argsort(hashes, kind="stable")
    sorted_h = hashes[order]
    same = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
    if not len(same):
        return
    dups: set[str] = set()
    for j in same.tolist():
        a, b = keys[int(order[j])], keys[int(order[j + 1])]
        if a == b:
            dups.add(a)
    if dups:
        raise duplicate_error(sorted(dups), f"in {where}")


def check_unique_across(preps: list[PreparedShard]) -> None:
    """Raise DuplicateKeyError if a key is in two of the shards, or a URL is given twice.

    Each shard's own keys were checked by :func:`prepare_shard`.
    """
    if len(preps) < 2:
        return
    urls = [p.url for p in preps]
    if len(set(urls)) != len(urls):
        twice = sorted({u for u in urls if urls.count(u) > 1})
        raise DuplicateKeyError(
            f"shard {twice[0]} is given more than once; one file is registered once per dataset",
            keys=[],
        )
    hashes = np.concatenate([p.key_hashes for p in preps])
    ordered = np.sort(hashes)  # ~30x faster than np.unique's hash table (numpy 2.4) here
    if not (ordered[1:] == ordered[:-1]).any():
        return  # the common case: no equal hashes, so no equal keys (no key list built)
    keys = [k for p in preps for k in p.keys]
    check_unique(keys, hashes, "the shards registered together")


def duplicate_error(keys: list[str], where: str, *, live: bool = False) -> DuplicateKeyError:
    """The error for ``keys`` written twice; ``live``: some are already in the dataset.

    Only a key already in the dataset can be replaced or skipped by a write's
    ``on_duplicate``; a key twice within the written data can only be written once.
    """
    listed = ", ".join(repr(k) for k in keys[:MAX_LISTED_KEYS])
    more = f" and {len(keys) - MAX_LISTED_KEYS} more" if len(keys) > MAX_LISTED_KEYS else ""
    return DuplicateKeyError(
        f"{len(keys)} duplicate key(s) {where}: {listed}{more}; keys are unique per dataset",
        keys=keys[:1000],
        hint=DUPLICATE_HINT if live else _REPEATED_HINT,
    )


_REPEATED_HINT = Hint(
    python="write each key once: on_duplicate replaces or skips only keys the dataset "
    "already has, never a key twice in the data written; the job's files stay until "
    "gc removes them (`shardcat gc DATASET`)",
    cli="write each key once: --on-duplicate replaces or skips only keys the dataset "
    "already has, never a key twice in the data written; the job's files stay until "
    "`shardcat gc DATASET` removes them",
)


DUPLICATE_HINT = Hint(
    python='write each key once, or pass on_duplicate="replace" (the new sample wins) or '
    '"skip" (the sample already there stays)',
    cli="write each key once, or pass --on-duplicate replace (the new sample wins) or "
    "--on-duplicate skip (the sample already there stays)",
)
"""What to do about a key written twice: the same advice for every path that finds one."""


def _layouts(
    info: Summary, counts: np.ndarray, starts: np.ndarray
) -> tuple[list[LayoutSpec], np.ndarray]:
    """Distinct entry sequences of the shard's records, and each record's one."""
    n = len(counts)
    specs = [(s.name, s.content_type, s.codec.label) for s in info.specs]
    spec_ids = info.entries["spec"].astype(np.int64)
    if len(spec_ids) and int(spec_ids.max()) >= len(specs):
        raise FormatError("an entry names an unknown entry spec", path=redact(info.path))
    layouts: list[LayoutSpec] = []
    index = np.zeros(n, dtype=np.int64)
    for k in np.unique(counts).tolist():
        which = np.flatnonzero(counts == k)
        if k == 0:
            index[which] = len(layouts)
            layouts.append(LayoutSpec(()))
            continue
        matrix = spec_ids[starts[which][:, None] + np.arange(k)]
        bits = max(1, int(len(specs) - 1).bit_length())
        if k * bits <= 63:
            # Few entries: one integer per row makes np.unique ~10x faster than axis=0.
            packed = (matrix << (np.arange(k, dtype=np.int64) * bits)).sum(axis=1)
            _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
            distinct = matrix[first]
        else:
            distinct, inverse = np.unique(matrix, axis=0, return_inverse=True)
        index[which] = len(layouts) + inverse.reshape(-1)
        layouts.extend(LayoutSpec(tuple(specs[s] for s in row)) for row in distinct.tolist())
    return layouts, index


def ensure_layouts(session: Session, dataset_id: int, layouts: list[LayoutSpec]) -> list[int]:
    """Ids of ``layouts`` in the dataset, inserting the ones not seen before."""
    if not layouts:
        return []
    digests = [lay.digest for lay in layouts]
    rows = select(Layout.digest, Layout.id).where(
        Layout.dataset_id == dataset_id, Layout.digest.in_(set(digests))
    )
    known = {d: i for d, i in session.execute(rows)}
    missing = [lay for lay in dict(zip(digests, layouts)).values() if lay.digest not in known]
    for lay in missing:
        # A concurrent writer may add the same layout: ON CONFLICT makes both win.
        stmt = _insert_ignore(session, Layout).values(
            dataset_id=dataset_id,
            digest=lay.digest,
            signature=lay.signature,
            entry_count=len(lay.entries),
        )
        # RETURNING gives the new id; no row back means the other writer's insert won.
        layout_id = None
        if session.get_bind().dialect.insert_returning:
            layout_id = session.execute(stmt.returning(Layout.id)).scalar_one_or_none()
        else:
            session.execute(stmt)
        if layout_id is None:
            layout_id = session.execute(
                select(Layout.id).where(
                    Layout.dataset_id == dataset_id, Layout.digest == lay.digest
                )
            ).scalar_one()
        if lay.entries:
            session.execute(
                _insert_ignore(session, LayoutEntry),
                [
                    {
                        "layout_id": layout_id,
                        "position": i,
                        "name": e[0],
                        "content_type": e[1],
                        "codec": e[2],
                    }
                    for i, e in enumerate(lay.entries)
                ],
            )
        known[lay.digest] = layout_id
    return [known[d] for d in digests]


def insert_ignore(session: Session, model: type[Base]) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` into ``model``'s table, or None if the backend lacks it."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(model).on_conflict_do_nothing()
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(model).on_conflict_do_nothing()
    return None


def _insert_ignore(session: Session, model: type[Layout] | type[LayoutEntry]) -> Any:
    stmt = insert_ignore(session, model)
    return insert(model) if stmt is None else stmt


_COLUMNS = (
    "shard_id",
    "dataset_id",
    "byte_offset",
    "key_hash",
    "key",
    "byte_length",
    "layout_id",
    "spans",
)


def insert_records(
    session: Session,
    shard_id: int,
    dataset_id: int,
    prep: PreparedShard,
    layout_ids: list[int],
    *,
    key_mode: str = TEXT,
) -> None:
    """Insert the shard's records in the session's transaction, in bulk.

    ``key_mode``: the dataset's. ``"hash"`` leaves ``records.key`` NULL; ``"unsorted"``
    sets ``records.key_sorted`` false, which leaves the rows out of the key index.

    PostgreSQL gets them in key-hash order (its heap does not care, and the
    hash index then grows at one end of each page run). So does SQLite for a
    hash-only dataset, whose one index of keys is the hash index: swept from
    one end to the other instead of hit at random pages, while the table,
    clustered by shard and offset, takes the shard's rows in a key range of
    its own that stays in the writer's cache whatever their order (at 10M
    keys: 1.24 x the keys/s of file order, 1.1 bytes a key less). With key
    text SQLite keeps file order: hash order did not register faster there
    and its lookups measured slower (docs/SCALE.md §3).
    """
    n = prep.record_count
    if n == 0:
        return
    keys = key_mode != HASH
    # A sorted row takes the column's default: the statement names key_sorted only when false.
    unsorted = key_mode == UNSORTED
    lids = np.asarray(layout_ids, dtype=np.int64)[prep.layout_index]
    conn = session.connection()
    dialect = conn.dialect.name
    dbapi: Any = conn.connection.driver_connection
    # File order is the whole slice: indexing with it gives views, no copies.
    in_file_order = dialect == "sqlite" and keys
    order: Any = slice(None) if in_file_order else np.argsort(prep.key_hashes, kind="stable")
    pick: Sequence[int] = range(n) if in_file_order else order.tolist()
    spans = prep.spans.tolist()
    spans = spans if in_file_order else [spans[i] for i in pick]
    if dialect == "sqlite":
        # Integers are inlined: fewer parameters to bind per row is measurably faster.
        sql = (
            f"INSERT INTO records ({', '.join(_COLUMNS)}{', key_sorted' if unsorted else ''}) "
            f"VALUES ({int(shard_id)}, {int(dataset_id)}, ?, ?, ?, ?, ?, ?{', 0' if unsorted else ''})"
        )
        rows = zip(
            prep.offsets[order].tolist(),
            prep.key_hashes[order].tolist(),
            prep.keys if keys else repeat(None, n),  # with keys: in file order
            prep.lengths[order].tolist(),
            lids[order].tolist(),
            spans,
        )
        cur = dbapi.cursor()
        try:
            cur.executemany(sql, rows)
        finally:
            cur.close()
        return
    if dialect == "postgresql":
        names = ["shard_id", "dataset_id", "byte_offset", "key_hash", "byte_length", "layout_id"]
        types = ["int4", "int4", "int8", "int8", "int8", "int4"]
        values: list[Any] = [
            shard_id,
            dataset_id,
            prep.offsets[order],
            prep.key_hashes[order],
            prep.lengths[order],
            lids[order],
        ]
        if keys:  # a hash-only dataset's rows leave the column out: NULL
            names.append("key")
            types.append("bytes")
            values.append([prep.keys[i].encode("utf-8") for i in pick])
        if unsorted:
            names.append("key_sorted")
            types.append("bool")
            values.append(False)
        with dbapi.cursor() as cur:
            copy_binary(cur, "records", (*names, "spans"), (*types, "bytes"), (*values, spans))
        return
    # Any other SQLAlchemy backend: plain executemany through Core.
    session.execute(
        insert(Record),
        [
            dict(zip(_COLUMNS, row), key_sorted=not unsorted)
            for row in zip(
                [shard_id] * n,
                [dataset_id] * n,
                prep.offsets[order].tolist(),
                prep.key_hashes[order].tolist(),
                [prep.keys[i] for i in pick] if keys else [None] * n,
                prep.lengths[order].tolist(),
                lids[order].tolist(),
                spans,
            )
        ],
    )
