"""What a write job tells its tasks: picklable, credential-carrying only in memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..storage import join

__all__ = ["WritePlan"]


@dataclass(frozen=True)
class WritePlan:
    """Everything a partition task needs to write its shards and stage them.

    ``storage_options`` travel to the workers with the task (that is how
    they get credentials) but are never written to the catalog or logged.
    """

    dataset: str
    root: str
    prefix: str
    job_id: int
    catalog_url: str
    shard_size: int
    max_records: int | None = None
    compression: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    partition_base: int = 0

    def pattern(self, partition: int) -> str:
        """Name pattern of the shards of one partition: ``train-000007-{number:03d}.shard``."""
        return f"{self.prefix}-{self.partition_base + partition:06d}-{{number:03d}}.shard"

    def shard_url(self, partition: int, index: int) -> str:
        return join(self.root, self.pattern(partition).format(number=index))

    def __repr__(self) -> str:  # never show storage options
        return (
            f"WritePlan(dataset={self.dataset!r}, root={self.root!r}, job_id={self.job_id}, "
            f"shard_size={self.shard_size})"
        )
