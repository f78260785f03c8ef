"""What a commit does with the job's keys that are live already: the duplicate checks.

Each function takes the session of the commit's transaction (see
:func:`.commit.commit`), after the version moved and under its lock:

- a key twice within the job is always an error (:class:`DuplicateKeyError`);
- a key of the job live in the dataset follows ``on_duplicate``: an error,
  the job's record replaces the live one, or the job's record is skipped;
  replace and skip first check that no other commit changed the key since
  the job began (:class:`KeyConflictError`);
- a rewrite (compaction, ``rewrite=``) puts a copy live only in place of the
  record it copied, still live since the job's base version.

The statements are SQL text that embeds :mod:`.visibility`'s rules, so
"live" is decided with the same definition lookups use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Exists, exists, select, text
from sqlalchemy.orm import Session

from .._types import OnDuplicate
from ..errors import Hint, KeyConflictError, KeyTextUnavailableError
from . import visibility
from .hashkeys import HASH, KEY_READER, KeyReader, needs_key_text
from .models import Dataset, Job, Shard
from .register import duplicate_error
from .versions import remove_records

__all__ = [
    "KEY_IN_JOB",
    "LIVE_ELSEWHERE",
    "OF_JOB",
    "STALE_COPY",
    "committed_exists",
    "duplicate_keys",
    "has_committed",
    "refuse_repeats",
    "resolve_duplicates",
    "resolve_rewrite",
]

# What each version sees is visibility.py's; these statements embed its rules as text.
_S_COMMITTED = visibility.sql(visibility.committed, "shards AS s")
# A job's records are its staged ones but those the commit hides (``hidden=``: already removed).
_NEW = (
    "ns.job_id = :job AND ns.state = 'staged' "
    f"AND {visibility.sql(visibility.not_removed, 'records AS n')}"
)
_OF_JOB_OR_COMMITTED = f"({_S_COMMITTED} OR (s.job_id = :job AND s.state = 'staged'))"
# One live record per key per group (docs/GROUPS.md): a key's records in other groups are no
# duplicates. `o` (shard `s`): another record with the key of the job's `n`, committed or the
# job's own, so that one probe per record finds both kinds of duplicate.
_OTHER = (
    "o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash AND o.key = n.key "
    "AND o.group_id = n.group_id "
    "AND (o.shard_id <> n.shard_id OR o.byte_offset <> n.byte_offset) "
    f"AND {visibility.sql(visibility.not_removed, 'records AS o')} AND {_OF_JOB_OR_COMMITTED}"
)
_JOB_SHARDS = "SELECT id FROM shards WHERE job_id = :job AND state = 'staged'"
# A key twice within the job is twice its hash: one pass over the job's records (found by
# their shards, not by joins: costs the job, not the dataset) groups the hashes alone, an
# int8 each; the key text is compared only for the few hashes that repeat (usually none).
_REPEATED_HASHES = text(
    f"SELECT DISTINCT m.key_hash FROM records m WHERE m.shard_id IN ({_JOB_SHARDS}) "
    f"AND {visibility.sql(visibility.not_removed, 'records AS m')} "
    "GROUP BY m.key_hash, m.group_id HAVING count(*) > 1"
)
# Integers inlined in one statement (hashes, record positions): a statement stays a few
# hundred KB, within every driver's and server's limits.
_AT_ONCE = 5000
# Repeated keys worth reporting: the error lists some and counts past them up to this.
_REPORTED = 1001
# Keys of the job whose record another commit added or removed after the job began.
_CHANGED_SINCE = text(
    "SELECT DISTINCT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash AND o.key = n.key "
    "AND o.group_id = n.group_id "
    f"JOIN shards s ON s.id = o.shard_id WHERE {_NEW} AND {_S_COMMITTED} "
    f"AND {visibility.sql(visibility.changed_since, 'records AS o', 'shards AS s', ':base')} "
    "LIMIT 1001"
)
# The job's staged records: `records` unaliased so remove_records can correlate on it.
OF_JOB = f"records.shard_id IN ({_JOB_SHARDS})"
# The dataset's records in committed shards (remove_records keeps the live ones).
LIVE_ELSEWHERE = (
    "records.shard_id IN (SELECT id FROM shards WHERE dataset_id = :d "
    f"AND {visibility.sql(visibility.committed, 'shards')})"
)
# Whether the job's records have the key of `records`' row, in any group.
KEY_IN_JOB = (
    f"EXISTS (SELECT 1 FROM records n JOIN shards ns ON ns.id = n.shard_id WHERE {_NEW} "
    "AND n.dataset_id = records.dataset_id AND n.key_hash = records.key_hash "
    "AND n.key = records.key)"
)
_SAME_KEY_IN_JOB = (
    f"EXISTS (SELECT 1 FROM records n JOIN shards ns ON ns.id = n.shard_id WHERE {_NEW} "
    "AND n.dataset_id = records.dataset_id AND n.key_hash = records.key_hash "
    "AND n.key = records.key AND n.group_id = records.group_id)"
)
# The committed records (`o`, its shard `s`) of the key of `records`' row.
_OF_KEY = (
    "FROM records o JOIN shards s ON s.id = o.shard_id WHERE s.dataset_id = :d "
    "AND o.dataset_id = records.dataset_id AND o.key_hash = records.key_hash "
    "AND o.key = records.key AND o.group_id = records.group_id"
)
# The key has a live record.
_SAME_KEY_LIVE = (
    f"EXISTS (SELECT 1 {_OF_KEY} AND "
    f"{visibility.sql(visibility.live, 'records AS o', 'shards AS s')})"
)
# A rewritten record (``rewrite=``) goes live only while the key's live record is one that was
# live at the job's base version: the record the job read and copied, unchanged since.
_UNCHANGED_SINCE_BASE = (
    f"EXISTS (SELECT 1 {_OF_KEY} AND "
    f"{visibility.sql(visibility.live_since, 'records AS o', 'shards AS s', ':base')})"
)
# A rewritten record (``records``) that goes live no more: its key changed since the base version.
STALE_COPY = f"{OF_JOB} AND NOT {_UNCHANGED_SINCE_BASE}"
# SQLite plans this join as index probes by itself: one per record of the job. PostgreSQL
# runs it as one hash join, for the jobs that make that cheaper (duplicate_keys).
_DUPLICATES = text(
    "SELECT DISTINCT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash "
    f"JOIN shards s ON s.id = o.shard_id WHERE {_NEW} AND {_OTHER} LIMIT 1001"
)
# PostgreSQL, right after a bulk load (no statistics yet), may hash-join the
# whole records table instead; LATERAL ... LIMIT 1 pins one index probe per key.
_DUPLICATES_PG = text(
    "SELECT DISTINCT n.key FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "CROSS JOIN LATERAL (SELECT 1 FROM records o JOIN shards s ON s.id = o.shard_id "
    f"WHERE {_OTHER} LIMIT 1) AS hit WHERE {_NEW} LIMIT 1001"
)


# PostgreSQL: a job this large against the table is checked by one hash join over `records`
# instead of a probe per record. Measured on 10M keys appended to 10M (docs/SCALE.md §2):
# a probe 8.8 us, a scanned row 1.1 us (two parallel workers): even at 8 rows a probe; the
# join is chosen up to 4 (margin for a server that runs it without parallel workers), and
# never for a job under _JOIN_MIN_ROWS, where the probes take well under a second.
_SCAN_PER_PROBE = 4
_JOIN_MIN_ROWS = 100_000
# What the check needs, in the one round trip that asks whether there is anything to collide
# with: the job's rows (its shards, by index) and, only for a job of _JOIN_MIN_ROWS or more,
# the rows a scan reads (every shard's, of every dataset: the table; else 0, not counted),
# from `shards`, not the planner's statistics (stale after loads); and the planner settings
# the join changes, to put back.
_SIZES_PG = text(
    "WITH j AS (SELECT coalesce(sum(record_count), 0) AS n FROM shards "
    "WHERE job_id = :job AND state = 'staged') "
    f"SELECT EXISTS (SELECT 1 FROM shards s WHERE s.dataset_id = :d AND {_S_COMMITTED}), j.n, "
    "CASE WHEN j.n >= :least THEN (SELECT coalesce(sum(record_count), 0) FROM shards "
    "WHERE state <> 'deleted') ELSE 0 END, current_setting('enable_nestloop'), "
    "current_setting('work_mem') FROM j"
)
# The planner settings the join runs under (a hash join, its table in memory in few batches),
# put back right after it: the rest of the commit's transaction plans as before.
_JOIN_SETTINGS = {"enable_nestloop": "off", "work_mem": "64MB"}


@dataclass(frozen=True, slots=True)
class _Sizes:
    """What an append's check is chosen by (PostgreSQL)."""

    committed: bool
    job_rows: int
    table_rows: int
    settings: dict[str, str]

    @property
    def join(self) -> bool:
        """Whether one hash join over the table costs less than a probe per job record."""
        return (
            self.job_rows >= _JOIN_MIN_ROWS and self.table_rows <= _SCAN_PER_PROBE * self.job_rows
        )


