"""A dataset's history in its own folder: written after each commit, checked by verify, read by reindex.

The catalog derives each manifest from its rows (:mod:`shardcat.catalog.manifests`);
this module moves them to and from ``<root>/_versions/`` through storage.
A commit never fails because its manifest could not be written (the version
is in the catalog already): it warns, and ``verify`` reports the gap until
``verify --write-history`` fills it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .. import config
from .._types import StorageOptions
from ..catalog.results import Problem
from ..errors import HistoryWarning, ShardcatError, StorageError
from ..format.manifest import (
    FOLDER,
    REFS_NAME,
    ManifestError,
    Refs,
    VersionManifest,
    absolute_url,
    decode_manifest,
    decode_refs,
    encode_manifest,
    encode_refs,
    manifest_name,
    parse_name,
    relative_path,
)
from ..storage.fs import is_local, local_path, protocol_of, redact
from ..storage.locations import dataset_prefix
from ..storage.removal import remove_files
from ..storage.small import list_names, put, read_or_none

if TYPE_CHECKING:
    from ..catalog.manifests import DatasetHistory
    from .catalog import Catalog

__all__ = [
    "History",
    "HistoryRebuild",
    "HistoryWrite",
    "check_history",
    "copy_history",
    "find_history",
    "folder_of",
    "has_history",
    "history_files",
    "move_files",
    "publish",
    "read_history",
    "rebuild_history",
    "remove_history",
    "write_history",
]

_READ_ONLY = ("http", "https")


def folder_of(root: str, dataset: str) -> str:
    """Where a dataset's history lies: ``<root>/_versions/<name as a file name>``.

    One folder per dataset name (escaped as shard names are): datasets may share a root.
    """
    return f"{root.rstrip('/')}/{FOLDER}/{dataset_prefix(dataset)}"


def _histories(root: str, options: StorageOptions | None) -> list[str]:
    """The history folders under ``root`` that hold manifests."""
    base = f"{root.rstrip('/')}/{FOLDER}"
    return [
        f"{base}/{name}"
        for name in list_names(base, options)
        if any(parse_name(n) is not None for n in list_names(f"{base}/{name}", options))
    ]


def find_history(root: str, dataset: str, options: StorageOptions | None) -> str | None:
    """The history folder to rebuild ``dataset`` from: its own, or the only one under ``root``.

    Raises
    ------
    ManifestError
        ``root`` holds several datasets' histories and none is ``dataset``'s.
    """
    found = _histories(root, options)
    own = folder_of(root, dataset)
    if own in found:
        return own
    if len(found) > 1:
        names = ", ".join(f.rsplit("/", 1)[-1] for f in found)
        raise ManifestError(
            f"{redact(root)} holds the histories of several datasets ({names}) and none of "
            f"{dataset!r}: rebuild under the name of the one you want",
            path=redact(root),
        )
    return found[0] if found else None


def keeps_history(root: str) -> bool:
    """Whether manifests are kept beside this root: the ``history_in_bucket`` setting is on,
    and the root is writable (not HTTP)."""
    return config.enabled("history_in_bucket") and protocol_of(root) not in _READ_ONLY


def has_history(root: str, options: StorageOptions | None) -> bool:
    """Whether ``root`` holds any dataset's version manifests."""
    return bool(_histories(root, options))


@dataclass(frozen=True, slots=True)
class History:
    """What a dataset's folder holds of its history."""

    manifests: dict[int, VersionManifest]
    checkpoints: dict[int, VersionManifest]
    refs: Refs | None
    problems: list[Problem] = field(default_factory=list)
    """Files that could not be read (corrupt, altered, foreign)."""

    def stored(self, number: int, checkpoint: bool) -> VersionManifest | None:
        return (self.checkpoints if checkpoint else self.manifests).get(number)

    def sequence(self) -> list[VersionManifest]:
        """One manifest a version, in order: its checkpoint where there is one."""
        both = {**self.manifests, **self.checkpoints}
        return [both[n] for n in sorted(both)]


