"""The tars of an export: planned on the client from catalog rows, each written by one task.

A plan cuts the samples a version sees, in read order, into tars of at most
the asked size, never splitting a sample: every member's size is known
before any tar is written (the catalog's stored sizes; a compressed entry's
bytes once read are counted by a sizing task first), so tars get their
final numbered names up front and each is written by one task, in
parallel. A task reads its samples (CRC-checked, decompressed), writes the
tar through a write-once pending file, and its TARIDX beside it. The bytes
depend only on the samples, so a retried task that finds its tar published
already checks that it holds the same bytes and keeps it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..catalog.kinds import shard_kind
from ..errors import ChecksumError, DestinationNotEmptyError, ObjectExistsError
from ..format.checksums import crc32c
from ..format.tar import TarHeaders, taridx_of_headers
from ..format.tar.members import END_OF_ARCHIVE, member_headers, member_span
from ..format.tar.spec import blocks
from ..storage import open_pending, open_source, redact
from .read import iter_row_records, open_registered

if TYPE_CHECKING:
    from ..catalog.results import RecordRow, ShardRow
    from ..format import Record

__all__ = [
    "SourcePiece",
    "TarPlan",
    "TarWritten",
    "entry_sizes",
    "plan_tars",
    "sample_span",
    "write_tar",
]

_ZEROS = memoryview(bytes(512))
_BATCH = 8 << 20
"""Bytes of samples read, and of tar written, at a time (memory per task stays bounded)."""


@dataclass(frozen=True, slots=True)
class SourcePiece:
    """Consecutive visible records of one source shard, in file order."""

    url: str
    kind: str
    """``native`` or ``tar``."""
    expect: tuple[str, int]
    """The registered ``(file_id, footer_crc)`` (a native shard replaced since is refused)."""
    rows: tuple[RecordRow, ...]
    whole: bool = False
    """The rows are every record of the shard: it is streamed rather than read by ranges."""


@dataclass(frozen=True, slots=True)
class TarPlan:
    """One tar to write: its name, its samples, and the exact size they make."""

    url: str
    index_url: str
    pieces: tuple[SourcePiece, ...]
    samples: int
    size: int


@dataclass(frozen=True, slots=True)
class TarWritten:
    """What a task reports back: small, no per-sample data."""

    url: str
    samples: int
    bytes: int
    published: bool
    """False when a retried task found the same tar published by an earlier attempt."""


def sample_span(row: RecordRow, sizes: Sequence[int]) -> int:
    """Bytes the sample of ``row`` takes in a tar, its entries being ``sizes`` bytes once read.

    Its names are not checked here: :func:`~shardcat.format.tar.members.member_names`
    checks every row once, before the plan.
    """
    return sum(
        member_span(f"{row.key}.{name}", size) for (name, _, _), size in zip(row.entries, sizes)
    )


def plan_tars(
    shards: Sequence[tuple[ShardRow, Sequence[RecordRow], Sequence[Sequence[int]]]],
    max_bytes: int,
    names: Iterator[tuple[str, str]],
) -> list[TarPlan]:
    """Cut the samples of ``shards`` (in order) into tars of at most ``max_bytes``.

    Each item is a shard, its visible rows (file order) and each row's entry
    sizes once read. A tar closes before the sample that would take it past
    ``max_bytes``; a sample larger than that alone gets a tar of its own.
    ``names`` gives each tar's ``(url, index_url)`` in turn.
    """
    plans: list[TarPlan] = []
    pieces: list[SourcePiece] = []
    run: list[RecordRow] = []
    size = samples = 0
    current: tuple[ShardRow, bool] | None = None

    def cut_run() -> None:
        nonlocal run
        if run and current is not None:
            shard, whole = current
            pieces.append(
                SourcePiece(
                    shard.url,
                    shard.kind,
                    (shard.file_id, shard.footer_crc),
                    tuple(run),
                    whole and len(run) == shard.record_count,
                )
            )
        run = []

    def close_tar() -> None:
        nonlocal pieces, size, samples
        cut_run()
        url, index_url = next(names)
        plans.append(TarPlan(url, index_url, tuple(pieces), samples, size + len(END_OF_ARCHIVE)))
        pieces, size, samples = [], 0, 0

    for shard, rows, sizes in shards:
        cut_run()
        current = (shard, len(rows) == shard.record_count)
        for row, entry_sizes_ in zip(rows, sizes):
            span = sample_span(row, entry_sizes_)
            if samples and size + span + len(END_OF_ARCHIVE) > max_bytes:
                close_tar()
                current = (shard, False)
            run.append(row)
            size += span
            samples += 1
    if samples:
        close_tar()
    return plans


def entry_sizes(
    url: str,
    expect: tuple[str, int],
    offsets: Sequence[int],
    storage_options: Mapping[str, Any],
) -> list[list[int]]:
    """The size of each entry, once read (decompressed), of the records at ``offsets``; a task.

    Raises
    ------
    ChecksumError
        The shard was replaced since it was registered, or a CRC does not match.
    """
    wanted = {off: i for i, off in enumerate(offsets)}
    out: list[list[int]] = [[] for _ in offsets]
    with open_registered(url, storage_options, expect) as reader:
        found = 0
        for rec in reader.iter_records():
            i = wanted.get(rec.offset)
            if i is None:
                continue
            out[i] = [len(entry) for entry in rec.values()]
            found += 1
            if found == len(offsets):
                break
    return out


def _records(piece: SourcePiece, options: Mapping[str, Any]) -> Iterator[Record]:
    """The records of ``piece``, in its order, every CRC checked."""
    if shard_kind(piece.kind).from_rows:
        yield from iter_row_records(piece.kind, piece.url, piece.rows, None, options)
        return
    with open_registered(piece.url, options, piece.expect) as reader:
        if piece.whole:
            yield from reader.iter_records()
            return
        starts = reader.footer.records["offset"]
        want = np.array([row.offset for row in piece.rows], dtype=starts.dtype)
        indices = np.searchsorted(starts, want)
        if (indices >= len(starts)).any() or (
            starts[np.minimum(indices, len(starts) - 1)] != want
        ).any():
            raise ChecksumError(
                "the shard has no record at an offset its catalog rows name: it changed since "
                "it was registered; run `shardcat verify`",
                path=redact(piece.url),
            )
        i = 0
        for _ in range(len(indices) + 1):  # bounded: each pass takes at least one record
            if i >= len(indices):
                break
            j, nbytes = i, 0
            while j < len(indices) and (j == i or nbytes + piece.rows[j].length <= _BATCH):
                nbytes += piece.rows[j].length
                j += 1
            yield from reader.take(indices[i:j].tolist())
            i = j


def write_tar(
    plan: TarPlan,
    destination_options: Mapping[str, Any],
    source_options: Mapping[str, Any],
) -> TarWritten:
    """Write the tar of ``plan`` and its TARIDX, each published write-once; runs on a worker.

    Raises
    ------
    ChecksumError
        A source record does not match its catalog row or CRC, or the tar
        came out another size than planned (nothing is published).
    DestinationNotEmptyError
        Another tar (not these bytes) is published under the name already.
    ShardNotFoundError, StorageError
        Reading a source or writing the destination failed.
    """
    opts = dict(destination_options)
    src_opts = dict(source_options)
    headers = TarHeaders([], [], [], [])
    pending = open_pending(plan.url, opts, exclusive=True)
    crc = 0
    offset = entries = 0
    try:
        chunk = bytearray()
        for piece in plan.pieces:
            records = _records(piece, src_opts)
            try:
                for row in piece.rows:
                    rec = next(records)
                    if rec.key != row.key or rec.offset != row.offset:
                        raise ChecksumError(
                            f"record {rec.key!r} at byte {rec.offset} is not the one the catalog "
                            f"names there ({row.key!r} at {row.offset}): the shard changed since "
                            "it was registered; run `shardcat verify`",
                            path=redact(piece.url),
                        )
                    if len(rec) != len(row.entries) or any(
                        n != e[0] for n, e in zip(rec, row.entries)
                    ):
                        raise ChecksumError(
                            f"record {rec.key!r} has entries {list(rec)}, its catalog row "
                            f"{[e[0] for e in row.entries]}: the shard changed since it was "
                            "registered; run `shardcat verify`",
                            path=redact(piece.url),
                        )
                    # The names were checked on the client (member_names), from these rows.
                    for name, entry in rec.items():
                        view = entry.view
                        size = view.nbytes
                        head = member_headers(f"{rec.key}.{name}", size)
                        # TARIDX rows every header; a pax header is no entry of the scan.
                        last = len(head.names) - 1
                        for k in range(last + 1):
                            headers.names.append(head.names[k])
                            headers.sizes.append(head.sizes[k])
                            headers.offsets.append(offset + head.offsets[k])
                            headers.entry.append(entries if k == last else -1)
                        entries += 1
                        padded = blocks(size)
                        chunk += head.data
                        chunk += view
                        chunk += _ZEROS[: padded - size]
                        offset += len(head.data) + padded
                    if len(chunk) >= _BATCH:
                        crc = crc32c(chunk, crc)
                        pending.file.write(chunk)
                        chunk = bytearray()
            finally:
                close = getattr(records, "close", None)
                if close is not None:
                    close()
        chunk += END_OF_ARCHIVE
        offset += len(END_OF_ARCHIVE)
        crc = crc32c(chunk, crc)
        pending.file.write(chunk)
        if offset != plan.size:
            raise ChecksumError(
                f"the tar came out {offset:,} bytes, planned {plan.size:,}: its sources changed "
                "since the export began; run the export again",
                path=redact(plan.url),
            )
        pending.commit()
        published = True
    except ObjectExistsError:
        _same_or_refuse(plan.url, opts, offset, crc)
        published = False
    except BaseException:
        pending.discard()
        raise
    index = taridx_of_headers([headers]).to_bytes()
    _publish(plan.index_url, opts, index)
    return TarWritten(redact(plan.url), plan.samples, offset, published)


def _publish(url: str, options: dict[str, Any], data: bytes) -> None:
    """Publish ``data`` write-once at ``url``; the same bytes there already are kept."""
    pending = open_pending(url, options, exclusive=True)
    try:
        pending.file.write(data)
        pending.commit()
    except ObjectExistsError:
        _same_or_refuse(url, options, len(data), crc32c(data))
    except BaseException:
        pending.discard()
        raise


def _same_or_refuse(url: str, options: dict[str, Any], size: int, crc: int) -> None:
    """Keep the object at ``url`` if it holds ``size`` bytes of CRC32C ``crc`` (an earlier try's).

    Raises
    ------
    DestinationNotEmptyError
        It holds other bytes.
    """
    source = open_source(url, options)
    with contextlib.closing(source):
        have = source.size()
        got = 0
        if have == size:
            for start in range(0, size, _BATCH):
                got = crc32c(source.read(start, min(size, start + _BATCH)), got)
    if have != size or got != crc:
        raise DestinationNotEmptyError(
            f"{redact(url)} exists and holds other bytes than this export writes there; "
            "export into an empty folder, or pass overwrite=True (--overwrite) to replace "
            "the tars of an earlier export"
        )
