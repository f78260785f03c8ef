"""Counting a dataset's keys and summing up the datasets: one statement each, as text.

``shardcat count`` and ``shardcat ls`` ask one statement each. Run as text
on a thread's lookup connection, as lookups are, they load no SQLAlchemy
and no ORM models: most of such a command's time would be those imports.
What the latest version reads is :mod:`shardcat.catalog.visibility`'s
(rendered: :mod:`shardcat.catalog.visibility_text`); a key prefix is a
range of the key index (:mod:`shardcat.catalog.keyrange`).
"""

from __future__ import annotations

import datetime as dt

from ..catalog import visibility_text
from ..catalog.connection import RawConnection
from ..catalog.hashkeys import needs_key_order
from ..catalog.keyrange import KEY_ORDER, prefix_end, sorted_rows
from ..catalog.missing import unknown_dataset
from ..catalog.results import DatasetSummary

__all__ = ["count_keys", "dataset_summaries"]

_LIVE = visibility_text.sql("live", "records AS r", "shards AS s")
_SHARD_LIVE = visibility_text.sql("shard_live", "shards AS s")

# Live records: the latest version's running total (deleted keys are not
# counted); shards, bytes: the committed shards the latest version reads.
_SUMMARIES = (
    "SELECT d.name, d.root_url, d.created_at, count(s.id),"
    " coalesce((SELECT v.total_records FROM dataset_versions v"
    " WHERE v.dataset_id = d.id AND v.number = d.version), 0),"
    " coalesce(sum(s.size_bytes), 0)"
    f" FROM datasets d LEFT OUTER JOIN shards s ON s.dataset_id = d.id AND {_SHARD_LIVE}"
    " GROUP BY d.id, d.name, d.root_url, d.created_at ORDER BY d.name"
)


def _dataset_id(raw: RawConnection, dataset: str) -> int:
    p = raw.placeholder
    found = raw.query(f"SELECT id FROM datasets WHERE name = {p}", (dataset,))
    if not found:
        names = raw.query("SELECT name FROM datasets ORDER BY name", ())
        raise unknown_dataset(dataset, [r[0] for r in names])
    return int(found[0][0])


def count_keys(raw: RawConnection, dataset: str, prefix: str | None = None) -> int:
    """How many keys the dataset's latest version has (starting with ``prefix``): a range of the key index.

    Raises
    ------
    DatasetNotFoundError
        If there is no such dataset.
    """
    p = raw.placeholder
    params: list[object] = [_dataset_id(raw, dataset)]
    if prefix:
        mode = raw.query(f"SELECT key_mode FROM datasets WHERE id = {p}", params)
        needs_key_order(dataset, mode[0][0], "counting keys by prefix")
    key = f"r.key {KEY_ORDER}" if raw.dialect == "postgresql" else "r.key"
    sql = (
        "SELECT count(*) FROM records r JOIN shards s ON s.id = r.shard_id"
        f" WHERE r.dataset_id = {p} AND r.group_id = 0 AND {_LIVE}"  # samples: base records
    )
    if prefix:  # a range of the key index, which the statement names its condition to read
        sql += f" AND {sorted_rows('r')} AND {key} >= {p}"
        params.append(prefix)
        end = prefix_end(prefix)
        if end is not None:
            sql += f" AND {key} < {p}"
            params.append(end)
    return int(raw.query(sql, params)[0][0])


def _utc(value: dt.datetime | str) -> dt.datetime:
    # SQLite keeps timestamps as text, in UTC without a zone; PostgreSQL returns them zoned.
    stamp = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    return stamp.replace(tzinfo=dt.timezone.utc) if stamp.tzinfo is None else stamp


def dataset_summaries(raw: RawConnection) -> list[DatasetSummary]:
    """Every dataset, by name, with the shards, records and bytes its latest version reads."""
    return [
        DatasetSummary(
            name=name,
            root_url=root,
            created_at=_utc(created),
            shard_count=int(shards),
            record_count=int(records),
            size_bytes=int(size),
        )
        for name, root, created, shards, records, size in raw.query(_SUMMARIES, ())
    ]