@dataclass
class HistoryWrite:
    """What :func:`write_history` wrote."""

    written: list[int] = field(default_factory=list)
    present: list[int] = field(default_factory=list)
    refs_written: bool = False


def read_history(folder: str, options: StorageOptions | None) -> History:
    """Every manifest and the refs file in ``folder`` (a file that fails its checks is a problem)."""
    found: dict[bool, dict[int, VersionManifest]] = {False: {}, True: {}}
    refs = None
    problems: list[Problem] = []
    for name in list_names(folder, options):
        parsed = parse_name(name)
        if parsed is None and name != REFS_NAME:
            continue
        url = f"{folder}/{name}"
        data = read_or_none(url, options)
        if data is None:
            continue
        try:
            if parsed is None:
                refs = decode_refs(data, redact(url))
                continue
            m = decode_manifest(data, redact(url))
            if (m.version, m.checkpoint) != parsed:
                raise ManifestError(
                    f"{redact(url)} holds version {m.version}'s "
                    f"{'checkpoint' if m.checkpoint else 'manifest'}, not what its name says",
                    path=redact(url),
                )
            found[m.checkpoint][m.version] = m
        except ManifestError as e:
            problems.append(Problem(redact(url), "history-corrupt", str(e)))
    return History(found[False], found[True], refs, problems)


def publish(
    cat: Catalog, history: Iterable[DatasetHistory], options: StorageOptions | None
) -> None:
    """Write the manifests (and refs) a committed transaction made; warn on failure."""
    for h in history:
        folder = folder_of(h.root, h.name)
        for manifest in h.manifests:
            url = f"{folder}/{manifest_name(manifest.version)}"
            try:
                _publish_manifest(url, manifest, options, h.name, folder)
            except (ShardcatError, OSError) as e:
                what = f"version {manifest.version} is committed, but its manifest {redact(url)}"
                _warn(h.name, what, e)
        if h.refs is not None:
            url = f"{folder}/{REFS_NAME}"
            try:
                _publish_refs(cat, h.dataset_id, url, h.refs, options)
            except (ShardcatError, OSError) as e:
                _warn(h.name, f"the tags and expiry are committed, but {redact(url)}", e)


def _publish_manifest(
    url: str, manifest: VersionManifest, options: StorageOptions | None, name: str, folder: str
) -> None:
    """Write a version's manifest once; a first version finding another's sets that history aside.

    Another version 1 in the folder is the history of an earlier dataset of
    this name (a catalog lost and the shards registered again, or a dataset
    deleted from the catalog only): it is moved to ``<folder>~<time>``, kept
    for whoever wants it, and this dataset's history starts afresh.
    """
    data = encode_manifest(manifest)
    if put(url, data, options, once=True):
        return
    there = read_or_none(url, options)
    if there == data:
        return  # written already (write_history, or a retried publication)
    if manifest.version != 1:
        raise StorageError(
            f"{redact(url)} holds another manifest of version {manifest.version}; "
            "`shardcat verify` shows how it differs"
        )
    aside = f"{folder}~{dt.datetime.now(dt.UTC).strftime('%Y%m%dT%H%M%S%fZ')}"
    moved = move_files(folder, aside, options)
    warnings.warn(
        f"dataset {name!r}: its folder held the history of an earlier dataset of that name "
        f"({moved} files); it was moved to {redact(aside)} and this dataset's history starts "
        "at its version 1",
        HistoryWarning,
        stacklevel=5,
    )
    put(url, data, options, once=True)


_REFS_ROUNDS = 5