def _sizes(session: Session, dataset_id: int, job_id: int) -> _Sizes:
    committed, job_rows, table_rows, nestloop, work_mem = session.execute(
        _SIZES_PG, {"d": dataset_id, "job": job_id, "least": _JOIN_MIN_ROWS}
    ).one()
    settings = {"enable_nestloop": str(nestloop), "work_mem": str(work_mem)}
    return _Sizes(bool(committed), int(job_rows), int(table_rows), settings)


def duplicate_keys(session: Session, job_id: int, sizes: _Sizes | None = None) -> list[str]:
    """Keys of the job's staged records that repeat in the job or among committed records.

    Asked only when the dataset has committed shards (else :func:`refuse_repeats`' one
    pass over the job's hashes is the check). One index probe per record of the job, its
    cost in proportion to the job; on PostgreSQL (``sizes``: :func:`_sizes`), a job of
    100,000 records or more and a quarter or more of the table's rows is one hash join
    over the table instead (about 1 s per million rows scanned, against about 9 s per
    million probes).
    """
    params = {"job": job_id}
    if sizes is None or not sizes.join:
        pg = session.get_bind().dialect.name == "postgresql"
        return sorted(session.execute(_DUPLICATES_PG if pg else _DUPLICATES, params).scalars())
    _set_local(session, _JOIN_SETTINGS)
    found = sorted(session.execute(_DUPLICATES, params).scalars().all())
    _set_local(session, sizes.settings)  # (after an error the transaction rolls back, and they)
    return found


