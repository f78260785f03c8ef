"""Shard rows: list them, register a shard with its records, retire and purge them.

Each function takes the session of the caller's transaction; the
:class:`~shardcat.catalog.Catalog` opens it and documents the public methods.
A shard's rows are computed from its footer before the transaction starts
(:func:`~shardcat.catalog.register.prepare_shard`), so only SQL runs under
the lock.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable

from sqlalchemy import select, text, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import DuplicateKeyError, ShardNotFoundError
from ..storage import redact
from . import jobs
from .datasets import find_dataset
from .models import LIVE_STATES, Dataset, Job, Shard
from .register import PreparedShard, ensure_layouts, insert_records
from .results import RecordRow, ShardRow
from .rows import shard_row
from .session import NO_SYNC
from .spans import unpack_spans

__all__ = [
    "insert_shard",
    "list_shards",
    "purge_shards",
    "record_rows",
    "register_shard",
    "registration_state",
    "remove_shard",
    "shard_urls",
]

_PURGE_CHUNK = 500


def list_shards(session: Session, dataset: str, state: str | None) -> list[ShardRow]:
    """See :meth:`Catalog.shards`."""
    ds = find_dataset(session, dataset)
    q = select(Shard).where(Shard.dataset_id == ds.id)
    if state is not None:
        q = q.where(Shard.state == state)
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
        job_row = jobs.stageable_job(session, job_id, ds, catalog=catalog)
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
        jobs.drop_shards(session, list(retried))
    else:
        job_row = Job(dataset_id=ds.id, state="open", description="register_shard")
        session.add(job_row)
        session.flush()
    shard_id = insert_shard(session, ds.id, job_row.id, prep)
    if state == "committed":
        jobs.commit(session, ds, job_row)
    return shard_row(session.get_one(Shard, shard_id, populate_existing=True), ds.name)


def _check_url_free(session: Session, ds: Dataset, prep: PreparedShard, job_id: int | None) -> None:
    """Refuse a URL that a live row of another job names (the unique index backs this up)."""
    taken = session.execute(
        select(Shard.state, Shard.job_id).where(
            Shard.dataset_id == ds.id,
            Shard.url == prep.url,
            Shard.state.in_(LIVE_STATES),
            (Shard.job_id != job_id) | (Shard.state == "committed")
            if job_id is not None
            else true(),
        )
    ).first()
    if taken is not None:
        raise _url_taken(prep, ds.name, taken.state, taken.job_id)


def insert_shard(session: Session, dataset_id: int, job_id: int, prep: PreparedShard) -> int:
    """Insert a staged shard row and its records in bulk; returns the shard's id.

    Raises
    ------
    DuplicateKeyError
        If a live row of the dataset names the same URL (another process won the race).
    """
    layout_ids = ensure_layouts(session, dataset_id, prep.layouts)
    row = Shard(dataset_id=dataset_id, job_id=job_id, url=prep.url, state="staged", **prep.columns)
    try:
        # A savepoint: losing the race for the URL must not abort the whole transaction.
        with session.begin_nested():
            session.add(row)
            session.flush()
    except IntegrityError as e:  # the savepoint's rollback expunged the row
        name = session.execute(select(Dataset.name).where(Dataset.id == dataset_id)).scalar_one()
        raise _url_taken(prep, name, "staged or committed", None) from e
    insert_records(session, row.id, dataset_id, prep, layout_ids)
    return row.id


def remove_shard(session: Session, dataset: str, url: str) -> ShardRow:
    """See :meth:`Catalog.remove_shard`."""
    url = redact(url)
    ds = find_dataset(session, dataset)
    row = session.execute(
        select(Shard).where(Shard.dataset_id == ds.id, Shard.url == url, Shard.state == "committed")
    ).scalar_one_or_none()
    if row is None:
        raise ShardNotFoundError(
            f"no committed shard {url} in dataset {dataset!r}; list them with Catalog.shards()"
        )
    jobs.retire(session, [row.id])
    session.execute(
        update(Dataset).where(Dataset.id == ds.id).values(version=Dataset.version + 1),
        execution_options=NO_SYNC,
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
        jobs.drop_shards(session, ids)
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