def _publish_refs(
    cat: Catalog, dataset_id: int, url: str, refs: Refs, options: StorageOptions | None
) -> None:
    """Write the refs file until it holds what the catalog holds after the write.

    The file is rewritten, not written once, and two processes tagging at
    once may write in the opposite order of their commits. Each writer
    reads the catalog again after its write and writes again if the file is
    behind: the last writer's check runs after every write, so the file
    ends as the catalog is (verify reports it otherwise).
    """
    from ..catalog import manifests as _manifests

    for _ in range(_REFS_ROUNDS):
        put(url, encode_refs(refs), options, once=False)
        with cat._uow() as s:
            now = _manifests.build_refs(s, dataset_id)
        if now == refs:
            return
        refs = now


def _warn(dataset: str, what: str, e: BaseException) -> None:
    warnings.warn(
        f"dataset {dataset!r}: {what} could not be written ({e}); the catalog is right, the "
        f"folder's history is behind: run `shardcat verify --write-history {dataset}` once the "
        "store is reachable",
        HistoryWarning,
        stacklevel=4,
    )


def _expected(
    cat: Catalog, dataset: str, stored: History, *, missing_only: bool = False
) -> tuple[list[VersionManifest], Refs, dict[str, int]]:
    """What the folder should hold, as the catalog has it: the refs, and per kept version its
    manifest, or its checkpoint when expired versions before it left no manifest; and the
    paths of the shards the catalog still has committed.

    ``missing_only``: only the manifests the folder lacks, and no paths (what
    :func:`write_history`, which gc runs on every dataset, needs).
    """
    from ..catalog import manifests as _manifests
    from ..catalog.datasets import find_dataset

    with cat._uow() as s:
        ds = find_dataset(s, dataset)
        out: list[VersionManifest] = []
        previous = 0
        for number in _manifests.kept_versions(s, ds.id):
            gap = range(previous + 1, number)
            checkpoint = number in stored.checkpoints or any(
                v not in stored.manifests and v not in stored.checkpoints for v in gap
            )
            previous = number
            if missing_only and stored.stored(number, checkpoint) is not None:
                continue
            m = _manifests.build_manifest(s, ds.id, number, checkpoint=checkpoint)
            if m is not None:
                out.append(m)
        paths = {} if missing_only else _manifests.committed_paths(s, ds.id)
        return out, _manifests.build_refs(s, ds.id), paths


def check_history(cat: Catalog, dataset: str, root: str) -> list[Problem]:
    """Compare the folder's history with the catalog: one problem per missing or differing file."""
    if not keeps_history(root):
        return []
    stored = read_history(folder_of(root, dataset), cat.storage_options)
    expected, refs, committed = _expected(cat, dataset, stored)
    folder = redact(folder_of(root, dataset))
    problems = list(stored.problems)
    fix = f"write it from the catalog with `shardcat verify --write-history {dataset}`"
    if not (stored.manifests or stored.checkpoints or stored.refs or problems):
        return [
            Problem(
                folder,
                "history-missing",
                f"the folder keeps no history of dataset {dataset!r} (made before shardcat kept "
                "one, or with history_in_bucket off): write it from the catalog with "
                f"`shardcat verify --write-history {dataset}`",
            )
        ]
    for m in expected:
        url = f"{folder}/{manifest_name(m.version, checkpoint=m.checkpoint)}"
        have = stored.stored(m.version, m.checkpoint)
        if have is None:
            what = (
                "checkpoint (versions before it expired without their manifests)"
                if m.checkpoint
                else "manifest"
            )
            if not any(p.url == url for p in problems):
                problems.append(
                    Problem(url, "history-missing", f"version {m.version} has no {what}: {fix}")
                )
        elif _still(have, committed, m.root) != _still(m, committed, m.root):
            problems.append(
                Problem(
                    url,
                    "history-mismatch",
                    f"version {m.version}'s manifest does not say what the catalog says "
                    f"({_difference(have, m)}); find out which is right before reindexing from it",
                )
            )
    # No refs file is the same as no tags and nothing expired.
    if (stored.refs or Refs()) != refs:
        what = "is missing" if stored.refs is None else "differs from the catalog's tags and expiry"
        problems.append(Problem(f"{folder}/{REFS_NAME}", "history-refs", f"{what}: {fix}"))
    return problems


