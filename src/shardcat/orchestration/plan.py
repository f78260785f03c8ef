"""What a write job tells its tasks: picklable, credential-carrying only in memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..storage import join, shard_name

if TYPE_CHECKING:
    from ..reading import CatalogHandle

__all__ = ["MAX_ATTEMPTS", "SHARDS_PER_PARTITION", "WritePlan"]

SHARDS_PER_PARTITION = 1000
"""Shard numbers are ``partition * 1000 + index``: a partition rolls over at most 1000 times."""

MAX_ATTEMPTS = 100
"""Names a shard may take across retries of its task (``-r1`` ... ``-r99``)."""


@dataclass(frozen=True)
class WritePlan:
    """Everything a partition task needs to write its shards and stage them.

    ``storage_options`` travel to the workers with the task (that is how
    they get credentials) but are never written to the catalog or shown;
    so does ``catalog``, whose URL carries the database password.
    """

    dataset: str
    root: str
    prefix: str
    job_id: int
    catalog: CatalogHandle = field(repr=False)
    shard_size: int = 256_000_000
    max_records: int | None = None
    compression: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    partition_base: int = 0
    """Partitions of this job are numbered from here (``append`` continues after earlier jobs)."""
    fields: tuple[str, ...] = ()
    """Declared fields whose values each task stores, read from ``fields_entry`` of each sample."""
    fields_entry: str = "json"

    def partition_number(self, partition: int) -> int:
        return self.partition_base + partition

    def names(self, partition: int, index: int) -> list[str]:
        """The names shard ``index`` of ``partition`` may take, first choice first."""
        number = self.partition_number(partition)
        return [
            shard_name(self.prefix, self.job_id, number, index, attempt)
            for attempt in range(MAX_ATTEMPTS)
        ]

    def first_shard_number(self, partition: int) -> int:
        return self.partition_number(partition) * SHARDS_PER_PARTITION

    def shard_url(self, partition: int, index: int) -> str:
        """The first-choice URL of a shard (a retried task may have had to take another)."""
        return join(self.root, self.names(partition, index)[0])

    def __repr__(self) -> str:  # never show storage options
        return (
            f"WritePlan(dataset={self.dataset!r}, root={self.root!r}, job_id={self.job_id}, "
            f"shard_size={self.shard_size})"
        )