def _set_local(session: Session, settings: dict[str, str]) -> None:
    """Planner settings for the rest of the transaction (``set_config(..., true)``), at once."""
    names = sorted(settings)
    calls = ", ".join(f"set_config(:n{i}, :v{i}, true)" for i in range(len(names)))
    values = {f"n{i}": n for i, n in enumerate(names)} | {
        f"v{i}": settings[n] for i, n in enumerate(names)
    }
    session.execute(text(f"SELECT {calls}"), values)


def repeated_hashes(session: Session, job_id: int) -> list[int]:
    """Key hashes two or more of the job's records have in one group (usually none)."""
    return sorted(int(h) for h in session.execute(_REPEATED_HASHES, {"job": job_id}).scalars())


def _hash_in(hashes: Sequence[int]) -> str:
    """SQL: ``n``'s key hash is one of ``hashes`` (integers inlined)."""
    return f"n.key_hash IN ({', '.join(str(int(h)) for h in hashes)})"


def _chunks(hashes: Sequence[int]) -> list[Sequence[int]]:
    return [hashes[i : i + _AT_ONCE] for i in range(0, len(hashes), _AT_ONCE)]


def has_committed(session: Session, dataset_id: int) -> bool:
    """Whether the dataset has any committed shard (else there is nothing to collide with)."""
    return bool(session.execute(select(committed_exists(dataset_id))).scalar())


def committed_exists(dataset_id: int) -> Exists:
    """``EXISTS`` a committed shard of the dataset, to ask with other conditions in one query."""
    return exists().where(Shard.dataset_id == dataset_id, visibility.committed(Shard))


