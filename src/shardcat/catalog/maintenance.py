"""Rebuilding catalog rows from shard footers, and checking the catalog against them.

The shards are the source of truth: everything the catalog stores about a
shard can be recomputed from its header and footer (:func:`prepare_shard`).
Reading files takes time, so the read layer does it outside any transaction
(:mod:`shardcat.reading.checks`); the functions here take a session and only
run SQL with what was read, in the transaction the catalog opens.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import numpy as np
from sqlalchemy import select, text, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from ..errors import (
    CatalogError,
    DuplicateKeyError,
    FormatError,
)
from ..format.spans import unpack_spans
from . import visibility
from .commit import commit
from .datasets import find_dataset
from .deferred_indexes import key_indexes_deferred
from .groups import GroupWrite, check_group_write, list_groups
from .kinds import FileCheck, Summary
from .models import Group, Job, Layout, Record, Shard
from .register import PreparedShard, prepare_shard
from .results import CatalogReport, Problem, ShardRow
from .retire import drop_shards
from .rows import shard_row
from .session import NO_SYNC
from .shards import insert_shard
from .versions import resolve_version

__all__ = [
    "FileCheck",
    "committed_shards",
    "compare_shard",
    "compare_with_catalog",
    "named_samples",
    "reindex_shards",
    "shard_mismatch",
    "shards_by_id",
]


_LISTED = 20
_COMPARED = (
    "kind",
    "shard_number",
    "file_id",
    "format_major",
    "format_minor",
    "flags",
    "alignment",
    "header_crc",
    "record_count",
    "entry_count",
    "size_bytes",
    "payload_bytes",
    "data_crc",
    "footer_crc",
)


def reindex_shards(session: Session, dataset: str, preps: list[PreparedShard]) -> list[ShardRow]:
    """See :meth:`Catalog.reindex`: replace these shards' rows, committed as one job.

    A shard whose footer names a column group (``PreparedShard.group``) gets
    its records registered as that group's: the dataset's live group of that
    name, or a new one added at the reindex's version (new groups in the order
    of their oldest shard's creation, which is the order their jobs wrote
    them). A shard written before footers named groups stays the group its
    old rows said.
    """
    ds = find_dataset(session, dataset)
    job = Job(dataset_id=ds.id, state="open", description="reindex")
    session.add(job)
    session.flush()
    keep_job: dict[int, int | None] = {}
    new_ids: list[int] = []
    groups: dict[str, list[str]] = {}
    first_written: dict[str, dt.datetime] = {}
    # One sort per key index instead of an entry at a time, if the reindex is large.
    with key_indexes_deferred(session, sum(p.record_count for p in preps)):
        for prep in preps:
            old = session.execute(
                select(Shard.id, Shard.job_id, Shard.shard_number).where(
                    Shard.dataset_id == ds.id, Shard.url == prep.url, visibility.committed(Shard)
                )
            ).all()
            group = prep.group
            if group is None and old:
                group = session.execute(
                    select(Group.name)
                    .join(Record, Record.group_id == Group.id)
                    .where(Record.shard_id == old[0].id)
                    .limit(1)
                ).scalar_one_or_none()
            if group is not None:
                try:
                    check_group_write(GroupWrite(group))
                except ValueError as e:
                    raise FormatError(
                        f"{prep.url} names column group {group!r}: {e}", path=prep.url
                    ) from None
                groups.setdefault(group, []).append(prep.url)
                created = prep.columns["created_at"]
                first_written[group] = min(first_written.get(group, created), created)
            drop_shards(session, [o.id for o in old])
            shard_id = insert_shard(session, ds.id, job.id, prep, key_mode=ds.key_mode)
            new_ids.append(shard_id)
            if old:
                keep_job[shard_id] = old[0].job_id
                if prep.columns["kind"] == "tar" and old[0].shard_number is not None:
                    # A tar's number came from its URL when it was indexed: it stays.
                    session.execute(
                        update(Shard)
                        .where(Shard.id == shard_id)
                        .values(shard_number=old[0].shard_number),
                        execution_options=NO_SYNC,
                    )
    live = [g.name for g in list_groups(session, ds.id) if g.dropped_version is None]
    known = {g: i for i, g in enumerate(live)}
    order = sorted(groups, key=lambda g: (known.get(g, len(known)), first_written[g], g))
    # A new version with fresh rows: versions before it no longer read these
    # shards through their old rows (docs/LIFECYCLE.md).
    commit(session, ds, job, operation="reindex", groups={g: groups[g] for g in order})
    for shard_id, old_job in keep_job.items():
        # The shard is the same file: it stays attributed to the job that wrote it.
        session.execute(
            update(Shard).where(Shard.id == shard_id).values(job_id=old_job),
            execution_options=NO_SYNC,
        )
    return [shard_row(session.get_one(Shard, i, populate_existing=True), ds.name) for i in new_ids]


_CATALOG_ROWS = text(
    "SELECT r.key, r.key_hash, r.byte_offset, r.byte_length, r.spans, l.signature "
    "FROM records r LEFT JOIN layouts l ON l.id = r.layout_id WHERE r.shard_id = :shard"
)


def named_samples(
    session: Session, shard_ids: list[int]
) -> dict[int, list[tuple[str, int, list[str]]]]:
    """Per shard, its records' ``(key, offset, entry names)`` in file order: a folder group's files.

    Every record, whatever version removed it: ``verify`` checks what any kept version reads.
    """
    import json

    out: dict[int, list[tuple[str, int, list[str]]]] = {i: [] for i in shard_ids}
    names: dict[str, list[str]] = {}
    rows = session.execute(
        select(Record.shard_id, Record.key, Record.byte_offset, Layout.signature)
        .join(Layout, Layout.id == Record.layout_id)
        .where(Record.shard_id.in_(shard_ids))
        .order_by(Record.shard_id, Record.byte_offset)
    )
    for shard_id, key, offset, signature in rows:
        if signature not in names:
            names[signature] = [entry[0] for entry in json.loads(signature)]
        # A folder group's rows have key text: only native shards may be hash-only.
        out[shard_id].append((str(key), int(offset), names[signature]))
    return out


def committed_shards(
    session: Session, dataset: str, version: int | str | None = None
) -> list[Shard]:
    """The dataset's committed shard rows (those ``version`` reads), in the order verify reports them.

    Without ``version``: every committed shard, i.e. every file a kept version reads.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    ds = find_dataset(session, dataset)
    q = select(Shard).where(Shard.dataset_id == ds.id, visibility.committed(Shard))
    if version is not None:
        q = q.where(visibility.shard_visible_at(Shard, resolve_version(session, ds, version)))
    return list(session.execute(q.order_by(Shard.shard_number, Shard.url, Shard.id)).scalars())


