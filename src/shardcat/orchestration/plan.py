"""What a write job tells its tasks: picklable, credential-carrying only in memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..storage import join

__all__ = ["SHARDS_PER_PARTITION", "WritePlan"]

SHARDS_PER_PARTITION = 1000
"""Shard numbers are ``partition * 1000 + index``: a partition rolls over at most 1000 times."""


@dataclass(frozen=True)
class WritePlan:
    """Everything a partition task needs to write its shards and stage them.

    ``storage_options`` travel to the workers with the task (that is how
    they get credentials) but are never written to the catalog or shown.
    """

    dataset: str
    root: str
    prefix: str
    job_id: int
    catalog_url: str = field(repr=False)
    shard_size: int = 256_000_000
    max_records: int | None = None
    compression: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    partition_base: int = 0
    """Partitions of this job are numbered from here (``append`` continues after earlier jobs)."""

    def partition_number(self, partition: int) -> int:
        return self.partition_base + partition

    def pattern(self, partition: int) -> str:
        """Names of one partition's shards: ``train-000007-{index:03d}.shard``."""
        return f"{self.prefix}-{self.partition_number(partition):06d}-{{index:03d}}.shard"

    def first_shard_number(self, partition: int) -> int:
        return self.partition_number(partition) * SHARDS_PER_PARTITION

    def shard_url(self, partition: int, index: int) -> str:
        return join(self.root, self.pattern(partition).format(index=index))

    def __repr__(self) -> str:  # never show storage options
        return (
            f"WritePlan(dataset={self.dataset!r}, root={self.root!r}, job_id={self.job_id}, "
            f"shard_size={self.shard_size})"
        )
