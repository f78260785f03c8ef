"""The writing half of the Catalog: shards and jobs (a mixin of :class:`Catalog`)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ..errors import CommitConflictError, DuplicateKeyError, JobNotFoundError, ShardNotFoundError
from ..format import ShardInfo
from ..storage import redact
from . import jobs as _jobs
from .models import LIVE_STATES, Dataset, Job, Shard
from .register import PreparedShard, ensure_layouts, insert_records, prepare_shard
from .results import JobInfo, ShardRow
from .rows import job_info, shard_row

__all__ = ["CatalogWrites"]

_NO_SYNC = {"synchronize_session": False}


class CatalogWrites:
    """Registering shards, jobs and their commits; mixed into :class:`Catalog`."""

    if TYPE_CHECKING:
        _url: str

        @property
        def url(self) -> str: ...

        def _uow(self, *, write: bool = False) -> Any: ...

        def _dataset(self, session: Session, name: str) -> Dataset: ...

    # --- shards ----------------------------------------------------------

    def shards(self, dataset: str, state: str | None = "committed") -> list[ShardRow]:
        """The dataset's shards in one state (``None``: all), by shard number then URL.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            ds = self._dataset(s, dataset)
            q = select(Shard).where(Shard.dataset_id == ds.id)
            if state is not None:
                q = q.where(Shard.state == state)
            q = q.order_by(Shard.shard_number, Shard.url, Shard.id)
            return [shard_row(r, ds.name) for r in s.execute(q).scalars()]

    def shard_urls(
        self,
        *,
        states: Collection[str] | None = None,
        dataset: str | None = None,
        url: str | None = None,
    ) -> set[str]:
        """URLs of shard rows of every dataset (or one), in these states (default: any).

        One query; what gc and delete consult before removing a file.

        Raises
        ------
        DatasetNotFoundError
            If ``dataset`` is given and there is no such dataset.
        """
        with self._uow() as s:
            q = select(Shard.url).distinct()
            if dataset is not None:
                q = q.where(Shard.dataset_id == self._dataset(s, dataset).id)
            if states is not None:
                q = q.where(Shard.state.in_(list(states)))
            if url is not None:
                q = q.where(Shard.url == redact(url))
            return set(s.execute(q).scalars())

    def register_shard(
        self,
        dataset: str,
        info: ShardInfo,
        *,
        job: int | JobInfo | None = None,
        state: str | None = None,
    ) -> ShardRow:
        """Register a shard and all its records in one transaction, in bulk.

        Without ``job`` the shard is committed at once (visible to lookups on
        return). With ``job`` it is staged: invisible until
        :meth:`commit_job`; registering the same URL again in that job (a
        retried task) replaces the earlier rows.

        Parameters
        ----------
        dataset:
            The dataset's name.
        info:
            The shard's summary: what ``ShardWriter.close()`` returns or
            ``ShardReader(url).info`` rebuilds. Its ``path`` is stored
            without credentials.
        job:
            A job from :meth:`begin_job`.
        state:
            ``"committed"`` (default without a job) or ``"staged"`` (with one).

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        DuplicateKeyError
            If a key of the shard is already committed in the dataset, or the
            shard's URL is (nothing is registered).
        CommitConflictError
            If the job is not open.
        CatalogLockedError
            If another writer holds the SQLite catalog past the busy timeout.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        state = state or ("staged" if job_id is not None else "committed")
        if state == "staged" and job_id is None:
            raise ValueError("staged shards belong to a job: call begin_job() and pass job=")
        if state == "committed" and job_id is not None:
            raise ValueError("a job's shards are staged; commit_job() makes them visible together")
        if state not in ("staged", "committed"):
            raise ValueError(f"state must be 'staged' or 'committed', not {state!r}")
        prep = prepare_shard(info)
        with self._uow(write=True) as s:
            ds = self._dataset(s, dataset)
            self._check_url_free(s, ds, prep, job_id)
            if job_id is not None:
                job_row = self._open_job(s, job_id, ds)
                retried = (
                    s.execute(
                        select(Shard.id).where(
                            Shard.job_id == job_id, Shard.url == prep.url, Shard.state == "staged"
                        )
                    )
                    .scalars()
                    .all()
                )
                _jobs.drop_shards(s, list(retried))
            else:
                job_row = Job(dataset_id=ds.id, state="open", description="register_shard")
                s.add(job_row)
                s.flush()
            shard_id = self._insert(s, ds.id, job_row.id, prep)
            if state == "committed":
                _jobs.commit(s, ds, job_row)
            return shard_row(s.get_one(Shard, shard_id, populate_existing=True), ds.name)

    def _check_url_free(
        self, s: Session, ds: Dataset, prep: PreparedShard, job_id: int | None
    ) -> None:
        """Refuse a URL that a live row of another job names (the unique index backs this up)."""
        taken = s.execute(
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

    def _insert(self, s: Session, dataset_id: int, job_id: int, prep: PreparedShard) -> int:
        layout_ids = ensure_layouts(s, dataset_id, prep.layouts)
        row = Shard(
            dataset_id=dataset_id, job_id=job_id, url=prep.url, state="staged", **prep.columns
        )
        try:
            # A savepoint: losing the race for the URL must not abort the whole transaction.
            with s.begin_nested():
                s.add(row)
                s.flush()
        except IntegrityError as e:  # the savepoint's rollback expunged the row
            name = s.execute(select(Dataset.name).where(Dataset.id == dataset_id)).scalar_one()
            raise _url_taken(prep, name, "staged or committed", None) from e
        insert_records(s, row.id, dataset_id, prep, layout_ids)
        return row.id

    def remove_shard(self, dataset: str, url: str) -> ShardRow:
        """Take a committed shard out of the dataset (state ``deleted``; the file is not touched).

        Raises
        ------
        ShardNotFoundError
            If no committed shard of the dataset has this URL.
        """
        url = redact(url)
        with self._uow(write=True) as s:
            ds = self._dataset(s, dataset)
            row = s.execute(
                select(Shard).where(
                    Shard.dataset_id == ds.id, Shard.url == url, Shard.state == "committed"
                )
            ).scalar_one_or_none()
            if row is None:
                raise ShardNotFoundError(
                    f"no committed shard {url} in dataset {dataset!r}; list them with Catalog.shards()"
                )
            _jobs.retire(s, [row.id])
            s.execute(
                update(Dataset).where(Dataset.id == ds.id).values(version=Dataset.version + 1),
                execution_options=_NO_SYNC,
            )
            return shard_row(s.get_one(Shard, row.id, populate_existing=True), ds.name)

    def purge_shards(self, dataset: str, urls: Iterable[str]) -> int:
        """Forget ``deleted`` shards (tombstones) once their files are gone; returns rows removed.

        Shards in other states are never touched.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        wanted = [redact(u) for u in urls]
        removed = 0
        with self._uow(write=True) as s:
            ds = self._dataset(s, dataset)
            for i in range(0, len(wanted), 500):
                chunk = wanted[i : i + 500]
                ids = list(
                    s.execute(
                        select(Shard.id).where(
                            Shard.dataset_id == ds.id,
                            Shard.state == "deleted",
                            Shard.url.in_(chunk),
                        )
                    ).scalars()
                )
                _jobs.drop_shards(s, ids)
                removed += len(ids)
        return removed

    # --- jobs ------------------------------------------------------------

    def begin_job(
        self,
        dataset: str,
        *,
        description: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> JobInfo:
        """Open a job: shards registered with ``job=`` stay staged until :meth:`commit_job`.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow(write=True) as s:
            ds = self._dataset(s, dataset)
            row = Job(
                dataset_id=ds.id, state="open", description=description, properties=properties
            )
            s.add(row)
            s.flush()
            s.refresh(row)
            return job_info(row, ds.name)

    def job(self, job: int | JobInfo) -> JobInfo:
        """A job's row, with its shard and record counts.

        Raises
        ------
        JobNotFoundError
            If there is no such job.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        with self._uow() as s:
            row = s.get(Job, job_id)
            if row is None:
                raise JobNotFoundError(f"no job {job_id} in catalog {self.url}")
            name = s.execute(select(Dataset.name).where(Dataset.id == row.dataset_id)).scalar_one()
            shards, records = s.execute(
                select(func.count(Shard.id), func.coalesce(func.sum(Shard.record_count), 0)).where(
                    Shard.job_id == job_id, Shard.state != "deleted"
                )
            ).one()
            return job_info(row, name, int(shards), int(records))

    def jobs(self, dataset: str, state: str | None = None) -> list[JobInfo]:
        """The dataset's jobs (in one state, or all), oldest first, with their counts.

        Raises
        ------
        DatasetNotFoundError
            If there is no such dataset.
        """
        with self._uow() as s:
            ds = self._dataset(s, dataset)
            q = select(Job).where(Job.dataset_id == ds.id)
            if state is not None:
                q = q.where(Job.state == state)
            rows = list(s.execute(q.order_by(Job.id)).scalars())
            counts = {
                job_id: (int(n), int(records))
                for job_id, n, records in s.execute(
                    select(
                        Shard.job_id,
                        func.count(Shard.id),
                        func.coalesce(func.sum(Shard.record_count), 0),
                    )
                    .where(Shard.dataset_id == ds.id, Shard.state != "deleted")
                    .group_by(Shard.job_id)
                )
            }
            return [job_info(r, ds.name, *counts.get(r.id, (0, 0))) for r in rows]

    def commit_job(
        self,
        job: int | JobInfo,
        *,
        expected_version: int | None = None,
        replace: bool = False,
        shards: Collection[str] | None = None,
        require_empty: bool = False,
    ) -> JobInfo:
        """Make every staged shard of the job visible, together, in one transaction.

        Committing a committed job again returns it unchanged (a retried
        barrier task is harmless).

        Parameters
        ----------
        job:
            The job (or its id).
        expected_version:
            Commit only if the dataset is still at this version.
        replace:
            Overwrite: in the same transaction, every shard committed before
            becomes ``deleted`` (its records go), so the dataset is exactly
            this job's shards.
        shards:
            The manifest: URLs of exactly the shards to commit, as the job's
            successful tasks reported them. Other staged shards of the job
            (left by killed or lost attempts) are retired instead.
        require_empty:
            Commit only if the dataset has no committed shard yet.

        Raises
        ------
        DuplicateKeyError
            If a key repeats within the job or exists among committed records;
            nothing becomes visible and the job stays open (abort it).
        CommitConflictError
            If the job was aborted, the dataset moved past ``expected_version``,
            or a shard of the manifest is not staged.
        DatasetExistsError
            ``require_empty`` and another job committed records first.
        JobNotFoundError
            If there is no such job.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        with self._uow(write=True) as s:
            row = self._job_row(s, job_id)
            if row.state == "aborted":
                raise CommitConflictError(
                    f"job {job_id} was aborted; it cannot be committed: start a new job"
                )
            if row.state == "open":
                ds = s.get_one(Dataset, row.dataset_id)
                _jobs.commit(
                    s,
                    ds,
                    row,
                    expected_version=expected_version,
                    replace=replace,
                    shards=shards,
                    require_empty=require_empty,
                )
        return self.job(job_id)

    def abort_job(self, job: int | JobInfo) -> JobInfo:
        """Discard the job: its staged shards become ``deleted``, their records go.

        Raises
        ------
        CommitConflictError
            If the job is already committed.
        JobNotFoundError
            If there is no such job.
        """
        job_id = job.id if isinstance(job, JobInfo) else job
        with self._uow(write=True) as s:
            row = self._job_row(s, job_id)
            if row.state == "committed":
                raise CommitConflictError(
                    f"job {job_id} is committed; remove its shards with remove_shard() instead of aborting it"
                )
            if row.state == "open":
                staged = list(
                    s.execute(
                        select(Shard.id).where(Shard.job_id == job_id, Shard.state == "staged")
                    ).scalars()
                )
                _jobs.retire(s, staged)
                s.execute(
                    update(Job)
                    .where(Job.id == job_id)
                    .values(state="aborted", finished_at=func.now()),
                    execution_options=_NO_SYNC,
                )
        return self.job(job_id)

    def _job_row(self, s: Session, job_id: int) -> Job:
        row = s.get(Job, job_id)
        if row is None:
            raise JobNotFoundError(f"no job {job_id} in catalog {self.url}")
        return row

    def _open_job(self, s: Session, job_id: int, ds: Dataset) -> Job:
        row = s.get(Job, job_id)
        if row is None:
            raise JobNotFoundError(f"no job {job_id} in catalog {self.url}")
        if row.dataset_id != ds.id:
            raise ValueError(f"job {job_id} belongs to another dataset than {ds.name!r}")
        if row.state != "open":
            raise CommitConflictError(
                f"job {job_id} is {row.state}; shards can only be added to an open job"
            )
        return row


def _url_taken(
    prep: PreparedShard, dataset: str, state: str, job_id: int | None
) -> DuplicateKeyError:
    by = f" by job {job_id}" if job_id is not None else ""
    return DuplicateKeyError(
        f"shard {prep.url} is already {state}{by} in dataset {dataset!r}; one file is registered "
        "once per dataset: refresh its rows with reindex(), or remove_shard() it first",
        keys=prep.keys[:1000],
    )