def refuse_repeats(session: Session, dataset: Dataset, job: Job) -> None:
    """Raise :class:`DuplicateKeyError` if a key repeats among the job's records (of one group).

    Always an error, whatever ``on_duplicate`` says; checked before anything that
    removes job records (a group's skipped keys) could hide the repeat.
    """
    params = {"job": job.id, "d": dataset.id}
    within: list[str] = []
    for chunk in _chunks(repeated_hashes(session, job.id)):
        within += session.execute(
            text(
                f"SELECT n.key FROM records n WHERE n.dataset_id = :d AND {_hash_in(chunk)} "
                f"AND n.shard_id IN ({_JOB_SHARDS}) "
                f"AND {visibility.sql(visibility.not_removed, 'records AS n')} "
                "GROUP BY n.key_hash, n.key, n.group_id HAVING count(*) > 1"
            ),
            params,
        ).scalars()
        if len(within) >= _REPORTED:  # a job written twice: enough to say so
            break
    within = sorted(within)[:_REPORTED]
    if within:
        raise duplicate_error(
            within, f"in job {job.id} of dataset {dataset.name!r} (within the job)"
        )


def resolve_duplicates(
    session: Session,
    dataset: Dataset,
    job: Job,
    on_duplicate: OnDuplicate,
    params: dict[str, object],
    removed: tuple[int, int],
) -> tuple[tuple[int, int], int]:
    """Apply ``on_duplicate`` to the job's keys that are live already.

    Returns the records/bytes removed (``removed`` plus those it replaced) and
    how many of the job's own records it skipped.

    Raises
    ------
    DuplicateKeyError
        Keys repeat within the job, or (``"error"``) are live in the dataset.
    KeyConflictError
        (``"replace"``/``"skip"``) Another commit changed some of the keys after the job began.
    KeyTextUnavailableError
        A hash-only dataset's candidates, and no key reader in the session.
    """
    if dataset.key_mode == HASH:  # no key text: equal hashes, then the keys the shards hold
        return _resolve_hash_only(session, dataset, job, on_duplicate, params, removed)
    pg = session.get_bind().dialect.name == "postgresql"
    sizes = _sizes(session, dataset.id, job.id) if pg else None
    if not (sizes.committed if sizes is not None else has_committed(session, dataset.id)):
        # Nothing to collide with: the job's own repeats are all there is to find, and one
        # pass over its hashes finds them (at 10M keys, 26-43 s against 263 s to hours of
        # probes: docs/SCALE.md §2).
        refuse_repeats(session, dataset, job)
        return removed, 0
    # One probe per record (or, a large job on PostgreSQL, one join) finds both kinds.
    dups = duplicate_keys(session, job.id, sizes)
    if not dups:
        return removed, 0
    where = f"in job {job.id} of dataset {dataset.name!r}"
    # Keys twice within the job first: no on_duplicate policy can resolve those.
    refuse_repeats(session, dataset, job)
    if on_duplicate == "error":
        raise duplicate_error(dups, f"{where} (against committed shards)", live=True)
    if job.base_version is not None:
        changed = sorted(
            session.execute(_CHANGED_SINCE, {"job": job.id, "base": job.base_version}).scalars()
        )
        if changed:
            raise _conflict(dataset, job, on_duplicate, changed)
    if on_duplicate == "replace":
        gone = remove_records(
            session,
            f"records.dataset_id = :d AND {LIVE_ELSEWHERE} AND {_SAME_KEY_IN_JOB}",
            params,
        )
        return (removed[0] + gone[0], removed[1] + gone[1]), 0
    # skip: the job's own records of those keys are added and removed in the same version.
    skipped, _ = remove_records(session, f"{OF_JOB} AND {_SAME_KEY_LIVE}", params)
    return removed, skipped


def _conflict(
    dataset: Dataset, job: Job, on_duplicate: OnDuplicate, changed: list[str]
) -> KeyConflictError:
    """The error of a replace or skip whose keys another commit changed after the job began."""
    shown = ", ".join(repr(k) for k in changed[:10])
    more = f" and {len(changed) - 10} more" if len(changed) > 10 else ""
    return KeyConflictError(
        f"job {job.id} would {on_duplicate} {len(changed)} key(s) of dataset "
        f"{dataset.name!r} that another commit changed after the job began (at version "
        f"{job.base_version}): {shown}{more}; the job was not committed: rerun it "
        "against the current version",
        keys=changed[:1000],
    )


