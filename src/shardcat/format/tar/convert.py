"""Between scanned tars and TARIDX: rows from scans, per-member rows back, cross-checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..checksums import key_hash
from .errors import TaridxError
from .info import TarShardInfo
from .spec import BLOCK, TARIDX_MAX_FID, TARIDX_ROW_DTYPE
from .taridx import Hasher, Taridx

__all__ = ["MEMBER_DTYPE", "taridx_from_scans", "taridx_members", "verify_scan"]

MEMBER_DTYPE = np.dtype(
    [
        ("fid", "<u2"),
        ("header_offset", "<u8"),  # the member's own 512-byte header
        ("payload_offset", "<u8"),  # header_offset + 512
        ("size", "<u8"),
        ("extid", "<u2"),
        ("crashid", "<u4"),
        ("keyhash", "<u8"),
    ]
)
"""One tar member as TARIDX knows it, with its payload offset spelled out."""


def taridx_from_scans(infos: Sequence[TarShardInfo], *, hasher: Hasher = key_hash) -> Taridx:
    """The TARIDX of scanned tars: ``fid`` is each tar's position in ``infos``.

    Rows follow archive order, so every stem's rows are contiguous unless a
    key repeats in another tar. Extension ids are given in order of first
    appearance; crash ids too: the first stem met with a given hash is
    canonical (crash id 0), each later distinct stem with the same hash gets
    the next crash id.

    Parameters
    ----------
    infos:
        Scans of the tars, in fid order.
    hasher:
        The stem hash; xxh64 (the format's) unless a test forces collisions.

    Raises
    ------
    TaridxError
        More than 65,536 tars (``fid`` is 16 bits) or extensions.
    """
    if len(infos) > TARIDX_MAX_FID + 1:
        raise TaridxError(f"{len(infos)} tars: a TARIDX file indexes at most {TARIDX_MAX_FID + 1}")
    ext_ids: dict[str, int] = {}
    canonical: dict[int, str] = {}
    crash_ids: dict[str, int] = {}
    parts: list[np.ndarray] = []
    for fid, info in enumerate(infos):
        counts = info.records["entry_count"].astype(np.int64)
        if hasher is key_hash:
            hashes = info.records["key_hash"].astype(np.uint64)
        else:
            hashes = np.array([hasher(k.encode("utf-8")) for k in info.keys], dtype=np.uint64)
        crash = np.zeros(len(info.keys), dtype=np.uint32)
        for i, (key, h) in enumerate(zip(info.keys, hashes.tolist())):
            known = canonical.setdefault(h, key)
            if known != key:
                crash[i] = crash_ids.setdefault(key, len(crash_ids) + 1)
        spec_to_ext = np.array(
            [ext_ids.setdefault(s.name, len(ext_ids)) for s in info.specs], dtype=np.uint16
        )
        if len(ext_ids) > 0xFFFF + 1:
            raise TaridxError(f"more than {0xFFFF + 1} distinct extensions", path=info.path)
        rows = np.zeros(len(info.entries), dtype=TARIDX_ROW_DTYPE)
        rows["fid"] = fid
        rows["offset"] = info.payload_offsets() - np.uint64(BLOCK)
        rows["size"] = info.entries["size"]
        rows["extid"] = spec_to_ext[info.entries["spec"].astype(np.intp)] if len(rows) else 0
        rows["crashid"] = np.repeat(crash, counts)
        rows["keyhash"] = np.repeat(hashes, counts)
        parts.append(rows)
    all_rows = np.concatenate(parts) if parts else np.zeros(0, dtype=TARIDX_ROW_DTYPE)
    crash_stems = tuple(sorted(crash_ids, key=crash_ids.__getitem__))
    return Taridx(all_rows, tuple(ext_ids), crash_stems)


def taridx_members(index: Taridx) -> np.ndarray:
    """Every row as a member (MEMBER_DTYPE), payload offset included, in file order."""
    rows = index.rows
    out = np.zeros(len(rows), dtype=MEMBER_DTYPE)
    for name in ("fid", "size", "extid", "crashid", "keyhash"):
        out[name] = rows[name]
    out["header_offset"] = rows["offset"]
    out["payload_offset"] = rows["offset"] + np.uint64(BLOCK)
    return out


def verify_scan(index: Taridx, fid: int, info: TarShardInfo, *, hasher: Hasher = key_hash) -> None:
    """Check that ``index``'s rows of tar ``fid`` describe exactly the members ``info`` found.

    TARIDX rows hold hashes, not keys, and no CRCs: importing an index means
    scanning its tars anyway, and this check says the index and the tar agree
    (same members, offsets, sizes, extensions and stem hashes, in order).

    Raises
    ------
    TaridxError
        Naming the first member that differs, or the counts.
    """
    rows = index.rows[index.rows["fid"] == fid]
    expected_n = len(info.entries)
    if len(rows) != expected_n:
        raise TaridxError(
            f"the index lists {len(rows)} members of tar {fid}, the tar has {expected_n}",
            path=info.path,
        )
    offsets = info.payload_offsets() - np.uint64(BLOCK)
    counts = info.records["entry_count"].astype(np.int64)
    keys = np.repeat(np.arange(len(info.keys)), counts)
    names = [info.specs[s].name for s in info.entries["spec"].tolist()]
    exts = index.extension_of(rows)
    crash_ids = {stem: i + 1 for i, stem in enumerate(index.crash_stems)}
    for i, row in enumerate(rows.tolist()):
        key = info.keys[int(keys[i])]
        got = (row[1], row[2], exts[i], row[5], row[4])
        want = (
            int(offsets[i]),
            int(info.entries["size"][i]),
            names[i],
            hasher(key.encode("utf-8")),
            crash_ids.get(key, 0),
        )
        if got != want:
            raise TaridxError(
                f"member {i} of tar {fid} ({key!r}.{names[i]}): the index says (offset, size, "
                f"extension, keyhash, crashid) = {got}, the tar has {want}; the index is not "
                "of this tar",
                path=info.path,
                offset=want[0],
            )
