"""Shard rows: list them, register a shard with its records, retire and purge them.

Each function takes the session of the caller's transaction; the
:class:`~shardcat.catalog.SqlCatalog` opens it and documents the public methods.
A shard's rows are computed from its footer before the transaction starts
(:func:`~shardcat.catalog.register.prepare_shard`), so only SQL runs under
the lock.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from sqlalchemy import select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .._redact import redact_url as redact
from ..errors import (
    CatalogError,
    DuplicateKeyError,
    Hint,
    KeyTextUnavailableError,
    ShardNotFoundError,
)
from ..format.spans import unpack_spans
from . import visibility
from .commit import bump_version, commit
from .datasets import find_dataset
from .deferred_indexes import key_indexes_deferred
from .hashkeys import HASH
from .jobs import stageable_job
from .models import LIVE_STATES, Dataset, Job, Shard
from .register import PreparedShard, ensure_layouts, insert_ignore, insert_records
from .results import RecordRow, ShardRow
from .retire import drop_shards, retire
from .rows import shard_row
from .versions import mark_fully_removed, record_version, remove_records

__all__ = [
    "insert_shard",
    "list_shards",
    "purge_shards",
    "record_rows",
    "register_shard",
    "register_shards",
    "registration_state",
    "remove_shard",
    "shard_urls",
]

_PURGE_CHUNK = 500
"""URLs per ``IN`` list (purges, URL checks)."""


def list_shards(session: Session, dataset: str, state: str | None) -> list[ShardRow]:
    """See :meth:`Catalog.shards`."""
    ds = find_dataset(session, dataset)
    q = select(Shard).where(Shard.dataset_id == ds.id)
    if state is not None:
        q = q.where(Shard.state == state)
    if state == "committed":  # the latest version's shards, not those only older versions read
        q = q.where(visibility.shard_live(Shard))
    q = q.order_by(Shard.shard_number, Shard.url, Shard.id)
    return [shard_row(r, ds.name) for r in session.execute(q).scalars()]


_RECORD_ROWS = text(
    "SELECT r.key, r.byte_offset, r.byte_length, r.spans, l.signature FROM records r "
    "JOIN layouts l ON l.id = r.layout_id WHERE r.shard_id = :shard ORDER BY r.byte_offset"
)


def record_rows(session: Session, shard_id: int) -> list[RecordRow]:
    """See :meth:`Catalog.record_rows`."""
    parsed: dict[str, tuple[tuple[str, str, str], ...]] = {}
    out: list[RecordRow] = []
    for key, offset, length, spans, signature in session.execute(_RECORD_ROWS, {"shard": shard_id}):
        layout = parsed.get(signature)
        if layout is None:
            layout = parsed[signature] = tuple(
                (str(n), str(t), str(c)) for n, t, c in json.loads(signature)
            )
        located = tuple(unpack_spans(bytes(spans), len(layout)))
        out.append(RecordRow(key, int(offset), int(length), layout, located))
    return out


def shard_urls(
    session: Session,
    *,
    states: Collection[str] | None,
    dataset: str | None,
    url: str | None,
) -> set[str]:
    """See :meth:`Catalog.shard_urls`."""
    q = select(Shard.url).distinct()
    if dataset is not None:
        q = q.where(Shard.dataset_id == find_dataset(session, dataset).id)
    if states is not None:
        q = q.where(Shard.state.in_(list(states)))
    if url is not None:
        q = q.where(Shard.url == redact(url))
    return set(session.execute(q).scalars())


def registration_state(job_id: int | None, state: str | None) -> str:
    """The state a registered shard gets: ``staged`` in a job, else ``committed``.

    Raises
    ------
    ValueError
        If ``state`` contradicts ``job_id`` or is neither of the two.
    """
    state = state or ("staged" if job_id is not None else "committed")
    if state == "staged" and job_id is None:
        raise ValueError("staged shards belong to a job: call begin_job() and pass job=")
    if state == "committed" and job_id is not None:
        raise ValueError("a job's shards are staged; commit_job() makes them visible together")
    if state not in ("staged", "committed"):
        raise ValueError(f"state must be 'staged' or 'committed', not {state!r}")
    return state


def register_shard(
    session: Session,
    dataset: str,
    prep: PreparedShard,
    *,
    job_id: int | None,
    state: str,
    catalog: str,
) -> ShardRow:
    """See :meth:`Catalog.register_shard`; ``state`` comes from :func:`registration_state`.

    ``catalog`` is the catalog's display URL, for messages.
    """
    ds = find_dataset(session, dataset)
    _check_url_free(session, ds, prep, job_id)
    if job_id is not None:
        job_row = stageable_job(session, job_id, ds, catalog=catalog)
        # A retried task registers the same URL again: its earlier rows go.
        retried = (
            session.execute(
                select(Shard.id).where(
                    Shard.job_id == job_id, Shard.url == prep.url, Shard.state == "staged"
                )
            )
            .scalars()
            .all()
        )
        drop_shards(session, list(retried))
    else:
        job_row = Job(dataset_id=ds.id, state="open", description="register_shard")
        session.add(job_row)
        session.flush()
    shard_id = insert_shard(session, ds.id, job_row.id, prep, key_mode=ds.key_mode)
    if state == "committed":
        # The one shard just staged: its records and bytes are known here (one query less).
        added = (prep.record_count, int(prep.lengths.sum()))
        commit(session, ds, job_row, operation="register", added=added)
    return shard_row(session.get_one(Shard, shard_id, populate_existing=True), ds.name)


def register_shards(
    session: Session, dataset: str, preps: list[PreparedShard], *, catalog: str
) -> list[ShardRow]:
    """See :meth:`Catalog.register_shards`: many shards, one implicit job, one version.

    The shards' keys were checked unique among themselves in memory (the
    caller's :func:`~.register.check_unique` over all of them), so the
    commit's duplicate-key query runs only if the dataset has committed shards.
    """
    ds = find_dataset(session, dataset)
    for i in range(0, len(preps), _PURGE_CHUNK):
        _check_url_free(session, ds, preps[i : i + _PURGE_CHUNK], None)
    job_row = Job(dataset_id=ds.id, state="open", description="register_shards")
    session.add(job_row)
    session.flush()
    # The distinct layouts of all the shards: one lookup, not one per shard.
    distinct = {lay.digest: lay for prep in preps for lay in prep.layouts}
    known = dict(zip(distinct, ensure_layouts(session, ds.id, list(distinct.values()))))
    added = (sum(p.record_count for p in preps), sum(int(p.lengths.sum()) for p in preps))
    with key_indexes_deferred(session, added[0]):
        ids = [
            insert_shard(
                session,
                ds.id,
                job_row.id,
                prep,
                [known[lay.digest] for lay in prep.layouts],
                key_mode=ds.key_mode,
            )
            for prep in preps
        ]
    commit(session, ds, job_row, operation="register", added=added, keys_unique=True)
    query = select(Shard).where(Shard.job_id == job_row.id)
    loaded = session.execute(query.execution_options(populate_existing=True)).scalars()
    rows = {r.id: r for r in loaded}
    return [shard_row(rows[i], ds.name) for i in ids]


def _check_url_free(
    session: Session, ds: Dataset, prep: PreparedShard | list[PreparedShard], job_id: int | None
) -> None:
    """Refuse a URL that a live row of another job names (the unique index backs this up).

    A committed row that only older versions read (its records all removed)
    gives way: it is retired, so the file gets fresh rows in a new version;
    the versions that read it through the old row no longer do. ``prep`` may
    be several shards: their URLs are read in one query.
    """
    preps = prep if isinstance(prep, list) else [prep]
    by_url = {p.url: p for p in preps}
    # One read of the URLs' live rows; which of them are in the way is decided here.
    rows = session.execute(
        select(
            Shard.id,
            Shard.url,
            Shard.state,
            Shard.job_id,
            visibility.shard_live(Shard).label("live"),
        ).where(
            Shard.dataset_id == ds.id,
            Shard.url.in_(list(by_url)) if len(by_url) > 1 else Shard.url == preps[0].url,
            Shard.state.in_(LIVE_STATES),
        )
    ).all()
    gone = [r.id for r in rows if r.state == "committed" and not r.live]
    for r in rows:
        if r.id in gone:
            continue
        # As SQL's ``job_id <> :job`` would: a row without a job is not another job's.
        other_job = r.job_id is not None and r.job_id != job_id
        if job_id is None or other_job or r.state == "committed":
            # The transaction rolls back: retiring ``gone`` first would change nothing.
            raise _url_taken(by_url[r.url], ds.name, r.state, r.job_id)
    retire(session, gone)


def insert_shard(
    session: Session,
    dataset_id: int,
    job_id: int,
    prep: PreparedShard,
    layout_ids: list[int] | None = None,
    *,
    key_mode: str,
) -> int:
    """Insert a staged shard row and its records in bulk; returns the shard's id.

    ``layout_ids`` are the ids of ``prep.layouts`` when the caller has them
    already (:func:`register_shards` looks them up once for many shards).
    ``key_mode``: the dataset's; ``"hash"`` registers the records without key text,
    ``"unsorted"`` out of the key index.

    Raises
    ------
    KeyTextUnavailableError
        A hash-only dataset and a shard that is not a native one (only a native
        record's head holds its key for a lookup to compare).
    DuplicateKeyError
        If a live row of the dataset names the same URL (another process won the race).
    """
    hash_only = key_mode == HASH
    if hash_only and prep.columns.get("kind", "native") != "native":
        raise KeyTextUnavailableError(
            f"shard {prep.url} is a {prep.columns['kind']!r} shard, and its dataset was created "
            'with keys="hash": only a native shard\'s records hold the key a lookup compares',
            hint=Hint(
                python='index it into a dataset created with keys="text", or convert it to '
                "native shards first",
                cli="index it into a dataset created with `--keys text`, or convert it to "
                "native shards first",
            ),
        )
    if layout_ids is None:
        layout_ids = ensure_layouts(session, dataset_id, prep.layouts)
    values = dict(
        dataset_id=dataset_id, job_id=job_id, url=prep.url, state="staged", **prep.columns
    )
    upsert = insert_ignore(session, Shard)
    if upsert is not None:
        # ON CONFLICT DO NOTHING: losing the race for the URL returns no id and leaves the
        # transaction usable, without a savepoint's two extra round trips.
        try:
            shard_id = session.execute(
                upsert.values(values).returning(Shard.id)
            ).scalar_one_or_none()
        except IntegrityError as e:  # not the URL (ignored above): a row it refers to is gone
            raise _owner_gone(prep, dataset_id, job_id) from e
        if shard_id is None:
            raise _url_taken(prep, _dataset_name(session, dataset_id), "staged or committed", None)
    else:
        row = Shard(**values)
        try:
            # A savepoint: losing the race for the URL must not abort the whole transaction.
            with session.begin_nested():
                session.add(row)
                session.flush()
        except IntegrityError as e:  # the savepoint's rollback expunged the row
            raise _url_taken(
                prep, _dataset_name(session, dataset_id), "staged or committed", None
            ) from e
        shard_id = row.id
    insert_records(session, shard_id, dataset_id, prep, layout_ids, key_mode=key_mode)
    return shard_id


def _owner_gone(prep: PreparedShard, dataset_id: int, job_id: int) -> CatalogError:
    return CatalogError(
        f"shard {prep.url} was not registered: its dataset (id {dataset_id}) or job "
        f"(id {job_id}) was removed while it was being registered (a delete or a gc ran "
        "meanwhile); nothing of it is in the catalog: create the dataset again if needed "
        "and rerun the write"
    )


def _dataset_name(session: Session, dataset_id: int) -> str:
    return session.execute(select(Dataset.name).where(Dataset.id == dataset_id)).scalar_one()


def remove_shard(session: Session, dataset: str, url: str) -> ShardRow:
    """See :meth:`Catalog.remove_shard`."""
    url = redact(url)
    ds = find_dataset(session, dataset)
    row = session.execute(
        select(Shard).where(
            Shard.dataset_id == ds.id,
            Shard.url == url,
            visibility.shard_live(Shard),
        )
    ).scalar_one_or_none()
    if row is None:
        raise ShardNotFoundError(
            f"no committed shard {url} in dataset {dataset!r}; list them with Catalog.shards()"
        )
    # A new version without the shard's records; older versions still see them.
    version = bump_version(session, ds, None)
    removed = remove_records(session, "records.shard_id = :shard", {"shard": row.id, "v": version})
    mark_fully_removed(session, ds.id, version)
    record_version(
        session,
        ds.id,
        version,
        job_id=None,
        operation="remove_shard",
        message=url,
        added=(0, 0),
        removed=removed,
    )
    return shard_row(session.get_one(Shard, row.id, populate_existing=True), ds.name)


def purge_shards(session: Session, dataset: str, urls: Iterable[str]) -> int:
    """See :meth:`Catalog.purge_shards`."""
    wanted = [redact(u) for u in urls]
    removed = 0
    ds = find_dataset(session, dataset)
    for i in range(0, len(wanted), _PURGE_CHUNK):
        ids = list(
            session.execute(
                select(Shard.id).where(
                    Shard.dataset_id == ds.id,
                    Shard.state == "deleted",
                    Shard.url.in_(wanted[i : i + _PURGE_CHUNK]),
                )
            ).scalars()
        )
        drop_shards(session, ids)
        removed += len(ids)
    return removed


def _url_taken(
    prep: PreparedShard, dataset: str, state: str, job_id: int | None
) -> DuplicateKeyError:
    by = f" by job {job_id}" if job_id is not None else ""
    return DuplicateKeyError(
        f"shard {prep.url} is already {state}{by} in dataset {dataset!r}; one file is registered "
        "once per dataset: refresh its rows with reindex(), or remove_shard() it first",
        keys=prep.keys[:1000],
    )