def shards_by_id(session: Session, shard_ids: list[int]) -> list[Shard]:
    """The shard rows of ``shard_ids`` (by primary key), in the order given; ids not found are left out."""
    rows = {
        r.id: r for r in session.execute(select(Shard).where(Shard.id.in_(shard_ids))).scalars()
    }
    return [rows[i] for i in shard_ids if i in rows]


def compare_shard(
    session: Session, shard: Shard, check: FileCheck
) -> tuple[list[Problem], int, int]:
    """One shard's problems (its file's, then its footer against its rows), records checked, bytes.

    The one comparison both verify paths use: the client's (:func:`compare_with_catalog`)
    and the Dask job's, whose tasks each compare their own shards. Only this shard's
    catalog rows are read (``records`` by ``shard_id``, the primary key's first column).
    """
    info, file_problems, checked = check
    problems = list(file_problems)
    if info is None:
        return problems, checked, 0
    try:
        problems.extend(_compare(session, shard, info))
    except (CatalogError, SQLAlchemyError):
        raise  # the catalog failed, not the shard
    except Exception as e:  # as in reading.checks.check_files: report the shard, check the next
        problems.append(
            Problem(
                shard.url,
                "unreadable",
                f"the footer cannot be compared with the catalog: {type(e).__name__}: {e}",
            )
        )
    return problems, checked, info.size


def compare_with_catalog(
    session: Session, dataset: str, shards: list[Shard], checks: list[FileCheck]
) -> CatalogReport:
    """See :meth:`Catalog.verify`: each shard's footer against its catalog rows, and the report."""
    problems: list[Problem] = []
    records = 0
    size = 0
    for shard, check in zip(shards, checks):
        found, checked, nbytes = compare_shard(session, shard, check)
        problems.extend(found)
        records += checked
        size += nbytes
    return CatalogReport(dataset, len(shards), records, size, problems)


