"""WebDataset tar shards in place: a streaming indexer, the lookup read, and TARIDX.

Tars are never rewritten: :func:`scan_tar` reads one once, front to back,
and summarises every sample (key, byte range, per-entry payload offset, size
and CRC32C) as a :class:`TarShardInfo` the catalog registers like a native
shard; :func:`read_tar_record` reads a sample back and checks its CRCs.
See docs/TAR.md.
"""

from __future__ import annotations

from .errors import (
    DuplicateMemberError,
    NotATarError,
    SplitSampleError,
    TarChecksumError,
    TarError,
    TarMemberNameError,
    TarNumberError,
    TarTruncatedError,
)
from .info import TarEntry, TarSample, TarShardInfo
from .read import read_tar_record, read_tar_sample
from .scan import iter_tar_samples, scan_tar, split_member_name

__all__ = [
    "DuplicateMemberError",
    "NotATarError",
    "SplitSampleError",
    "TarChecksumError",
    "TarEntry",
    "TarError",
    "TarMemberNameError",
    "TarNumberError",
    "TarSample",
    "TarShardInfo",
    "TarTruncatedError",
    "iter_tar_samples",
    "read_tar_record",
    "read_tar_sample",
    "scan_tar",
    "split_member_name",
]
