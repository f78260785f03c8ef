"""Reading datasets back for training and batch jobs, without torch.

:class:`SampleStream` streams shards split over readers (DataLoader workers
and ranks) with a seeded, resumable shuffle; :class:`KeySamples` reads
samples by position in a key list; :func:`to_dask_dataframe` turns JSON and
scalar entries into a Dask dataframe. :mod:`shardcat.torch` wraps the first
two as PyTorch datasets.
"""

from __future__ import annotations

from .fields import index_fields
from .frame import flatten, to_dask_dataframe
from .keyed import KeySamples
from .mix import MixedStream
from .packed import BlockRing, PackedBatch, PackedColumn, pack_samples
from .plan import ShardTask, assign, buffered_order, epoch_rng
from .stream import (
    ON_ERROR,
    Decoder,
    OnError,
    SampleStream,
    Skipped,
    apply_decoder,
    check_on_error,
    iter_task_records,
    plan_tasks,
    positions_after,
)

__all__ = [
    "ON_ERROR",
    "BlockRing",
    "Decoder",
    "KeySamples",
    "MixedStream",
    "OnError",
    "PackedBatch",
    "PackedColumn",
    "SampleStream",
    "ShardTask",
    "Skipped",
    "apply_decoder",
    "assign",
    "buffered_order",
    "check_on_error",
    "epoch_rng",
    "flatten",
    "index_fields",
    "iter_task_records",
    "pack_samples",
    "plan_tasks",
    "positions_after",
    "to_dask_dataframe",
]
