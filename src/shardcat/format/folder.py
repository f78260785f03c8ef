"""Folders of files indexed in place: a group of samples as one catalog shard, and its paths.

A plain folder has no container file: each entry of a sample is a whole
file, ``ROOT/KEY.ENTRY`` (the key rule of ``shardcat write SRC``). A group
of samples is registered as one ``files`` shard whose URL names the folder
and the group (``ROOT/#files-j<job>-<group>``: never a file, so two jobs'
groups of one folder never share a URL). Each sample is a record whose
bytes are its files' bytes laid end to end in layout order: the record's
``offset`` is where it starts in the group's (virtual) concatenation, each
entry row's ``offset`` is the file's place inside the record, with its size
and the CRC32C computed at indexing. Reading an entry is one read of its
file (:func:`entry_path`), checked against that CRC like a tar's payload.

No IO here: the orchestration reads the files and gives their sizes and
CRCs to :func:`folder_info`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import ChecksumError
from .checksums import key_hash
from .entries import Entry, guess_content_type
from .footer import EntrySpec
from .info import InPlaceShardInfo
from .spec import ENTRY_ROW_DTYPE, RECORD_ROW_DTYPE, Codec

__all__ = [
    "FOLDER_MARK",
    "FolderSample",
    "FolderShardInfo",
    "checked_file",
    "entry_path",
    "folder_info",
    "folder_of",
    "group_url",
]

FOLDER_MARK = "/#files-"
"""What separates a ``files`` shard's folder from its group name in its URL."""


def group_url(root: str, job: int, group: int) -> str:
    """The URL of a group's ``files`` shard: its folder, then the job and the group."""
    return f"{root.rstrip('/')}{FOLDER_MARK}j{job}-{group:06d}"


def folder_of(url: str) -> str:
    """The folder a ``files`` shard's entries live under (its URL before :data:`FOLDER_MARK`).

    Raises
    ------
    ValueError
        ``url`` is not a ``files`` shard's URL.
    """
    root, mark, _ = url.rpartition(FOLDER_MARK)
    if not mark:
        raise ValueError(f"{url!r} is not the URL of a folder group (no {FOLDER_MARK!r})")
    return root


def entry_path(folder: str, key: str, entry: str) -> str:
    """The file of entry ``entry`` of sample ``key``: ``folder/key.entry`` (the key rule, inverted)."""
    return f"{folder}/{key}.{entry}"


@dataclass(frozen=True, slots=True)
class FolderSample:
    """One sample as read: its key and ``(entry, size, crc32c)`` per file, in layout order."""

    key: str
    files: tuple[tuple[str, int, int], ...]


@dataclass(frozen=True, slots=True)
class FolderShardInfo(InPlaceShardInfo):
    """A group of samples of a folder: ``path`` is the group's URL (:func:`group_url`),
    ``size`` the bytes of all its files."""

    @property
    def folder(self) -> str:
        return folder_of(self.path)


def checked_file(
    data: bytes | memoryview, key: str, spec: EntrySpec, size: int, crc: int, path: str
) -> Entry:
    """Entry ``spec`` of sample ``key`` from its file's bytes, its size and CRC32C checked.

    Raises
    ------
    ChecksumError
        The file's bytes are not those indexed (changed or damaged since), or it is longer.
    TruncatedError
        The file is shorter than when it was indexed.
    """
    from .tar.read import read_tar_record

    if len(data) > size:  # its first size bytes may be unchanged: not the file indexed, though
        raise ChecksumError(
            f"key {key!r}: the file is longer than its {size:,} bytes when it was indexed "
            "(appended to or rewritten since); index the folder again",
            path=path,
        )
    record = read_tar_record(data, key, [spec], [(0, size, crc)], path=path, holder="file")
    return record.entries[spec.name]


def folder_info(
    url: str, samples: Sequence[FolderSample], offsets: Sequence[int] | None = None
) -> FolderShardInfo:
    """The summary of a group of samples, each file's size and CRC32C as read.

    ``offsets``: each record's offset as registered (a check of files read
    again keeps them, so a file that changed size moves no other record);
    by default the records are laid end to end.

    Raises
    ------
    ValueError
        A sample has no file, or more than 65,535 (an entry count is 16 bits).
    """
    # Column by column from plain lists: a structured array's row assignment costs ~1 µs a row.
    inside: list[int] = []
    starts: list[int] = []
    sizes: list[int] = []
    crcs: list[int] = []
    spec_of: list[int] = []
    keys: list[str] = []
    hashes: list[int] = []
    key_lengths: list[int] = []
    counts: list[int] = []
    spec_ids: dict[str, int] = {}
    for sample in samples:
        files = sample.files
        if not 0 < len(files) <= 0xFFFF:
            raise ValueError(f"sample {sample.key!r} has {len(files)} files")
        key = sample.key.encode("utf-8")
        at = 0
        for entry, size, crc in files:
            starts.append(at)
            sizes.append(size)
            crcs.append(crc)
            spec = spec_ids.get(entry)
            if spec is None:
                spec = spec_ids[entry] = len(spec_ids)
            spec_of.append(spec)
            at += size
        inside.append(at)
        keys.append(sample.key)
        hashes.append(key_hash(key))
        key_lengths.append(len(key))
        counts.append(len(files))
    lengths = np.array(inside, dtype=np.uint64)
    records = np.zeros(len(samples), dtype=RECORD_ROW_DTYPE)
    records["length"] = lengths
    if offsets is None:
        # Laid end to end; a sample of empty files still has an offset of its own.
        ends = np.cumsum(np.maximum(lengths, 1), dtype=np.uint64)
        records["offset"][1:] = ends[:-1]
    else:
        records["offset"] = np.array(offsets, dtype=np.uint64)
    records["key_hash"] = np.array(hashes, dtype=np.uint64)
    records["key_length"] = key_lengths
    records["entry_count"] = counts
    entries = np.zeros(len(sizes), dtype=ENTRY_ROW_DTYPE)
    entries["offset"] = starts
    entries["size"] = np.array(sizes, dtype=np.uint64)
    entries["crc"] = np.array(crcs, dtype=np.uint32)
    entries["spec"] = spec_of
    count = len(sizes)
    specs = [EntrySpec(name, guess_content_type(name), Codec.NONE) for name in spec_ids]
    size = int(entries["size"].sum()) if count else 0
    return FolderShardInfo(url, size, keys, records, entries, specs)
