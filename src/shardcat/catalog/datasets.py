"""Dataset rows: find, create, list, summarise and delete them, inside a unit of work.

Each function takes the session of the caller's transaction; the
:class:`~shardcat.catalog.SqlCatalog` opens it and documents the public methods.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .._redact import redact_url as redact
from ..errors import DatasetExistsError, Hint, InvalidNameError
from ..format.spec import FORMAT_VERSION
from . import visibility
from .changes import note_dataset
from .missing import unknown_dataset
from .models import (
    Dataset,
    DatasetField,
    Job,
    Layout,
    LayoutEntry,
    RecordField,
    Shard,
)
from .models import Record as RecordRow
from .results import DatasetInfo, EntryKind
from .rows import dataset_info
from .session import NO_SYNC

__all__ = [
    "check_name",
    "create_dataset",
    "delete_dataset",
    "describe_dataset",
    "drop_unused_dataset",
    "entry_kinds",
    "find_dataset",
    "list_datasets",
    "set_root",
]


def check_name(name: Any) -> None:
    """Refuse a dataset name no catalog can hold (NUL on PostgreSQL: the driver's error).

    Raises
    ------
    InvalidNameError
        Not a string of 1 to 255 characters of valid Unicode text.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 255:
        raise InvalidNameError(
            f"dataset name {str(name)[:40]!r} must be a string of 1 to 255 characters"
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidNameError(
            f"dataset name {name!r} is not valid Unicode text ({e.reason}): decode it "
            "with errors='replace', or pick another name"
        ) from None


def find_dataset(session: Session, name: str) -> Dataset:
    """The dataset's row.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset (the message lists the known ones).
    InvalidNameError
        If no catalog could hold the name.
    """
    check_name(name)
    row = session.execute(select(Dataset).where(Dataset.name == name)).scalar_one_or_none()
    if row is None:
        raise unknown_dataset(
            name, list(session.execute(select(Dataset.name).order_by(Dataset.name)).scalars())
        )
    note_dataset(session, row.id, row.name, row.root_url)
    return row


def describe_dataset(session: Session, name: str) -> DatasetInfo:
    """See :meth:`Catalog.dataset`."""
    return dataset_info(find_dataset(session, name))


def create_dataset(
    session: Session,
    name: str,
    root_url: str,
    properties: dict[str, Any] | None,
    *,
    exist_ok: bool,
    key_mode: str = "text",
) -> DatasetInfo:
    """See :meth:`Catalog.create_dataset`."""
    check_name(name)
    existing = session.execute(select(Dataset).where(Dataset.name == name)).scalar_one_or_none()
    if existing is None:
        row = Dataset(
            name=name,
            root_url=redact(root_url),
            format_major=FORMAT_VERSION[0],
            format_minor=FORMAT_VERSION[1],
            properties=dict(properties or {}),
            key_mode=key_mode,
        )
        try:
            # Another process may create the same name at the same moment
            # (PostgreSQL): the loser sees its row, as if it had come first.
            with session.begin_nested():
                session.add(row)
                session.flush()
        except IntegrityError:  # the savepoint's rollback expunged the row
            existing = session.execute(select(Dataset).where(Dataset.name == name)).scalar_one()
        else:
            session.refresh(row)
            return dataset_info(row)
    if exist_ok and existing.key_mode != key_mode:
        raise DatasetExistsError(
            f"dataset {name!r} exists already with keys={existing.key_mode!r}, not {key_mode!r}",
            hint=Hint(
                python=f"pass keys={existing.key_mode!r}, or pick another name",
                cli=f"pass --keys {existing.key_mode}, or pick another name",
            ),
        )
    if exist_ok:
        return dataset_info(existing)
    raise DatasetExistsError(
        f"dataset {name!r} exists already (root {existing.root_url})",
        hint=Hint(
            python="pick another name, pass exist_ok=True, or delete it first",
            cli=f"pick another name, or delete it first with `shardcat delete {name}`",
        ),
    )


def list_datasets(session: Session) -> list[DatasetInfo]:
    """Every dataset, by name."""
    return [
        dataset_info(d) for d in session.execute(select(Dataset).order_by(Dataset.name)).scalars()
    ]


def set_root(session: Session, name: str, root_url: str) -> None:
    """See :meth:`Catalog.set_dataset_root`."""
    ds = find_dataset(session, name)
    ds.root_url = redact(root_url)
    note_dataset(session, ds.id, ds.name, ds.root_url)


def delete_dataset(session: Session, name: str, *, missing_ok: bool) -> None:
    """See :meth:`Catalog.delete_dataset`."""
    row = session.execute(select(Dataset).where(Dataset.name == name)).scalar_one_or_none()
    if row is None:
        if not missing_ok:
            find_dataset(session, name)  # raises, naming the known datasets
        return
    ds = row.id
    layouts = select(Layout.id).where(Layout.dataset_id == ds)
    for stmt in (
        delete(RecordRow).where(RecordRow.dataset_id == ds),
        delete(RecordField).where(RecordField.dataset_id == ds),
        delete(DatasetField).where(DatasetField.dataset_id == ds),
        delete(LayoutEntry).where(LayoutEntry.layout_id.in_(layouts)),
        delete(Layout).where(Layout.dataset_id == ds),
        delete(Shard).where(Shard.dataset_id == ds),
        delete(Job).where(Job.dataset_id == ds),
        delete(Dataset).where(Dataset.id == ds),
    ):
        session.execute(stmt, execution_options=NO_SYNC)


def drop_unused_dataset(session: Session, name: str, job_id: int) -> bool:
    """Delete the dataset if job ``job_id`` was all it ever had; whether it did.

    That is: no committed version, no other job, no shard of another job nor a
    live shard of this one (an aborted job's shards are ``deleted``). The
    dataset's row is locked first, so a job beginning meanwhile either comes
    first (and keeps the dataset) or waits for the delete.
    """
    row = session.execute(
        select(Dataset).where(Dataset.name == name).with_for_update()
    ).scalar_one_or_none()
    if row is None or row.version != 0:
        return False
    others = session.execute(
        select(Job.id).where(Job.dataset_id == row.id, Job.id != job_id).limit(1)
    ).first()
    used = session.execute(
        select(Shard.id)
        .where(
            Shard.dataset_id == row.id,
            (Shard.job_id != job_id) | Shard.job_id.is_(None) | (Shard.state != "deleted"),
        )
        .limit(1)
    ).first()
    if others is not None or used is not None:
        return False
    delete_dataset(session, name, missing_ok=True)
    return True


def entry_kinds(session: Session, name: str, version: int | None = None) -> list[EntryKind]:
    """The dataset's entry kinds with the committed records holding each (from the layouts).

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    dataset_id = find_dataset(session, name).id
    per_layout = (
        select(RecordRow.layout_id, func.count().label("n"))
        .join(Shard, Shard.id == RecordRow.shard_id)
        .where(
            RecordRow.dataset_id == dataset_id,
            visibility.live(RecordRow, Shard)
            if version is None
            else visibility.visible_at(RecordRow, Shard, version),
        )
        .group_by(RecordRow.layout_id)
        .subquery()
    )
    q = (
        select(
            LayoutEntry.name,
            LayoutEntry.content_type,
            LayoutEntry.codec,
            func.sum(per_layout.c.n),
        )
        .join(per_layout, per_layout.c.layout_id == LayoutEntry.layout_id)
        .group_by(LayoutEntry.name, LayoutEntry.content_type, LayoutEntry.codec)
        .order_by(LayoutEntry.name, LayoutEntry.content_type, LayoutEntry.codec)
    )
    return [
        EntryKind(name=n, content_type=t, codec=c, record_count=int(k))
        for n, t, c, k in session.execute(q)
    ]
