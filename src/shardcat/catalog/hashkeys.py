"""Hash-only datasets (``keys="hash"``): the catalog keeps each key's hash, its shard the text.

A dataset created with ``keys="hash"`` registers ``records.key`` as NULL: a
row is its position, its key's 64-bit hash and its spans. Exactness comes
from the shard: every record's head carries its key, and whatever finds rows
by hash (lookups, the commit's duplicate check) reads the key of each
candidate and keeps the rows whose key is the one asked for. Two keys with
one hash (a collision; about one expected among 5.85 billion keys) are two
candidates, never a match and never a duplicate.

The catalog layer reads no shard itself: the commit is handed a
:data:`KeyReader` by the layer that reads (``shardcat.reading``), which
reads each candidate record's head (a few hundred bytes) and returns its key.
docs/CATALOG.md ("Hash-only datasets") describes the rules and their costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import text

from ..errors import Hint, KeyTextUnavailableError
from . import visibility
from .models import KEY_MODES
from .register import duplicate_error

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from .._types import OnDuplicate
    from .models import Dataset, Job

__all__ = [
    "HASH",
    "KEY_READER",
    "TEXT",
    "KeyReader",
    "check_key_mode",
    "hash_only_duplicates",
    "needs_key_text",
]

TEXT, HASH = KEY_MODES

KeyReader = Callable[[Sequence[tuple[str, int, int]]], list[str]]
"""Reads the key of each record ``(shard url, byte offset, byte length)`` from its shard."""

KEY_READER = "shardcat.key_reader"
"""``Session.info`` key of the unit of work's :data:`KeyReader` (None: the catalog reads no shard)."""


def check_key_mode(keys: str) -> str:
    """``keys`` if it is a key mode (``"text"`` or ``"hash"``).

    Raises
    ------
    ValueError
        Any other value.
    """
    if keys not in KEY_MODES:
        raise ValueError(f"keys must be one of {KEY_MODES}, not {keys!r}")
    return keys


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


_KEY_TEXT_HINT = Hint(
    python="look keys up one by one (get, get_many, locate work), read the shards "
    '(shardcat.read), or copy the dataset into one created with keys="text"',
    cli="look keys up one by one (`shardcat get` works), read the shards, or copy the "
    "dataset into one created with `--keys text`",
)

# Job records (`n`, shard `ns`) and another record (`o`, shard `s`) of the same hash and group:
# a committed live one, or another of the job. Candidates: the keys decide.
_NEW = (
    "ns.job_id = :job AND ns.state = 'staged' "
    f"AND {visibility.sql(visibility.not_removed, 'records AS n')}"
)
_S_COMMITTED = visibility.sql(visibility.committed, "shards AS s")
_CANDIDATES = text(
    "SELECT n.shard_id, n.byte_offset, n.byte_length, ns.url, "
    "o.shard_id, o.byte_offset, o.byte_length, s.url, s.job_id = :job AND s.state = 'staged' "
    "FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash "
    "AND o.group_id = n.group_id "
    "AND (o.shard_id <> n.shard_id OR o.byte_offset <> n.byte_offset) "
    "JOIN shards s ON s.id = o.shard_id "
    f"WHERE {_NEW} AND {visibility.sql(visibility.not_removed, 'records AS o')} "
    f"AND ({_S_COMMITTED} OR (s.job_id = :job AND s.state = 'staged'))"
)


def _positions(pairs: Sequence[tuple[int, int]]) -> str:
    """SQL: ``records``' row is one of ``pairs`` ((shard id, offset), integers inlined)."""
    listed = ", ".join(f"({int(s)}, {int(o)})" for s, o in sorted(set(pairs)))
    return f"(records.shard_id, records.byte_offset) IN (VALUES {listed})"


def hash_only_duplicates(
    session: Session,
    dataset: Dataset,
    job: Job,
    on_duplicate: OnDuplicate,
    params: dict[str, object],
    removed: tuple[int, int],
    read_keys: KeyReader | None,
) -> tuple[tuple[int, int], int]:
    """:func:`.duplicates.resolve_duplicates` for a hash-only dataset: equal hashes, then keys read.

    One statement finds the job's records whose hash another live record (or
    another of the job's) has; usually none. The keys of those candidates are
    read from their shards (``read_keys``); equal keys are duplicates and follow
    ``on_duplicate`` as in a dataset with key text, unequal keys are a collision
    and are left alone. Costs in proportion to the candidates, not the dataset.

    Raises
    ------
    DuplicateKeyError
        Keys repeat within the job, or (``"error"``) are live in the dataset.
    KeyTextUnavailableError
        Candidates exist and no ``read_keys`` was given (a catalog opened without
        the reading layer cannot compare them).
    """
    rows = session.execute(_CANDIDATES, {"job": job.id}).all()
    if not rows:
        return removed, 0
    if read_keys is None:
        raise KeyTextUnavailableError(
            f"{len(rows)} record(s) of job {job.id} share a key hash with another record of "
            f'dataset {dataset.name!r}, which was created with keys="hash": their keys must be '
            "read from the shards, and this catalog was opened without a reader",
            hint=Hint(
                python="commit through shardcat.Catalog (it reads the keys), not SqlCatalog",
                cli="commit with `shardcat commit`",
            ),
        )
    where: dict[tuple[int, int], tuple[str, int, int]] = {}
    for n_sid, n_off, n_len, n_url, o_sid, o_off, o_len, o_url, _ in rows:
        where[(n_sid, n_off)] = (n_url, int(n_off), int(n_len))
        where[(o_sid, o_off)] = (o_url, int(o_off), int(o_len))
    at = list(where)
    key_of = dict(zip(at, read_keys([where[p] for p in at])))
    within: set[str] = set()
    live: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
    for n_sid, n_off, _, _, o_sid, o_off, _, _, in_job in rows:
        key = key_of[(n_sid, n_off)]
        if key != key_of[(o_sid, o_off)]:
            continue  # a collision: two keys, one hash
        if in_job:
            within.add(key)
        else:
            mine, theirs = live.setdefault(key, ([], []))
            mine.append((n_sid, n_off))
            theirs.append((o_sid, o_off))
    where_job = f"in job {job.id} of dataset {dataset.name!r}"
    if within:
        raise duplicate_error(sorted(within), f"{where_job} (within the job)")
    if not live:
        return removed, 0
    if on_duplicate == "error":
        raise duplicate_error(sorted(live), f"{where_job} (against committed shards)", live=True)
    if on_duplicate == "replace":
        theirs_all = [p for _, theirs in live.values() for p in theirs]
        gone = _remove(session, theirs_all, params)
        return (removed[0] + gone[0], removed[1] + gone[1]), 0
    mine_all = [p for mine, _ in live.values() for p in mine]
    skipped, _ = _remove(session, mine_all, params)
    return removed, skipped


def _remove(
    session: Session, positions: list[tuple[int, int]], params: dict[str, object]
) -> tuple[int, int]:
    from .versions import remove_records  # versions imports the duplicate rules' siblings

    total = [0, 0]
    for i in range(0, len(positions), 5000):
        got = remove_records(session, _positions(positions[i : i + 5000]), params)
        total[0] += got[0]
        total[1] += got[1]
    return total[0], total[1]
