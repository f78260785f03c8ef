"""ORM rows → the frozen value objects the API returns."""

from __future__ import annotations

import datetime as dt

from .models import Dataset, Job, Shard
from .results import DatasetInfo, JobInfo, ShardRow

__all__ = ["dataset_info", "job_info", "shard_row", "utc"]


def dataset_info(row: Dataset) -> DatasetInfo:
    return DatasetInfo(
        id=row.id,
        name=row.name,
        root_url=row.root_url,
        format_version=(row.format_major, row.format_minor),
        version=int(row.version),
        properties=dict(row.properties or {}),
        created_at=utc(row.created_at),
        keys=row.key_mode,
    )


def job_info(row: Job, dataset: str, shards: int = 0, records: int = 0) -> JobInfo:
    return JobInfo(
        id=row.id,
        dataset=dataset,
        state=row.state,
        version=row.version,
        description=row.description,
        properties=row.properties,
        created_at=utc(row.created_at),
        finished_at=utc(row.finished_at) if row.finished_at else None,
        shard_count=shards,
        record_count=records,
    )


def shard_row(row: Shard, dataset: str) -> ShardRow:
    return ShardRow(
        id=row.id,
        dataset=dataset,
        url=row.url,
        state=row.state,
        job_id=row.job_id,
        shard_number=row.shard_number,
        record_count=int(row.record_count),
        size_bytes=int(row.size_bytes),
        payload_bytes=int(row.payload_bytes),
        file_id=row.file_id,
        format_version=(row.format_major, row.format_minor),
        created_at=utc(row.created_at),
        header_crc=int(row.header_crc),
        data_crc=int(row.data_crc),
        footer_crc=int(row.footer_crc),
        metadata=dict(row.user_metadata or {}),
        kind=row.kind,
        added_version=None if row.added_version is None else int(row.added_version),
        removed_version=None if row.removed_version is None else int(row.removed_version),
    )


def utc(value: dt.datetime) -> dt.datetime:
    """Timestamps are UTC; SQLite returns them without a zone."""
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value