def resolve_rewrite(
    session: Session,
    dataset: Dataset,
    job: Job,
    params: dict[str, object],
    removed: tuple[int, int],
) -> tuple[int, tuple[int, int]]:
    """Apply ``commit(rewrite=True)``; returns the copies hidden and the records/bytes removed.

    Raises
    ------
    DuplicateKeyError
        A key repeats within the job.
    KeyTextUnavailableError
        The dataset keeps only key hashes (a rewrite matches copies to records by key text).
    """
    needs_key_text(dataset.name, dataset.key_mode, "rewriting records (compact, rewrite=True)")
    refuse_repeats(session, dataset, job)
    at_base = {**params, "base": job.base_version}
    # First the copies of records another commit removed since the base version: they stay out.
    stale, _ = remove_records(session, STALE_COPY, at_base)
    # Then what the remaining copies replace: exactly the records they copied.
    gone = remove_records(
        session, f"records.dataset_id = :d AND {LIVE_ELSEWHERE} AND {_SAME_KEY_IN_JOB}", params
    )
    return stale, (removed[0] + gone[0], removed[1] + gone[1])


# Hash-only datasets (hashkeys.py): job records (`n`, shard `ns`) and another record (`o`,
# shard `s`) of the same hash and group, a committed live one or another of the job's.
# Candidates: the keys their shards hold decide.
_PAIRS = (
    "SELECT n.shard_id, n.byte_offset, n.byte_length, ns.url, "
    "o.shard_id, o.byte_offset, o.byte_length, s.url, s.job_id = :job AND s.state = 'staged' "
    "FROM records n JOIN shards ns ON ns.id = n.shard_id "
    "JOIN records o ON o.dataset_id = n.dataset_id AND o.key_hash = n.key_hash "
    "AND o.group_id = n.group_id "
    "AND (o.shard_id <> n.shard_id OR o.byte_offset <> n.byte_offset) "
    f"JOIN shards s ON s.id = o.shard_id WHERE {_NEW} AND "
)
# Pairs with a live committed record or another of the job's (asked only if the dataset has
# committed shards; else the job's own pairs are _pairs_within's).
_CANDIDATES = text(
    _PAIRS + f"{visibility.sql(visibility.not_removed, 'records AS o')} AND {_OF_JOB_OR_COMMITTED}"
)


def _pairs_within(session: Session, dataset: Dataset, job: Job) -> list[Any]:
    """``_PAIRS``' rows of two records of the job (of a hash that repeats in it: usually none)."""
    rows: list[Any] = []
    for chunk in _chunks(repeated_hashes(session, job.id)):
        rows += session.execute(
            text(
                _PAIRS + f"n.dataset_id = :d AND {_hash_in(chunk)} "
                f"AND {visibility.sql(visibility.not_removed, 'records AS o')} "
                "AND s.job_id = :job AND s.state = 'staged'"
            ),
            {"job": job.id, "d": dataset.id},
        ).all()
    return rows


# The same pairs with a committed record another commit added or removed after the job began.
_CHANGED_CANDIDATES = text(
    _PAIRS + f"{_S_COMMITTED} AND "
    f"{visibility.sql(visibility.changed_since, 'records AS o', 'shards AS s', ':base')}"
)


def _positions(pairs: Sequence[tuple[int, int]]) -> str:
    """SQL: ``records``' row is one of ``pairs`` ((shard id, offset), integers inlined)."""
    listed = ", ".join(f"({int(s)}, {int(o)})" for s, o in sorted(set(pairs)))
    return f"(records.shard_id, records.byte_offset) IN (VALUES {listed})"