def _still(m: VersionManifest, committed: dict[str, int], root: str | None) -> VersionManifest:
    """What of a manifest the catalog can still be held to.

    A shard retired since (no kept version reads it: expired, or added and
    removed at once) has lost its rows; one registered again by a later
    version (a reindex of its file) has new rows from then on; and the root
    the version was made at is history, not state.
    """

    def added_here(path: str) -> bool:
        at = committed.get(path)
        return at is not None and (at <= m.version if m.checkpoint else at == m.version)

    return replace(
        m,
        root=root,
        added=tuple(a for a in m.added if added_here(a.path)),
        removed=tuple(r for r in m.removed if committed.get(r.path, m.version + 1) <= m.version),
        fields=tuple(f for f in m.fields if committed.get(f.path, m.version + 1) <= m.version),
    )


def _difference(have: VersionManifest, want: VersionManifest) -> str:
    for name in ("operation", "records_added", "records_removed", "total_records"):
        if getattr(have, name) != getattr(want, name):
            return f"{name}: {getattr(have, name)!r} in the file, {getattr(want, name)!r} in the catalog"
    if have.added != want.added:
        return "the shards it added differ"
    if have.removed != want.removed:
        return "the records it removed differ"
    if have.fields != want.fields or have.field_kinds != want.field_kinds:
        return "the field values it set differ"
    return "its other fields differ"


def write_history(
    cat: Catalog, dataset: str, root: str, options: StorageOptions | None = None
) -> HistoryWrite:
    """Write every kept version's manifest the folder lacks, and the refs file.

    Raises
    ------
    StorageError
        The store refused a write (what was written stays: run it again).
    """
    if options is None:
        options = cat.storage_options
    if not keeps_history(root):
        return HistoryWrite()
    folder = folder_of(root, dataset)
    stored = read_history(folder, options)
    expected, refs, _ = _expected(cat, dataset, stored, missing_only=True)
    out = HistoryWrite(present=sorted({*stored.manifests, *stored.checkpoints}))
    for m in expected:
        url = f"{folder}/{manifest_name(m.version, checkpoint=m.checkpoint)}"
        if put(url, encode_manifest(m), options, once=True):
            out.written.append(m.version)
        else:
            out.present.append(m.version)
    if (stored.refs or Refs()) != refs:
        put(f"{folder}/{REFS_NAME}", encode_refs(refs), options, once=False)
        out.refs_written = True
    return out


@dataclass(frozen=True, slots=True)
class HistoryRebuild:
    """What :meth:`Catalog.rebuild_history` put back into the catalog."""

    dataset: str
    root: str
    folder: str
    """The history it was rebuilt from (another dataset name's, if the only one there)."""
    latest: int
    versions: list[int]
    tags: dict[str, int]
    shards: int
    gone: list[str]
    """Shards only expired versions read: not registered (gc removes what is left of them)."""
    unlisted: list[str]
    """Shard files in the folder that no manifest names (left by failed jobs: gc's to remove)."""


