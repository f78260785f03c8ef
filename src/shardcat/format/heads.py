"""What the record heads of a shard must say, given its footer: built and compared for many records at once.

A reader that takes records' bytes in bulk (packed training batches made
straight from shard bytes, planned by :mod:`.plans`) checks each head
against the footer's index in one vectorised pass: the bytes the footer
implies (tag, lengths, key hash, entry offsets, sizes and CRCs), a mask of
which bytes it implies, and the heads' own CRCs. The layout is :mod:`.spec`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ChecksumError, FormatError
from .spec import ENTRY_DESC_DTYPE, RECORD_HEAD_DTYPE, RECORD_TAG

__all__ = ["CHECKED", "CHECKED_DESC", "expected_heads", "heads_dtype", "verify_heads"]


def heads_dtype(width: int) -> np.dtype[Any]:
    """A record head and its ``width`` entry descriptors, as one structured row."""
    return np.dtype([("head", RECORD_HEAD_DTYPE), ("desc", ENTRY_DESC_DTYPE, (width,))])


CHECKED = ("tag", "record_length", "key_hash", "head_length", "key_length", "entry_count")
CHECKED_DESC = ("payload_offset", "stored_size", "payload_crc")


def expected_heads(
    recs: np.ndarray, rel: np.ndarray, size: np.ndarray, crc: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The head bytes the footer implies for each record, and the mask of the bytes it implies.

    The head CRC, names, content types, codecs (the footer's specs, the
    same for every record) and reserved bytes are left out (mask 0).
    """
    dtype = heads_dtype(rel.shape[1])
    expect = np.zeros(len(recs), dtype=dtype)
    head, desc = expect["head"], expect["desc"]
    head["tag"] = RECORD_TAG
    head["record_length"] = recs["length"]
    head["key_hash"] = recs["key_hash"]
    head["head_length"] = rel[:, 0]
    head["key_length"] = recs["key_length"]
    head["entry_count"] = rel.shape[1]
    desc["payload_offset"] = rel
    desc["stored_size"] = size
    desc["payload_crc"] = crc
    mask = np.zeros(1, dtype=dtype)
    for name in CHECKED:
        mask["head"][name] = b"\xff" * 4 if name == "tag" else np.iinfo(RECORD_HEAD_DTYPE[name]).max
    for name in CHECKED_DESC:
        mask["desc"][name] = np.iinfo(ENTRY_DESC_DTYPE[name]).max
    as_bytes = expect.view(np.uint8).reshape(len(recs), dtype.itemsize)
    return as_bytes, mask.view(np.uint8).ravel()


def verify_heads(
    whole: np.ndarray,
    heads: np.ndarray,
    crcs: np.ndarray,
    expect: np.ndarray,
    mask: np.ndarray,
    locate: Callable[[int], tuple[str, int]],
) -> None:
    """Record heads at ``heads`` in the block: their CRCs (computed: ``crcs``) and what the footer says.

    Raises
    ------
    ChecksumError
        A head's stored CRC differs from the computed one.
    FormatError
        A head says other than the footer (``expect``, compared where ``mask`` is set).
    """
    rows = whole[heads[:, None] + np.arange(mask.size)]
    stored = np.ascontiguousarray(rows[:, 4:8]).view("<u4").ravel()
    bad = np.flatnonzero(crcs != stored)
    if len(bad):
        r = int(bad[0])
        path, offset = locate(r)
        raise ChecksumError(
            f"record head CRC32C mismatch (stored {int(stored[r]):#010x}, computed "
            f"{int(crcs[r]):#010x})",
            path=path,
            offset=offset,
        )
    differ = ((rows & mask) != expect).any(axis=1)
    if differ.any():
        path, offset = locate(int(np.flatnonzero(differ)[0]))
        raise FormatError("record head does not match the footer index", path=path, offset=offset)
