"""TARIDX files and the catalog: export a tar dataset's index, import one as a tar dataset.

Export rebuilds each tar's scan summary from its catalog rows and writes
:func:`~shardcat.format.tar.taridx_from_scans` of them, as iTar (the
format's reference) would index the tars: ``fid`` is the tar's place in the
dataset's shard listing (by URL), a row per tar header, stems by iTar's rule
(the name after its last ``/``, up to the first dot). A tar is read only
where its samples leave a gap (headers the catalog has no row for: pax,
directories, files without an extension), and only those bytes.

Import cannot register from the index alone: TARIDX rows hold a hash of
each key, not the key, and no CRC. So each tar is scanned once, streaming,
by :func:`~shardcat.orchestration.index_tar` (one Dask task per tar, one
commit), and every tar's scan is checked against the index's rows for its
``fid`` (:func:`~shardcat.format.tar.verify_scan`: the same members,
offsets, sizes, extensions, stem hashes and crash ids, by iTar's rules)
before it is staged.
An index that does not describe its tars fails the job; nothing is committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..catalog import internal
from ..catalog.results import RecordRow, ShardRow
from ..errors import ShardcatError
from ..format.checksums import key_hash
from ..format.footer import EntrySpec
from ..format.spec import ENTRY_ROW_DTYPE, RECORD_ROW_DTYPE, Codec
from ..format.tar import (
    Taridx,
    TaridxError,
    TarShardInfo,
    header_gaps,
    shared_stems,
    taridx_from_scans,
)
from ..storage import open_source, redact, resolve
from .cluster import ClientChoice
from .index_tar import IndexTarSummary, expand_tar_urls, run_index_job
from .watch import TaskProgressCallback

if TYPE_CHECKING:
    from .._types import RangeSource
    from ..reading import Catalog

__all__ = ["TaridxExport", "export_taridx", "import_taridx", "tar_info_from_rows"]


@dataclass(frozen=True, slots=True)
class TaridxExport:
    """What :func:`export_taridx` wrote."""

    index: Taridx = field(repr=False)
    tars: list[str]
    """The tar URLs, in ``fid`` order."""
    shared_samples: int = 0
    """Samples whose stem another sample has too (``train/0007``, ``val/0007``):
    TARIDX groups them as one stem, the catalog keeps them apart."""
    shared_stems: int = 0
    """The stems those samples share."""


def tar_info_from_rows(shard: ShardRow, rows: Sequence[RecordRow]) -> TarShardInfo:
    """A tar's scan summary rebuilt from its catalog rows (what the scan registered)."""
    specs: dict[tuple[str, str], int] = {}
    records = np.zeros(len(rows), dtype=RECORD_ROW_DTYPE)
    n_entries = sum(len(r.spans) for r in rows)
    entries = np.zeros(n_entries, dtype=ENTRY_ROW_DTYPE)
    at = 0
    for i, row in enumerate(rows):
        raw = row.key.encode("utf-8")
        records[i] = (row.offset, row.length, key_hash(raw), len(raw), len(row.spans), b"\0" * 4)
        for (name, ctype, _), (off, size, crc) in zip(row.entries, row.spans):
            spec = specs.setdefault((name, ctype), len(specs))
            entries[at] = (off, size, crc, spec, b"\0" * 2)
            at += 1
    tar = shard.metadata.get("tar", {})
    return TarShardInfo(
        path=shard.url,
        size=shard.size_bytes,
        end_offset=int(tar.get("end_offset", 0)),
        member_count=int(tar.get("member_count", n_entries)),
        skipped=int(tar.get("skipped", 0)),
        keys=[r.key for r in rows],
        records=records,
        entries=entries,
        specs=[EntrySpec(name, ctype, Codec.NONE) for name, ctype in specs],
    )


def export_taridx(
    catalog: Catalog | str,
    dataset: str,
    out: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
) -> TaridxExport:
    """Write ``dataset``'s committed tars as a TARIDX file at ``out`` (any fsspec URL).

    The file is the one iTar writes for the same tars, byte for byte.
    ``storage_options`` are used for ``out`` and for the tars (read only
    where the catalog's rows leave a gap between headers).

    Raises
    ------
    ShardcatError
        The dataset has native shards (TARIDX indexes tars only) or no shard.
    TaridxError
        More tars or extensions than TARIDX can number; a tar changed since
        it was indexed.
    """
    from ..reading import Catalog

    opts = dict(storage_options or {})
    with Catalog.opened(catalog) as cat:
        shards = sorted(cat.shards(dataset), key=lambda s: (s.url, s.id))
        native = [s.url for s in shards if s.kind != "tar"]
        if native:
            raise ShardcatError(
                f"dataset {dataset!r} has {len(native)} native shard(s) ({native[0]}, ...): a "
                "TARIDX file indexes tars only; export a dataset made by `shardcat index-tar`"
            )
        if not shards:
            raise ShardcatError(f"dataset {dataset!r} has no committed tar to export")
        infos = [tar_info_from_rows(s, internal.record_rows(cat, s.id)) for s in shards]
    with ExitStack() as stack:
        sources: list[RangeSource | None] = []
        for info in infos:
            if header_gaps(info):
                source = open_source(info.path, opts)
                stack.callback(source.close)
                sources.append(source)
            else:
                sources.append(None)
        index = taridx_from_scans(infos, sources=sources)
    data = index.to_bytes()
    fs, path = resolve(out, opts)
    with fs.open(path, "wb") as f:
        f.write(data)
    samples, stems = shared_stems(infos)
    return TaridxExport(index, [s.url for s in shards], samples, stems)


def import_taridx(
    catalog: Catalog | str,
    taridx: str,
    tars: str | Sequence[str],
    *,
    dataset: str,
    storage_options: Mapping[str, Any] | None = None,
    client: ClientChoice = None,
    fields: Mapping[str, type] | None = None,
    fields_entry: str = "json",
    progress: TaskProgressCallback | None = None,
) -> IndexTarSummary:
    """Register the tars ``taridx`` indexes (``fid`` = position in the expanded ``tars``).

    ``fields``/``fields_entry``: declared fields stored as the tars are staged,
    and ``progress(done, total)`` called as tars are checked, as
    :func:`~shardcat.index_tar` does.

    Raises
    ------
    TaridxError
        The file is not a valid TARIDX, names a ``fid`` past the tars given,
        or does not describe a tar (nothing is committed).
    TarError, ShardNotFoundError, DuplicateKeyError, CatalogError
        As :func:`index_tar` with ``on_error="fail"``.
    """
    opts = dict(storage_options or {})
    source = open_source(taridx, opts)
    try:
        data = source.read(0, source.size())
    finally:
        source.close()
    index = Taridx.from_bytes(data, path=redact(taridx))
    urls = expand_tar_urls(tars, opts)
    if len(index.rows):
        top = int(index.rows["fid"].max())
        if top >= len(urls):
            raise TaridxError(
                f"the index names tar fid {top}, the pattern gives {len(urls)} tar(s) "
                "(fid = position in the expanded pattern)",
                path=redact(taridx),
            )
    return run_index_job(
        urls,
        catalog,
        dataset,
        opts,
        client,
        index=index,
        fields=fields,
        fields_entry=fields_entry,
        progress=progress,
    )
