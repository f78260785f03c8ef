"""Between scanned tars and TARIDX: rows from scans (iTar's rules), per-member rows back, cross-checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..._types import RangeSource
from ..checksums import key_hash
from .errors import TaridxError
from .info import TarShardInfo
from .itar import TarHeaders, itar_split, tar_headers
from .spec import BLOCK, TARIDX_MAX_EXTID, TARIDX_MAX_FID, TARIDX_ROW_DTYPE
from .taridx import Hasher, Taridx

__all__ = [
    "MEMBER_DTYPE",
    "shared_stems",
    "taridx_from_scans",
    "taridx_members",
    "taridx_of_headers",
    "verify_scan",
]

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


def taridx_from_scans(
    infos: Sequence[TarShardInfo],
    *,
    hasher: Hasher = key_hash,
    sources: Sequence[RangeSource | None] | None = None,
) -> Taridx:
    """The TARIDX of scanned tars, as iTar writes it: ``fid`` is each tar's position in ``infos``.

    One row per tar header iTar meets (:func:`~.itar.tar_headers`), in tar
    order; its stem and extension by iTar's rule (:func:`~.itar.itar_split`:
    the name after its last ``/``, up to the first dot), whatever the
    samples' keys are. Extension ids are given in order of first appearance;
    crash ids too: the first stem met with a given hash is canonical (crash
    id 0), each later distinct stem with the same hash gets the next crash id.

    Parameters
    ----------
    infos:
        Scans of the tars (or their catalog rows), in fid order.
    hasher:
        The stem hash; xxh64 (the format's) unless a test forces collisions.
    sources:
        Each tar, read only where its entries leave a gap (headers the scan
        skipped: pax, directories, files without an extension); ``None``
        where none is at hand.

    Raises
    ------
    TaridxError
        More than 65,536 tars (``fid`` is 16 bits) or extensions; a tar with
        gaps and no source.
    """
    if len(infos) > TARIDX_MAX_FID + 1:
        raise TaridxError(f"{len(infos)} tars: a TARIDX file indexes at most {TARIDX_MAX_FID + 1}")
    srcs = list(sources) if sources is not None else [None] * len(infos)
    return taridx_of_headers(
        [tar_headers(info, src) for info, src in zip(infos, srcs)], hasher=hasher
    )


def taridx_of_headers(tars: Sequence[TarHeaders], *, hasher: Hasher = key_hash) -> Taridx:
    """The TARIDX of tars given as iTar's headers (``fid`` = position in ``tars``).

    Raises
    ------
    TaridxError
        More than 65,536 tars or extensions.
    """
    if len(tars) > TARIDX_MAX_FID + 1:
        raise TaridxError(f"{len(tars)} tars: a TARIDX file indexes at most {TARIDX_MAX_FID + 1}")
    ext_ids: dict[str, int] = {}
    canonical: dict[int, str] = {}
    crash_ids: dict[str, int] = {}
    hashes: dict[str, int] = {}
    parts: list[np.ndarray] = []
    for fid, tar in enumerate(tars):
        n = len(tar)
        extid = np.zeros(n, dtype=np.uint16)
        crash = np.zeros(n, dtype=np.uint32)
        keyhash = np.zeros(n, dtype=np.uint64)
        for i, name in enumerate(tar.names):
            stem, ext = itar_split(name)
            e = ext_ids.setdefault(ext, len(ext_ids))
            if e > TARIDX_MAX_EXTID:
                raise TaridxError(f"more than {TARIDX_MAX_EXTID + 1} distinct extensions")
            extid[i] = e
            h = hashes.get(stem)
            if h is None:
                h = hashes[stem] = hasher(stem.encode("utf-8"))
            keyhash[i] = h
            if canonical.setdefault(h, stem) != stem:
                crash[i] = crash_ids.setdefault(stem, len(crash_ids) + 1)
        rows = np.zeros(n, dtype=TARIDX_ROW_DTYPE)
        rows["fid"] = fid
        rows["offset"] = tar.offsets
        rows["size"] = tar.sizes
        rows["extid"] = extid
        rows["crashid"] = crash
        rows["keyhash"] = keyhash
        parts.append(rows)
    all_rows = np.concatenate(parts) if parts else np.zeros(0, dtype=TARIDX_ROW_DTYPE)
    crash_stems = tuple(sorted(crash_ids, key=crash_ids.__getitem__))
    return Taridx(all_rows, tuple(ext_ids), crash_stems)


def shared_stems(infos: Sequence[TarShardInfo]) -> tuple[int, int]:
    """``(samples, stems)``: samples whose iTar stem another sample has too, and those stems.

    TARIDX names a sample by its stem, so ``train/0007`` and ``val/0007``
    are one sample group there (stem ``0007``) and two samples in the catalog.
    """
    keys_of: dict[str, set[str]] = {}
    for info in infos:
        counts = info.records["entry_count"].tolist()
        starts = info.entry_starts().tolist()
        specs = info.entries["spec"].tolist()
        for key, n, at in zip(info.keys, counts, starts):
            name = f"{key}.{info.specs[specs[at]].name}" if n else key
            keys_of.setdefault(itar_split(name)[0], set()).add(key)
    merged = [len(k) for k in keys_of.values() if len(k) > 1]
    return sum(merged), len(merged)


def taridx_members(index: Taridx) -> np.ndarray:
    """Every row as a member (MEMBER_DTYPE), payload offset included, in file order."""
    rows = index.rows
    out = np.zeros(len(rows), dtype=MEMBER_DTYPE)
    for name in ("fid", "size", "extid", "crashid", "keyhash"):
        out[name] = rows[name]
    out["header_offset"] = rows["offset"]
    out["payload_offset"] = rows["offset"] + np.uint64(BLOCK)
    return out


def verify_scan(
    index: Taridx,
    fid: int,
    info: TarShardInfo,
    *,
    hasher: Hasher = key_hash,
    source: RangeSource | None = None,
) -> None:
    """Check that ``index``'s rows of tar ``fid`` describe exactly the tar ``info`` scanned.

    TARIDX rows hold hashes, not keys, and no CRCs: importing an index means
    scanning its tars anyway, and this check says the index and the tar agree
    by iTar's rules: one row per header (:func:`~.itar.tar_headers`, which
    reads ``source`` where the scan skipped headers), in order, with the same
    offset, size, extension, stem hash and crash id.

    Raises
    ------
    TaridxError
        Naming the first member that differs, or the counts.
    """
    rows = index.rows[index.rows["fid"] == fid]
    tar = tar_headers(info, source)
    exts = index.extension_of(rows)
    crash_ids = {stem: i + 1 for i, stem in enumerate(index.crash_stems)}
    for i, (row, name) in enumerate(zip(rows.tolist(), tar.names)):
        stem, ext = itar_split(name)
        got = (row[1], row[2], exts[i], row[5], row[4])
        want = (
            tar.offsets[i],
            tar.sizes[i],
            ext,
            hasher(stem.encode("utf-8")),
            crash_ids.get(stem, 0),
        )
        if got != want:
            raise TaridxError(
                f"member {i} of tar {fid} ({name!r}): the index says (offset, size, "
                f"extension, keyhash, crashid) = {got}, the tar has {want}; the index is not "
                "of this tar",
                path=info.path,
                offset=tar.offsets[i],
            )
    if len(rows) != len(tar):
        i = min(len(rows), len(tar))
        what = (
            f"the tar's member {i} ({tar.names[i]!r}, at byte {tar.offsets[i]}) has no row"
            if len(tar) > len(rows)
            else f"its row {i} (offset {int(rows['offset'][i])}) is past the tar's last member"
        )
        raise TaridxError(
            f"the index lists {len(rows)} members of tar {fid}, the tar has {len(tar)}: "
            f"{what}; the index is not of this tar",
            path=info.path,
        )
