"""WebDataset tar shards in place: a streaming indexer, the lookup read, and TARIDX.

Tars are never rewritten: :func:`scan_tar` reads one once, front to back,
and summarises every sample (key, byte range, per-entry payload offset, size
and CRC32C) as a :class:`TarShardInfo` the catalog registers like a native
shard; :func:`read_tar_record` reads a sample back and checks its CRCs;
:class:`Taridx` reads and writes iTar's ``.taridx`` index byte for byte.
See docs/IN-PLACE.md.
"""

from __future__ import annotations

from .convert import (
    MEMBER_DTYPE,
    shared_stems,
    taridx_from_scans,
    taridx_members,
    taridx_of_headers,
    verify_scan,
)
from .errors import (
    DuplicateMemberError,
    NotATarError,
    SplitSampleError,
    TarChecksumError,
    TarError,
    TaridxBlockError,
    TaridxCountError,
    TaridxCrashIdError,
    TaridxError,
    TaridxExtensionIdError,
    TaridxFlagError,
    TaridxLayoutError,
    TaridxMagicError,
    TaridxTruncatedError,
    TaridxVersionError,
    TarMemberNameError,
    TarNumberError,
    TarTruncatedError,
)
from .info import TarEntry, TarSample, TarShardInfo
from .itar import TarHeaders, header_gaps, itar_split, tar_headers
from .read import read_tar_record, read_tar_sample
from .scan import iter_tar_samples, scan_tar, split_member_name
from .taridx import SAMPLE_RANGE_DTYPE, Taridx, read_taridx, stem_groups

__all__ = [
    "MEMBER_DTYPE",
    "SAMPLE_RANGE_DTYPE",
    "DuplicateMemberError",
    "NotATarError",
    "SplitSampleError",
    "TarChecksumError",
    "TarEntry",
    "TarError",
    "TarHeaders",
    "TarMemberNameError",
    "TarNumberError",
    "TarSample",
    "TarShardInfo",
    "TarTruncatedError",
    "Taridx",
    "TaridxBlockError",
    "TaridxCountError",
    "TaridxCrashIdError",
    "TaridxError",
    "TaridxExtensionIdError",
    "TaridxFlagError",
    "TaridxLayoutError",
    "TaridxMagicError",
    "TaridxTruncatedError",
    "TaridxVersionError",
    "header_gaps",
    "itar_split",
    "iter_tar_samples",
    "read_tar_record",
    "read_tar_sample",
    "read_taridx",
    "scan_tar",
    "shared_stems",
    "split_member_name",
    "stem_groups",
    "tar_headers",
    "taridx_from_scans",
    "taridx_members",
    "taridx_of_headers",
    "verify_scan",
]
