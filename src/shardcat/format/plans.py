"""Where a shard's records and payloads lie, planned from its footer for reads in bulk.

A reader that copies many records' bytes at once (packed training batches,
:mod:`shardcat.readers.direct`) reads each record as ``2P + 1`` pieces: the
gap before its first column payload (its head, padding, other entries),
then each of its ``P`` column payloads (entries whose values are their
bytes) followed by the gap after it. The footer index (CRC-checked when the
shard opened) says where every piece lies; :func:`plan_records` computes
them, with what each record's head must say (:mod:`.heads`), for every
chosen record at once. The layout is :mod:`.spec`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .entries import decodes_to_bytes
from .footer import Footer
from .heads import expected_heads
from .spec import Codec

__all__ = ["RecordPlan", "plan_records"]

_I8 = np.int64


@dataclass(slots=True)
class RecordPlan:
    """Chosen records of one shard (file order), as pieces to read, and what to check.

    Every array has one row per chosen record. A record's last gap runs to
    the next chosen record (over records not chosen), or to its own end
    (``tail``) for the last: so consecutive chosen records read as one run
    of bytes, and a record read alone ends its last gap at ``tail``.
    """

    names: tuple[str, ...]
    kinds: tuple[str, ...]  # content type per name
    packed: tuple[bool, ...]  # per name: its values are its bytes (a column)
    start: np.ndarray  # record offsets
    end: np.ndarray  # record ends
    pieces: np.ndarray  # (records, 2P + 1) lengths
    tail: np.ndarray  # last gap up to the record's own end
    value_piece: tuple[int, ...]  # per non-column name: the gap piece holding it
    value_delta: np.ndarray  # (records, V) offset in that piece
    sizes: np.ndarray  # (records, names) payload sizes
    crcs: np.ndarray  # (records, names) payload CRCs
    keys: list[str]
    head_length: np.ndarray
    # What each record's head and entry descriptors must hold (from the footer's rows), as
    # bytes: (records, head bytes), and which of those bytes are compared (``mask``).
    expect: np.ndarray
    mask: np.ndarray

    @property
    def layout(self) -> tuple[tuple[str, ...], tuple[str, ...], int]:
        """Plans of one layout lay their records out alike: names, content types, head bytes."""
        return self.names, self.kinds, int(self.expect.shape[1])


def plan_records(
    footer: Footer, rows: np.ndarray, entries: Sequence[str] | None
) -> RecordPlan | str:
    """The plan of records ``rows`` (indices, file order) of ``footer``'s shard, or why there is none.

    A plan needs every record to hold the same entries, uncompressed;
    ``entries`` chooses some of them (None: all). Otherwise the reason is
    returned: such records are decoded one by one instead.
    """
    recs = footer.records
    n = len(recs)
    counts = recs["entry_count"]
    width = int(counts[0]) if n else 0
    if not len(rows) or width == 0 or bool((counts != width).any()):
        return "records have different entries"
    spec = footer.entries["spec"].reshape(n, width)
    if bool((spec != spec[0]).any()):
        return "records have different entries"
    wanted = None if entries is None else frozenset(entries)
    chosen = [
        (c, footer.specs[s])
        for c, s in enumerate(spec[0].tolist())
        if wanted is None or footer.specs[s].name in wanted
    ]
    if any(sp.codec is not Codec.NONE for _, sp in chosen):
        return "compressed entries"
    names = tuple(sp.name for _, sp in chosen)
    kinds = tuple(sp.content_type for _, sp in chosen)
    packed = tuple(decodes_to_bytes(k) for k in kinds)
    cols = np.asarray([c for c, _ in chosen], dtype=_I8)
    pcols = cols[list(packed)] if chosen else cols
    mine = recs[rows]
    start = mine["offset"].astype(_I8)
    end = start + mine["length"].astype(_I8)
    rel = footer.entries["offset"].reshape(n, width)[rows].astype(_I8)
    size = footer.entries["size"].reshape(n, width)[rows].astype(_I8)
    crc = footer.entries["crc"].reshape(n, width)[rows]
    nxt = np.concatenate([start[1:], end[-1:]])
    p_start = start[:, None] + rel[:, pcols]
    p_end = p_start + size[:, pcols]
    gap_from = np.concatenate([start[:, None], p_end], axis=1)  # (K, P + 1)
    gap_to = np.concatenate([p_start, nxt[:, None]], axis=1)
    pieces = np.empty((len(rows), 2 * len(pcols) + 1), dtype=_I8)
    pieces[:, 0::2] = gap_to - gap_from
    pieces[:, 1::2] = p_end - p_start
    # A non-column entry lies in the gap after the column payloads that come before it.
    value_cols = [c for c, p in zip(cols.tolist(), packed) if not p]
    gaps = [int((pcols < c).sum()) for c in value_cols]
    value_delta = (
        np.stack([start + rel[:, c] - gap_from[:, g] for c, g in zip(value_cols, gaps)], axis=1)
        if value_cols
        else np.empty((len(rows), 0), dtype=_I8)
    )
    keep = np.zeros(n, dtype=bool)
    keep[rows] = True
    expect, mask = expected_heads(mine, rel, size, crc)
    return RecordPlan(
        names=names,
        kinds=kinds,
        packed=packed,
        start=start,
        end=end,
        pieces=pieces,
        tail=end - gap_from[:, -1],
        value_piece=tuple(2 * g for g in gaps),
        value_delta=value_delta,
        sizes=np.ascontiguousarray(size[:, cols]),
        crcs=np.ascontiguousarray(crc[:, cols]),
        keys=[k for k, chosen_ in zip(footer.keys(), keep.tolist()) if chosen_],
        head_length=rel[:, 0],
        expect=expect,
        mask=mask,
    )