def _compare(s: Session, shard: Shard, info: Summary) -> list[Problem]:
    """Disagreements between a shard's catalog rows and its footer."""
    url = shard.url
    try:
        prep = prepare_shard(info)
    except (DuplicateKeyError, FormatError) as e:
        return [Problem(url, "corrupt", f"the footer is inconsistent: {e}")]
    problems: list[Problem] = []
    diffs = [
        f"{name} (catalog {getattr(shard, name)!r}, footer {prep.columns[name]!r})"
        for name in _COMPARED
        if getattr(shard, name) != prep.columns[name]
        # A tar's number came from its URL at indexing (index_tar), not from its bytes.
        and not (name == "shard_number" and shard.kind == "tar")
    ]
    if diffs:
        problems.append(shard_mismatch(url, diffs))
    signatures = [lay.signature for lay in prep.layouts]
    # Spans are compared by what they say, not by their bytes: a catalog written before
    # the compact packing holds the fixed ones (format/spans.py). The footer's side is its
    # own entries: each record's run of (offset, size, crc) as the footer holds it.
    counts = {lay.signature: len(lay.entries) for lay in prep.layouts}
    footer_signatures = [signatures[i] for i in prep.layout_index.tolist()]
    footer = set(
        zip(
            prep.keys,
            prep.key_hashes.tolist(),
            prep.offsets.tolist(),
            prep.lengths.tolist(),
            _footer_spans(info),
            footer_signatures,
        )
    )
    # A hash-only dataset's rows have no key text: each takes the key the footer has at its
    # offset, so hash, position, length, spans and layout are what is compared (a row at an
    # offset the footer does not list keeps None, and is named by its offset).
    at = dict(zip(prep.offsets.tolist(), prep.keys))
    rows = [
        (
            at.get(int(o), f"<no key at offset {int(o)}>") if k is None else k,
            int(h),
            int(o),
            int(n),
            _located(bytes(sp), counts.get(sig)),
            sig,
        )
        for k, h, o, n, sp, sig in s.execute(_CATALOG_ROWS, {"shard": shard.id})
    ]
    catalog = set(rows)
    # One row per record: a plain records' primary key (shard_id, byte_offset) refuses a
    # second, a partitioned one has none (catalog/partitions.py), so it is checked here.
    per_offset = Counter(row[2] for row in rows)
    twice = sorted({row[0] for row in rows if per_offset[row[2]] > 1})
    if twice:
        problems.append(
            Problem(
                url,
                "duplicate-row",
                f"{len(twice)} record(s) have more than one catalog row at their offset: "
                f"{_keys(twice)}; reindex the shard (its rows are made again from its footer)",
                tuple(twice),
            )
        )
    extra = sorted({row[0] for row in catalog - footer})
    absent = sorted({row[0] for row in footer - catalog})
    if extra:
        problems.append(
            Problem(
                url,
                "row-not-in-footer",
                f"{len(extra)} catalog row(s) match no record of the footer: "
                f"{_keys(extra)}; reindex the shard",
                tuple(extra),
            )
        )
    if absent:
        problems.append(
            Problem(
                url,
                "record-not-in-catalog",
                f"{len(absent)} record(s) of the footer have no catalog row: "
                f"{_keys(absent)}; reindex the shard",
                tuple(absent),
            )
        )
    return problems


def _footer_spans(info: Summary) -> list[tuple[tuple[int, int, int], ...]]:
    """Each footer record's entries as ``(offset, size, crc)`` triples, in record order."""
    entries = info.entries
    triples = list(
        zip(
            entries["offset"].tolist(),
            entries["size"].tolist(),
            entries["crc"].tolist(),
        )
    )
    ends = np.cumsum(info.records["entry_count"], dtype=np.int64).tolist()
    return [tuple(triples[start:end]) for start, end in zip([0, *ends[:-1]], ends)]


def _located(spans: bytes, count: int | None) -> tuple[tuple[int, int, int], ...] | bytes:
    """A row's spans unpacked for ``count`` entries; its bytes where they are not that."""
    if count is None:
        return spans
    try:
        return tuple(unpack_spans(spans, count))
    except ValueError:
        return spans


def shard_mismatch(url: str, diffs: list[str]) -> Problem:
    """The problem of a shard row that disagrees with its file (``diffs``: each column's)."""
    return Problem(
        url,
        "shard-mismatch",
        "the shard's row disagrees with its file: "
        + ", ".join(diffs)
        + "; the file was replaced or rewritten: reindex it",
    )


def _keys(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:_LISTED])
    return shown + (f" and {len(keys) - _LISTED} more" if len(keys) > _LISTED else "")
