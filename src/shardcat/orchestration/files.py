"""Packing files: a folder, URL or glob of files becomes samples, one per key.

The client only lists: paths and sizes, grouped into samples by the key
rule and cut into partitions by bytes, so that each partition fills one
shard of about ``shard_size``. The workers read the files themselves
(:func:`read_samples`) with the source's storage options; no file's bytes
pass through the client or the task graph.

The key rule is WebDataset's: a file's key is its path under the source
root up to the first dot of its name, the rest of the name is the entry
(``a/img1.seg.png`` → key ``a/img1``, entry ``seg.png``). ``last-dot``
splits at the last dot instead (``pip-23.2.1-py3-none-any.whl`` → key
``pip-23.2.1-py3-none-any``, entry ``whl``). A file with no entry name
(``README``) is an error unless the caller chose what it becomes
(``no_ext_entry``) or to skip such files (``skip_unmatched``, counted).
Hidden files and folders (a name starting with a dot) are never packed and
are counted in the listing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from braceexpand import braceexpand
from fsspec.implementations.local import LocalFileSystem

from .._pread import read_whole
from .._units import count_of
from ..errors import (
    DuplicateKeyError,
    EmptySourceError,
    Hint,
    SourceIsShardsError,
    StorageError,
    UnmatchedFilesError,
)
from ..format.manifest import FOLDER as HISTORY_FOLDER
from ..format.manifest import is_history_file
from ..format.spec import HEADER_MAGIC
from ..storage import GROUPS_FOLDER, is_group_shard, redact, resolve
from ..storage.local_listing import ScandirFileSystem, fast_local

__all__ = [
    "FileListing",
    "FileSource",
    "KeyRule",
    "SampleFiles",
    "from_files",
    "list_source",
    "plan_partitions",
    "read_samples",
    "sample_parts",
]

KeyRule = Literal["first-dot", "last-dot"]
KEY_RULES: tuple[KeyRule, ...] = ("first-dot", "last-dot")

_MAGIC = re.compile(r"[*?\[{]")

# Bytes a record and an entry add to a shard besides the payload, for
# planning only: measured on format 1 (~80 B + 2 × key per record, ~111 B +
# name per entry, ~1.3 KiB per shard) and rounded up, so that a planned
# partition stays within one shard of the requested size.
_RECORD_OVERHEAD = 96
_ENTRY_OVERHEAD = 128
SHARD_OVERHEAD = 4096

# Files a worker fetches at once from an object store (concurrent GETs), and
# the bytes such a batch may hold: the task's memory stays bounded.
_READ_BATCH_FILES = 64
_READ_BATCH_BYTES = 64 * 2**20


@dataclass(frozen=True, slots=True)
class FileSource:
    """Files to pack, as :func:`shardcat.write` accepts them: build one with :func:`from_files`."""

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    key_rule: KeyRule = "first-dot"
    no_ext_entry: str | None = None
    skip_unmatched: bool = False
    in_place: bool = False
    """Listed to be indexed in place: a file must be ``KEY.ENTRY`` (``no_ext_entry`` cannot
    apply: a lookup finds entry E of key K as the file ``K.E``)."""

    def __repr__(self) -> str:  # never show storage options
        return f"FileSource({redact(self.url)!r}, key_rule={self.key_rule!r})"


_UNMATCHED = Hint(
    python="pack them as an entry of their own key (from_files(..., no_ext_entry=NAME)), skip "
    "them (skip_unmatched=True), or rename them",
    cli="pack them as an entry of their own key (--no-ext-entry NAME), skip them "
    "(--skip-unmatched), or rename them",
)
_IN_PLACE_UNMATCHED = Hint(
    python="skip them (skip_unmatched=True), or rename them KEY.ENTRY (a file indexed in "
    "place is found by its name)",
    cli="skip them (--skip-unmatched), or rename them KEY.ENTRY (a file indexed in place is "
    "found by its name)",
)


def from_files(
    source: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    key_rule: KeyRule = "first-dot",
    no_ext_entry: str | None = None,
    skip_unmatched: bool = False,
) -> FileSource:
    """Files under a folder or URL, to pass to :func:`shardcat.write` as its data.

    Parameters
    ----------
    source:
        A local folder, any fsspec URL (``s3://raw/images/``), a glob
        (``s3://raw/*/img*.jpg``) or a brace pattern as WebDataset writes
        them (``s3://raw/part-{000..099}/``). Keys are paths relative to the
        pattern's fixed part (up to the last ``/`` before the first ``*?[{``).
    storage_options:
        fsspec options to read the source (the workers get them too); the
        shards' own options are ``shardcat.write(storage_options=...)``.
    key_rule:
        ``"first-dot"`` (WebDataset's: key up to the first dot of the file
        name, entry the rest) or ``"last-dot"`` (entry = the last extension).
    no_ext_entry:
        Pack a file with no extension (``README``) as this entry of the key
        that is its whole path, instead of refusing it.
    skip_unmatched:
        Skip files with no extension instead of refusing them; the listing
        counts them and :func:`shardcat.write` logs how many.

    Raises
    ------
    ValueError
        An unknown ``key_rule`` or an empty ``no_ext_entry``.

    Examples
    --------
    >>> shardcat.write(shardcat.from_files("s3://raw/images/"), "s3://ds/train",
    ...                catalog=cat, dataset="train")  # doctest: +SKIP
    """
    if key_rule not in KEY_RULES:
        raise ValueError(f"key_rule must be one of {', '.join(KEY_RULES)}, not {key_rule!r}")
    if no_ext_entry is not None and (not no_ext_entry or "/" in no_ext_entry):
        raise ValueError(f"no_ext_entry must be an entry name such as 'txt', not {no_ext_entry!r}")
    return FileSource(
        str(source), dict(storage_options or {}), key_rule, no_ext_entry, skip_unmatched
    )


def sample_parts(relpath: str, key_rule: KeyRule = "first-dot") -> tuple[str, str] | None:
    """``a/b/img001.seg.png`` → (``a/b/img001``, ``seg.png``); ``None`` if the name has no entry part.

    ``last-dot`` gives (``a/b/img001.seg``, ``png``). A name without a dot,
    or with nothing before or after the dot, has no entry name.
    """
    folder, _, name = relpath.rpartition("/")
    if key_rule == "last-dot":
        stem, dot, entry = name.rpartition(".")
    else:
        stem, dot, entry = name.partition(".")
    if not dot or not stem or not entry:
        return None
    return (f"{folder}/{stem}" if folder else stem), entry


@dataclass(frozen=True, slots=True)
class SampleFiles:
    """The files of one sample: its key and ``(entry, path)`` pairs, paths in the source's filesystem."""

    key: str
    files: tuple[tuple[str, str], ...]
    size: int
    """Bytes of the files, as listed."""

    def estimated_bytes(self) -> int:
        """What the sample adds to a shard (payload plus framing, rounded up)."""
        framing = _RECORD_OVERHEAD + 2 * len(self.key.encode())
        framing += sum(_ENTRY_OVERHEAD + 2 * len(entry) for entry, _ in self.files)
        return self.size + framing


@dataclass(frozen=True)
class FileListing:
    """What the client found under a source: samples sorted by key, and what it skipped."""

    root_url: str
    """The source's fixed part with its protocol: workers open their filesystem from it."""
    samples: list[SampleFiles]
    files: int
    bytes: int
    hidden: int = 0
    """Hidden files (a dot-name in their path) that were not packed."""
    skipped: list[str] = field(default_factory=list)
    """Files without an entry name skipped on request (``skip_unmatched``)."""
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False)
    """The source's fsspec options: the workers read with them (never shown)."""
    stamps: dict[str, str] = field(default_factory=dict, repr=False)
    """Per path, its size and what the store says changes with it (mtime, ETag): what a
    resumed job compares (:mod:`.inputs`)."""


def list_source(source: FileSource) -> FileListing:
    """List the source's files and group them into samples (on the client; reads no file).

    Raises
    ------
    EmptySourceError
        The source, or one of its brace alternatives, holds no file to pack.
    UnmatchedFilesError
        Files have no entry name under the key rule, and neither
        ``no_ext_entry`` nor ``skip_unmatched`` says what to do with them.
    DuplicateKeyError
        Two files give the same key and entry.
    StorageError
        The source cannot be listed.
    """
    opts = source.storage_options
    fs, pattern = resolve(source.url, opts)
    fs = fast_local(fs)  # a local folder is walked with os.scandir: the same listing, ~5 x faster
    root = _fixed_root(fs, pattern)
    found: dict[str, tuple[int, str]] = {}
    for alternative in braceexpand(source.url):
        _, path = resolve(alternative, opts)
        try:
            matched = _list_one(fs, path)
        except FileNotFoundError:
            matched = {}
        except OSError as e:
            raise StorageError(
                f"cannot list {redact(alternative)}: {e}", path=redact(alternative)
            ) from e
        if not matched:
            raise EmptySourceError(_nothing_at(alternative, source.url), source=redact(alternative))
        found.update(matched)
    prefix = root.rstrip("/") + "/" if root.rstrip("/") else "/"
    hidden = 0
    unmatched: list[str] = []
    by_key: dict[str, dict[str, tuple[str, int]]] = {}
    cut = len(prefix)
    key_rule = source.key_rule
    for path in sorted(found):
        rel = path[cut:] if path.startswith(prefix) else path.rpartition("/")[2]
        if rel.startswith(".") or "/." in rel:  # a dot-name anywhere in its path
            hidden += 1
            continue
        parts = sample_parts(rel, key_rule)
        if parts is None:
            if source.no_ext_entry is None:
                unmatched.append(rel)
                continue
            parts = (rel, source.no_ext_entry)
        key, entry = parts
        size = found[path][0]
        files = by_key.get(key)
        if files is None:
            by_key[key] = {entry: (path, size)}
            continue
        if entry in files:
            raise DuplicateKeyError(
                f"{_rel(files[entry][0], prefix)} and {rel} both map to key {key!r}, entry "
                f"{entry!r}; rename one, or choose another key rule (--key-rule)",
                keys=[key],
            )
        files[entry] = (path, size)
    if unmatched and not source.skip_unmatched:
        unmatched.sort()
        shown = ", ".join(unmatched[:10]) + (
            f" and {len(unmatched) - 10:,} more" if len(unmatched) > 10 else ""
        )
        raise UnmatchedFilesError(
            f"{len(unmatched):,} files under {redact(source.url)} have no extension, so no entry "
            f"name under the {source.key_rule} key rule: {shown}",
            paths=unmatched,
            hint=_IN_PLACE_UNMATCHED if source.in_place else _UNMATCHED,
        )
    if source.in_place:
        _refuse_dataset_shards(fs, source.url, by_key, prefix)
    if by_key and all(files.keys() == {"shard"} for files in by_key.values()):
        first = _rel(next(iter(by_key.values()))["shard"][0], prefix)
        raise SourceIsShardsError(
            f"{redact(source.url)} holds only shardcat shards ({count_of(len(by_key), 'file')} "
            f"named *.shard, e.g. {first}), not files to pack; nothing was written",
            hint=Hint(
                python="the data to write comes first and the dataset's folder second: "
                "shardcat.write(shardcat.from_files(SRC), URL, ...); to copy a dataset use "
                "shardcat.copy_dataset, to register existing shards Catalog.reindex",
                cli="did you swap SRC and URL? `shardcat write SRC URL -d NAME` packs the files "
                "under SRC into shards under URL; to copy a dataset use `shardcat copy`, to "
                "register existing shards `shardcat reindex NAME URL...`",
            ),
            source=redact(source.url),
        )
    if not by_key:
        what = (
            f"{hidden:,} hidden and {len(unmatched):,} skipped files"
            if hidden or unmatched
            else "no file"
        )
        raise EmptySourceError(
            f"nothing to pack under {redact(source.url)}: it holds {what}; check the path "
            "(hidden files, names starting with '.', are never packed)",
            source=redact(source.url),
        )
    samples = [_sample(key, by_key[key]) for key in sorted(by_key)]
    return FileListing(
        root_url=fs.unstrip_protocol(root),
        samples=samples,
        files=sum(len(files) for files in by_key.values()),
        bytes=sum(s.size for s in samples),
        hidden=hidden,
        skipped=sorted(unmatched),
        storage_options=dict(opts),
        stamps={path: f"{size}:{stamp}" for path, (size, stamp) in found.items()},
    )


def _refuse_dataset_shards(
    fs: Any, url: str, by_key: Mapping[str, Mapping[str, tuple[str, int]]], prefix: str
) -> None:
    """Refuse to index shardcat's own shards in place as files (``shardcat index-files``).

    A folder of ``*.shard`` files only, as ``write`` refuses it; or one
    holding a ``*.shard`` file that is a shardcat shard (its first bytes
    checked, one small read): a dataset's folder, or a folder holding one.

    Raises
    ------
    SourceIsShardsError
        Those shards are in the listing.
    """
    shards = [files["shard"][0] for files in by_key.values() if "shard" in files]
    if not shards:
        return
    only = all(files.keys() == {"shard"} for files in by_key.values())
    if not only and not _is_shardcat_shard(fs, shards[0]):
        return
    folders = sorted({_rel(p, prefix).rpartition("/")[0] or "." for p in shards})
    shown = ", ".join(folders[:5]) + (f" and {len(folders) - 5:,} more" if len(folders) > 5 else "")
    raise SourceIsShardsError(
        f"{redact(url)} holds shardcat's own shards ({count_of(len(shards), 'file')} named "
        f"*.shard, e.g. {_rel(shards[0], prefix)}, in {shown}): a shardcat dataset's folder, "
        "not files to index in place (their samples are records inside them, not files); "
        "nothing was indexed",
        hint=Hint(
            python="to register a dataset's shards in a catalog, rebuild its rows from them: "
            "Catalog(...).reindex(NAME, [URL, ...]) (Catalog.rebuild_history(NAME, FOLDER) with "
            "its versions); to index only the other files, give a glob or brace pattern that "
            "leaves the shards' folders out (shardcat.index_files('SRC/{images,labels}/', ...))",
            cli="to register a dataset's shards in a catalog, rebuild its rows from them: "
            "`shardcat reindex NAME FOLDER` (with the versions kept in its _versions/); to index "
            "only the other files, give a glob or brace pattern that leaves the shards' folders "
            "out (`shardcat index-files 'SRC/{images,labels}/' NAME`)",
        ),
        source=redact(url),
    )


def _is_shardcat_shard(fs: Any, path: str) -> bool:
    """Whether the file starts with a shardcat shard's magic (a file that cannot be read: no)."""
    try:
        head = fs.cat_file(path, start=0, end=len(HEADER_MAGIC))
    except (OSError, ValueError):
        return False
    return bool(head == HEADER_MAGIC)


def _sample(key: str, files: dict[str, tuple[str, int]]) -> SampleFiles:
    """A key's sample: its ``(entry, path)`` pairs sorted by entry, and their bytes."""
    if len(files) == 1:  # the common case of one file, without the general one's sort and sums
        ((entry, (path, size)),) = files.items()
        return SampleFiles(key, ((entry, path),), size)
    pairs = []
    size = 0
    for entry, (path, bytes_) in sorted(files.items()):
        pairs.append((entry, path))
        size += bytes_
    return SampleFiles(key, tuple(pairs), size)


def _fixed_root(fs: Any, pattern: str) -> str:
    """The folder keys are relative to: the pattern up to the last ``/`` before any magic."""
    m = _MAGIC.search(pattern)
    if m is not None:
        return pattern[: m.start()].rpartition("/")[0] or "/"
    stripped = pattern.rstrip("/") or "/"
    try:
        is_dir = fs.isdir(stripped)
    except OSError:
        is_dir = False
    return stripped if is_dir else stripped.rpartition("/")[0] or "/"


def _list_one(fs: Any, path: str) -> dict[str, tuple[int, str]]:
    """Files (path → size and stamp) under one brace alternative: a folder, a glob or a file."""
    if _MAGIC.search(path):
        matched = fs.glob(path, detail=True)
    elif isinstance(fs, ScandirFileSystem) and fs.isdir(path):  # the hot case: no dict per file
        return {
            p: (size, f"mtime={mtime}")
            for p, (size, mtime) in fs.file_sizes(path).items()
            if _is_data(p)
        }
    elif fs.isdir(path):
        return _files(fs.find(path, detail=True))
    else:
        matched = {path: fs.info(path)}
    out: dict[str, tuple[int, str]] = {}
    for p, info in matched.items():
        if info.get("type") == "directory":
            out.update(_files(fs.find(p, detail=True)))
        else:
            out[p] = (int(info.get("size") or 0), _stamp(info))
    return out


def _files(details: Mapping[str, Any]) -> dict[str, tuple[int, str]]:
    """The files of a folder listing; a dataset's history files (_versions/) and its column
    groups' shards (_groups/) are not data."""
    return {
        p: (int(i.get("size") or 0), _stamp(i))
        for p, i in details.items()
        if i.get("type") != "directory" and _is_data(p)
    }


def _is_data(path: str) -> bool:
    """True unless a dataset's history file (_versions/) or a column group's shard (_groups/)."""
    return (_HISTORY not in path or not is_history_file(path)) and (
        _GROUPS not in path or not is_group_shard(path)
    )


_HISTORY = f"/{HISTORY_FOLDER}/"
_GROUPS = f"/{GROUPS_FOLDER}/"


# What a listing says changes when a file is rewritten: local and most stores' modification
# time, S3's LastModified and ETag, GCS's updated and md5Hash, Azure's last_modified and etag.
_STAMP_FIELDS = ("mtime", "LastModified", "last_modified", "updated", "ETag", "etag", "md5Hash")


def _stamp(info: Mapping[str, Any]) -> str:
    """The fields of a file's listing that change when it is rewritten, as one string."""
    if len(info) == 4 and "mtime" in info:  # a local listing's (ScandirFileSystem): the hot case
        return f"mtime={info['mtime']}"
    found = [f"{name}={info[name]}" for name in _STAMP_FIELDS if info.get(name) is not None]
    if not found and info.get("created") is not None:  # fsspec's memory filesystem
        found.append(f"created={info['created']}")
    return ";".join(found)


def _rel(path: str, prefix: str) -> str:
    return path[len(prefix) :] if path.startswith(prefix) else path


def _nothing_at(alternative: str, source: str) -> str:
    part = f" (an alternative of {redact(source)})" if alternative != source else ""
    return (
        f"nothing to pack at {redact(alternative)}{part}: no file there; check the path, the "
        "pattern and the storage options (endpoint, credentials)"
    )


def plan_partitions(samples: Iterable[SampleFiles], target_bytes: int) -> list[list[SampleFiles]]:
    """Cut samples into partitions of about ``target_bytes`` of shard each, in listing order.

    A partition takes samples while its estimated shard stays within
    ``target_bytes``. A sample too large for any partition gets one of its
    own and leaves the partition being filled open, so that a big file
    between small ones does not cut their shard short.
    """
    parts: list[list[SampleFiles]] = []
    current: list[SampleFiles] = []
    size = SHARD_OVERHEAD
    for sample in samples:
        est = sample.estimated_bytes()
        if SHARD_OVERHEAD + est > target_bytes:
            parts.append([sample])
            continue
        if current and size + est > target_bytes:
            parts.append(current)
            current, size = [], SHARD_OVERHEAD
        current.append(sample)
        size += est
    if current:
        parts.append(current)
    return parts


def read_samples(
    samples: Iterable[SampleFiles], root_url: str, storage_options: Mapping[str, Any]
) -> Iterator[dict[str, Any]]:
    """The samples with their files' bytes, read on the worker that runs the task.

    Object stores get their files in concurrent batches (``fs.cat`` of up
    to 64 files or 64 MiB); a local filesystem reads file by file.

    Raises
    ------
    StorageError
        A file cannot be read (deleted or changed since the listing, no access).
    """
    fs, _ = resolve(root_url, storage_options)
    batch: list[SampleFiles] = []
    size = files = 0
    for sample in samples:
        batch.append(sample)
        size += sample.size
        files += len(sample.files)
        if files >= _READ_BATCH_FILES or size >= _READ_BATCH_BYTES:
            yield from _read_batch(fs, batch)
            batch, size, files = [], 0, 0
    if batch:
        yield from _read_batch(fs, batch)


def _read_batch(fs: Any, batch: list[SampleFiles]) -> Iterator[dict[str, Any]]:
    paths = [path for s in batch for _, path in s.files]
    try:
        if getattr(fs, "async_impl", False) and len(paths) > 1:
            data = fs.cat(paths, on_error="raise")
        elif isinstance(fs, LocalFileSystem):
            # fsspec's LocalFileSystem.cat_file costs ~6 times read_whole per small file
            data = {p: read_whole(p) for p in paths}
        else:
            data = {p: fs.cat_file(p) for p in paths}
    except OSError as e:
        where = getattr(e, "filename", None) or ", ".join(paths[:3])
        raise StorageError(
            f"cannot read source file {redact(fs.unstrip_protocol(str(where)))}: {e}; was it "
            "deleted or moved after the listing? Run the write again",
            path=redact(fs.unstrip_protocol(str(where))),
        ) from e
    for s in batch:
        yield {"__key__": s.key, **{entry: data[path] for entry, path in s.files}}
