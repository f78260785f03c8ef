"""PyTorch datasets over a shardcat catalog (the ``torch`` extra: ``pip install shardcat[torch]``).

- :class:`ShardIterableDataset` (``datasets.py``) streams whole shards
  sequentially, split over DataLoader workers and ranks by record count,
  shuffled per epoch by a seed, every sample exactly once per epoch,
  resumable mid-epoch; :class:`MixedDataset` (``mixed.py``) mixes several.
- :class:`ShardLoader` (``loader.py``) is a ``DataLoader`` that knows how far
  each worker got, so its :meth:`~ShardLoader.state_dict` resumes exactly,
  and that brings a dataset's batches from its workers several per trip.
- :class:`KeyDataset` (``keyed.py``) is map-style: ``ds[i]``, ``ds.get(key)``,
  and batches fetched with one query plus coalesced reads.

The datasets pickle small (shard URLs or the catalog's handle) and reopen
their catalog and filesystems in each worker, under fork and spawn alike.
The reading itself is :mod:`shardcat.readers`' (no torch); this package
adapts it to torch's public ``Dataset``/``IterableDataset``/``DataLoader``,
except for one private use of torch's internals, kept in ``_pipe.py``. The
rest of shardcat never imports torch.
"""

from __future__ import annotations

from .._trips import BUNDLE_BATCHES, BUNDLE_SAMPLES, Bundle
from ..readers import PackedBatch, pack_samples
from ._pipe import RESULT_PIPE_BYTES, widen_result_pipe
from .datasets import ShardIterableDataset
from .keyed import KeyDataset, collate_good
from .loader import ShardLoader, unchanged
from .mixed import MixedDataset, MixStream

__all__ = [
    "BUNDLE_BATCHES",
    "BUNDLE_SAMPLES",
    "RESULT_PIPE_BYTES",
    "Bundle",
    "KeyDataset",
    "MixStream",
    "MixedDataset",
    "PackedBatch",
    "ShardIterableDataset",
    "ShardLoader",
    "collate_good",
    "pack_samples",
    "unchanged",
    "widen_result_pipe",
]