def rebuild_history(
    cat: Catalog, dataset: str, root: str, workers: int, history_of: str | None = None
) -> HistoryRebuild:
    """See :meth:`Catalog.rebuild_history`."""
    from ..catalog import manifests as _manifests
    from ..storage.patterns import expand_patterns
    from . import checks

    folder = find_history(root, history_of or dataset, cat.storage_options)
    if folder is None:
        raise ManifestError(
            f"{redact(root)}/{FOLDER} holds no version manifest: rebuild the dataset from its "
            "shards alone with `shardcat reindex DATASET URL...` (one version, no history)",
            path=redact(root),
        )
    stored = read_history(folder, cat.storage_options)
    if stored.problems:
        raise ManifestError(stored.problems[0].message, path=stored.problems[0].url)
    refs = stored.refs or Refs()
    sequence = stored.sequence()
    plan = _manifests.replay(sequence, refs, root)
    preps = {}
    by_kind: dict[str, list[str]] = {}
    for url, life in plan.shards.items():
        by_kind.setdefault(life.added.kind, []).append(url)
    for kind, urls in by_kind.items():
        for prep in checks.prepare_from_footers(urls, cat.storage_options, workers, kind):
            preps[prep.url] = prep
    preps = {url: preps[redact(url)] for url in plan.shards}
    with cat._uow(write=True) as s:
        latest = _manifests.rebuild(s, dataset, {m.version: m for m in sequence}, refs, plan, preps)
    named = set(plan.shards) | set(plan.gone)
    try:
        files = expand_patterns([root], cat.storage_options, folder_suffix=".shard")
    except (ShardcatError, OSError):
        files = []
    kept = set(plan.kept)
    return HistoryRebuild(
        dataset=dataset,
        root=root,
        folder=redact(folder),
        latest=latest,
        versions=plan.kept,
        tags={k: v for k, v in refs.tags.items() if v in kept},
        shards=len(plan.shards),
        gone=plan.gone,
        unlisted=sorted(f for f in files if f not in named),
    )


def move_files(source: str, target: str, options: StorageOptions | None) -> int:
    """Move every file of a history folder to another folder (copy, then remove); returns how many."""
    names = list_names(source, options)
    for name in names:
        data = read_or_none(f"{source}/{name}", options)
        if data is not None:
            put(f"{target}/{name}", data, options, once=False)
    remove_history([f"{source}/{name}" for name in names], source, options)
    return len(names)


def remove_history(urls: list[str], folder: str, options: StorageOptions | None) -> None:
    """Remove history files, then their folder and ``_versions`` if left empty (local disks)."""
    if urls:
        remove_files(urls, options)
    if is_local(folder):
        for path in (local_path(folder), os.path.dirname(local_path(folder))):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only an empty folder goes


def history_files(root: str, dataset: str, options: StorageOptions | None) -> list[str]:
    """The URLs of the dataset's history files (manifests and refs) under ``root``."""
    folder = folder_of(root, dataset)
    return [
        f"{folder}/{name}"
        for name in list_names(folder, options)
        if name == REFS_NAME or parse_name(name) is not None
    ]


def copy_history(
    source_root: str,
    destination_root: str,
    dataset: str,
    source_options: StorageOptions | None,
    destination_options: StorageOptions | None,
    moves: Mapping[str, str] | None = None,
) -> list[str]:
    """Copy the dataset's history files to another root (a move); returns the sources copied.

    ``moves``: old shard URL -> new; each manifest is written again naming the
    shards where they now are (relative to the new root). A manifest already
    at the destination is kept (write-once).
    """
    copied = []
    target = folder_of(destination_root, dataset)
    for url in history_files(source_root, dataset, source_options):
        data = read_or_none(url, source_options)
        if data is None:
            continue
        name = url.rsplit("/", 1)[-1]
        if name != REFS_NAME:
            m = decode_manifest(data, redact(url))
            data = encode_manifest(_moved(m, source_root, destination_root, moves or {}))
        put(f"{target}/{name}", data, destination_options, once=name != REFS_NAME)
        copied.append(url)
    return copied


def _moved(m: VersionManifest, old: str, new: str, moves: Mapping[str, str]) -> VersionManifest:
    def path(p: str) -> str:
        url = absolute_url(p, old)
        return relative_path(moves.get(url, url), new)

    return replace(
        m,
        added=tuple(replace(a, path=path(a.path)) for a in m.added),
        removed=tuple(replace(r, path=path(r.path)) for r in m.removed),
        fields=tuple(replace(f, path=path(f.path)) for f in m.fields),
    )