def _resolve_hash_only(
    session: Session,
    dataset: Dataset,
    job: Job,
    on_duplicate: OnDuplicate,
    params: dict[str, object],
    removed: tuple[int, int],
) -> tuple[tuple[int, int], int]:
    """:func:`resolve_duplicates` for a hash-only dataset: equal hashes, then keys read.

    The job's records whose hash another live record has: if the dataset has
    committed shards, one index probe per record of the job; else another of the
    job's records (the hashes that repeat in the job, one pass over its records);
    usually none. The keys of those candidates are
    read from their shards (the session's :data:`~.hashkeys.KEY_READER`); equal
    keys are duplicates and follow ``on_duplicate`` as in a dataset with key text,
    unequal keys are a collision and are left alone. Costs in proportion to the
    candidates, not the dataset. Raises what :func:`resolve_duplicates` raises, and
    KeyTextUnavailableError if candidates exist and the session has no key reader.
    """
    read_keys = session.info.get(KEY_READER)
    if has_committed(session, dataset.id):
        rows = session.execute(_CANDIDATES, {"job": job.id}).all()
    else:
        rows = _pairs_within(session, dataset, job)
    if not rows:
        return removed, 0
    within: set[str] = set()
    live: dict[str, tuple[list[tuple[int, int]], list[tuple[int, int]]]] = {}
    for key, mine, theirs, in_job in _same_keys(dataset, job, rows, read_keys):
        if in_job:
            within.add(key)
        else:
            live.setdefault(key, ([], []))[0].append(mine)
            live[key][1].append(theirs)
    where_job = f"in job {job.id} of dataset {dataset.name!r}"
    if within:
        raise duplicate_error(sorted(within), f"{where_job} (within the job)")
    if not live:
        return removed, 0
    if on_duplicate == "error":
        raise duplicate_error(sorted(live), f"{where_job} (against committed shards)", live=True)
    if job.base_version is not None:
        changed_rows = session.execute(
            _CHANGED_CANDIDATES, {"job": job.id, "base": job.base_version}
        ).all()
        changed = sorted({k for k, *_ in _same_keys(dataset, job, changed_rows, read_keys)})
        if changed:
            raise _conflict(dataset, job, on_duplicate, changed)
    if on_duplicate == "replace":
        theirs_all = [p for _, theirs in live.values() for p in theirs]
        gone = _remove(session, theirs_all, params)
        return (removed[0] + gone[0], removed[1] + gone[1]), 0
    mine_all = [p for mine, _ in live.values() for p in mine]
    skipped, _ = _remove(session, mine_all, params)
    return removed, skipped


def _same_keys(
    dataset: Dataset, job: Job, rows: Sequence[Any], read_keys: KeyReader | None
) -> list[tuple[str, tuple[int, int], tuple[int, int], bool]]:
    """The pairs of ``rows`` (``_PAIRS``' columns) whose two records hold one key, with that key.

    Each record's key is read from its shard once; pairs of two keys (collisions) are dropped.

    Raises
    ------
    KeyTextUnavailableError
        There are pairs and no ``read_keys``.
    """
    if not rows:
        return []
    if read_keys is None:
        raise KeyTextUnavailableError(
            f"{len(rows)} record(s) of job {job.id} share a key hash with another record of "
            f'dataset {dataset.name!r}, which was created with keys="hash": their keys must be '
            "read from the shards, and this catalog was opened without a reader",
            hint=Hint(
                python="commit through shardcat.Catalog (it reads the keys), not SqlCatalog",
                cli="run the command again: shardcat's commands commit through shardcat.Catalog",
            ),
        )
    where: dict[tuple[int, int], tuple[str, int, int]] = {}
    for n_sid, n_off, n_len, n_url, o_sid, o_off, o_len, o_url, _ in rows:
        where[(n_sid, n_off)] = (n_url, int(n_off), int(n_len))
        where[(o_sid, o_off)] = (o_url, int(o_off), int(o_len))
    at = list(where)
    key_of = dict(zip(at, read_keys([where[p] for p in at])))
    out = []
    for n_sid, n_off, _, _, o_sid, o_off, _, _, in_job in rows:
        key = key_of[(n_sid, n_off)]
        if key == key_of[(o_sid, o_off)]:  # else a collision: two keys, one hash
            out.append((key, (n_sid, n_off), (o_sid, o_off), bool(in_job)))
    return out


def _remove(
    session: Session, positions: list[tuple[int, int]], params: dict[str, object]
) -> tuple[int, int]:
    total = [0, 0]
    for i in range(0, len(positions), _AT_ONCE):
        got = remove_records(session, _positions(positions[i : i + _AT_ONCE]), params)
        total[0] += got[0]
        total[1] += got[1]
    return total[0], total[1]
