"""Rebuilding catalog rows from shard footers, and checking the catalog against them.

The shards are the source of truth: everything the catalog stores about a
shard can be recomputed from its header and footer (:func:`prepare_shard`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, text, update
from sqlalchemy.exc import SQLAlchemyError

from ..errors import (
    CatalogError,
    DuplicateKeyError,
    FormatError,
    ShardcatError,
    ShardNotFoundError,
)
from ..format import ShardInfo
from ..storage import expand_braces, redact
from ..storage.shards import ShardReader
from . import jobs as _jobs
from .models import Job, Shard
from .register import PreparedShard, prepare_shard
from .results import CatalogReport, Problem, ShardRow
from .rows import shard_row

if TYPE_CHECKING:
    from .catalog import Catalog

__all__ = ["read_footers", "reindex_shards", "verify_dataset"]

_LISTED = 20
_COMPARED = (
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


def read_footers(urls: list[str], storage_options: Any, workers: int) -> list[ShardInfo]:
    """Each shard's summary from its header and footer (concurrently for several shards).

    Raises
    ------
    ShardNotFoundError, FormatError
        For the first shard that is missing or unreadable.
    """

    def one(url: str) -> ShardInfo:
        with ShardReader(url, storage_options=storage_options) as reader:
            return reader.info

    if len(urls) <= 1 or workers <= 1:
        return [one(u) for u in urls]
    with ThreadPoolExecutor(max_workers=min(workers, len(urls))) as pool:
        return list(pool.map(one, urls))


def reindex_shards(
    cat: Catalog, dataset: str, urls: str | Iterable[str], *, workers: int
) -> list[ShardRow]:
    """See :meth:`Catalog.reindex`."""
    url_list = expand_braces(urls) if isinstance(urls, str) else list(urls)
    if len(set(url_list)) != len(url_list):
        raise ValueError("reindex() got the same shard URL twice")
    infos = read_footers(url_list, cat.storage_options, workers)
    preps: list[PreparedShard] = []
    for url, info in zip(url_list, infos):
        prep = prepare_shard(info)
        prep.url = redact(url)  # as the caller names it, not as the reader resolved it
        preps.append(prep)
    with cat._uow(write=True) as s:
        ds = cat._dataset(s, dataset)
        job = Job(dataset_id=ds.id, state="open", description="reindex")
        s.add(job)
        s.flush()
        keep_job: dict[int, int | None] = {}
        new_ids: list[int] = []
        for prep in preps:
            old = s.execute(
                select(Shard.id, Shard.job_id).where(
                    Shard.dataset_id == ds.id, Shard.url == prep.url, Shard.state == "committed"
                )
            ).all()
            _jobs.drop_shards(s, [o.id for o in old])
            shard_id = cat._insert(s, ds.id, job.id, prep)
            new_ids.append(shard_id)
            if old:
                keep_job[shard_id] = old[0].job_id
        _jobs.commit(s, ds, job)
        for shard_id, old_job in keep_job.items():
            # The shard is the same file: it stays attributed to the job that wrote it.
            s.execute(
                update(Shard).where(Shard.id == shard_id).values(job_id=old_job),
                execution_options={"synchronize_session": False},
            )
        return [shard_row(s.get_one(Shard, i, populate_existing=True), ds.name) for i in new_ids]


_CATALOG_ROWS = text(
    "SELECT r.key, r.key_hash, r.byte_offset, r.byte_length, r.spans, l.signature "
    "FROM records r LEFT JOIN layouts l ON l.id = r.layout_id WHERE r.shard_id = :shard"
)


def verify_dataset(
    cat: Catalog,
    dataset: str,
    *,
    workers: int,
    on_shard: Callable[[str, int], None] | None = None,
) -> CatalogReport:
    """See :meth:`Catalog.verify`."""
    with cat._uow() as s:
        ds = cat._dataset(s, dataset)
        shards = list(
            s.execute(
                select(Shard)
                .where(Shard.dataset_id == ds.id, Shard.state == "committed")
                .order_by(Shard.shard_number, Shard.url, Shard.id)
            ).scalars()
        )

    def read_and_verify(url: str) -> tuple[ShardInfo | None, list[Problem], int]:
        try:
            reader = ShardReader(url, storage_options=cat.storage_options)
        except ShardNotFoundError as e:
            return None, [Problem(url, "missing", f"the shard file does not exist: {e}")], 0
        except (ShardcatError, OSError) as e:
            return None, [Problem(url, "unreadable", str(e))], 0
        with reader:
            try:
                info = reader.info
            except (ShardcatError, OSError) as e:
                return None, [Problem(url, "unreadable", str(e))], 0
            try:
                checked = reader.verify().records
            except (FormatError, OSError) as e:
                # The footer is still compared with the catalog.
                return info, [Problem(url, "corrupt", str(e))], 0
        return info, [], checked

    def check_file(shard: Shard) -> tuple[ShardInfo | None, list[Problem], int]:
        url = shard.url
        try:
            return read_and_verify(url)
        except Exception as e:
            # The last line of defence: whatever one shard does, it is reported and the
            # others are still checked (a shard is data from outside, errors or not).
            return None, [Problem(url, "unreadable", f"{type(e).__name__}: {e}")], 0
        finally:
            if on_shard is not None:
                on_shard(url, len(shards))

    if len(shards) > 1 and workers > 1:
        with ThreadPoolExecutor(max_workers=min(workers, len(shards))) as pool:
            results = list(pool.map(check_file, shards))
    else:
        results = [check_file(sh) for sh in shards]

    problems: list[Problem] = []
    records = 0
    size = 0
    with cat._uow() as s:
        for shard, (info, file_problems, checked) in zip(shards, results):
            problems.extend(file_problems)
            records += checked
            if info is None:
                continue
            size += info.size
            try:
                problems.extend(_compare(s, shard, info))
            except (CatalogError, SQLAlchemyError):
                raise  # the catalog failed, not the shard
            except Exception as e:  # as in check_file: report the shard, check the next
                problems.append(
                    Problem(
                        shard.url,
                        "unreadable",
                        f"the footer cannot be compared with the catalog: {type(e).__name__}: {e}",
                    )
                )
    return CatalogReport(dataset, len(shards), records, size, problems)


def _compare(s: Any, shard: Shard, info: ShardInfo) -> list[Problem]:
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
    ]
    if diffs:
        problems.append(
            Problem(
                url,
                "shard-mismatch",
                "the shard's row disagrees with its file: "
                + ", ".join(diffs)
                + "; the file was replaced or rewritten: reindex it",
            )
        )
    signatures = [lay.signature for lay in prep.layouts]
    footer = set(
        zip(
            prep.keys,
            prep.key_hashes.tolist(),
            prep.offsets.tolist(),
            prep.lengths.tolist(),
            prep.spans.tolist(),
            [signatures[i] for i in prep.layout_index.tolist()],
        )
    )
    catalog = {
        (k, int(h), int(o), int(n), bytes(sp), sig)
        for k, h, o, n, sp, sig in s.execute(_CATALOG_ROWS, {"shard": shard.id})
    }
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


def _keys(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:_LISTED])
    return shown + (f" and {len(keys) - _LISTED} more" if len(keys) > _LISTED else "")
