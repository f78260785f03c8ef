"""Version manifests: a dataset's history, kept in its own folder beside the shards.

Every commit that makes a version writes ``<root>/_versions/<number>.json``
(twelve digits, write-once like a shard): what the version added and what it
removed. ``<root>/_versions/refs.json`` holds what can change later: the tags
and the expired versions. With them and the shards, ``shardcat reindex``
rebuilds every kept version and tag from the bucket alone. docs/LIFECYCLE.md
§ "History in the bucket" is the prose spec; this module declares the layout
once and checks it on every read.

A file is UTF-8 JSON ``{"manifest": BODY, "xxh64": HEX}``: ``HEX`` is the
xxHash64 (seed 0) of BODY serialised canonically (keys sorted, no spaces,
non-ASCII kept), so a changed byte is found before anything is rebuilt.
Shard paths are relative to the dataset's root when they lie under it (the
history moves with the folder), absolute URLs otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import xxhash

from ..errors import FormatError

__all__ = [
    "FOLDER",
    "MANIFEST_FORMAT",
    "REFS_FORMAT",
    "REFS_NAME",
    "AddedShard",
    "FieldValues",
    "ManifestError",
    "Refs",
    "RemovedRecords",
    "VersionManifest",
    "absolute_url",
    "decode_manifest",
    "decode_refs",
    "encode_manifest",
    "encode_refs",
    "is_history_file",
    "manifest_name",
    "parse_name",
    "relative_path",
]

FOLDER = "_versions"
"""The folder, under a dataset's root, that holds its manifests."""
MANIFEST_FORMAT = "shardcat.version/1"
REFS_FORMAT = "shardcat.refs/1"
REFS_NAME = "refs.json"
_DIGITS = 12


class ManifestError(FormatError):
    """A version manifest (or refs file) is unreadable, altered or not one of shardcat's.

    The shards are untouched; the history beside them cannot be trusted.
    """


_CHECKPOINT = ".checkpoint"


def is_history_file(path: str) -> bool:
    """Whether ``path`` is one of a dataset's history files (``.../_versions/<name>/<file>``).

    Folder listings that look for data (files to pack) leave them out.
    """
    parts = path.rstrip("/").rsplit("/", 3)
    if len(parts) < 3 or parts[-3] != FOLDER:
        return False
    return parts[-1] == REFS_NAME or parse_name(parts[-1]) is not None


def manifest_name(version: int, *, checkpoint: bool = False) -> str:
    """The file name of a version's manifest: ``000000000042.json`` (``.checkpoint.json``)."""
    return f"{version:0{_DIGITS}d}{_CHECKPOINT if checkpoint else ''}.json"


def parse_name(name: str) -> tuple[int, bool] | None:
    """(version, checkpoint) of a manifest's file name, or None for any other file."""
    stem, dot, ext = name.rpartition(".")
    checkpoint = stem.endswith(_CHECKPOINT)
    if checkpoint:
        stem = stem[: -len(_CHECKPOINT)]
    if dot and ext == "json" and len(stem) == _DIGITS and stem.isdigit():
        return int(stem), checkpoint
    return None


@dataclass(frozen=True, slots=True)
class AddedShard:
    """A shard file a version made visible."""

    path: str
    """Relative to the dataset's root, or an absolute URL."""
    file_id: str
    kind: str
    record_count: int
    size_bytes: int
    shard_number: int | None
    group: str | None = None
    """The column group whose records it holds (docs/GROUPS.md); None: the base."""


@dataclass(frozen=True, slots=True)
class RemovedRecords:
    """Records of one shard a version removed: ``offsets``, or all (``None``) still live before it."""

    path: str
    file_id: str
    offsets: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class FieldValues:
    """Declared fields' values a version set on records of one shard (``update_fields``)."""

    path: str
    file_id: str
    values: tuple[tuple[int, str, float | str | None], ...]
    """``(byte offset, field, value)`` in offset order; None: the version unset it."""


@dataclass(frozen=True, slots=True)
class VersionManifest:
    """One version of a dataset: what its commit added and removed, and its log row."""

    version: int
    operation: str
    message: str | None
    created_at: str
    """ISO 8601, UTC."""
    records_added: int
    records_removed: int
    bytes_added: int
    bytes_removed: int
    total_records: int
    total_bytes: int
    added: tuple[AddedShard, ...] = ()
    removed: tuple[RemovedRecords, ...] = ()
    root: str | None = None
    """The dataset's root when the version was made (a move changes it)."""
    checkpoint: bool = False
    """A checkpoint says what the version read, whole: every shard it read (``added``) and
    every record of them hidden by then (``removed``). Written when versions before it
    expired without leaving their manifests, it stands in for them (docs/LIFECYCLE.md §8)."""
    groups_added: tuple[str, ...] = ()
    """Column groups the version created (docs/GROUPS.md), in creation order; in a
    checkpoint, every group live at the version."""
    groups_dropped: tuple[str, ...] = ()
    """Column groups the version dropped."""
    field_kinds: tuple[tuple[str, str], ...] = ()
    """``(field, kind)`` of each field ``fields`` names (``number`` or ``text``), by name."""
    fields: tuple[FieldValues, ...] = ()
    """Values of declared fields the version set (``update_fields``), by shard path; in a
    checkpoint, every value some ``update_fields`` set that the version reads."""


@dataclass(frozen=True, slots=True)
class Refs:
    """What can change after a version is made: its tags, and which versions expired."""

    tags: Mapping[str, int] = field(default_factory=dict)
    expired: tuple[int, ...] = ()


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _seal(body: dict[str, Any]) -> bytes:
    digest = xxhash.xxh64_hexdigest(_canonical(body))
    return json.dumps({"manifest": body, "xxh64": digest}, indent=1, ensure_ascii=False).encode()


def _open(data: bytes, where: str, expected: str) -> dict[str, Any]:
    """The checked body of a sealed file, or ManifestError saying what is wrong."""
    try:
        doc = json.loads(data.decode("utf-8"))
        body, digest = doc["manifest"], doc["xxh64"]
    except (UnicodeDecodeError, ValueError, TypeError, KeyError) as e:
        raise ManifestError(
            f"{where} is not a shardcat history file ({e.__class__.__name__}: {e}); "
            "restore it from a copy, or remove it and run `shardcat verify` to see what is missing",
            path=where,
        ) from None
    if not isinstance(body, dict) or xxhash.xxh64_hexdigest(_canonical(body)) != digest:
        raise ManifestError(
            f"{where}: its checksum does not match its contents (the file was changed after it "
            "was written); restore it from a copy, or write it again from the catalog with "
            "`shardcat verify --write-history`",
            path=where,
        )
    if body.get("format") != expected:
        raise ManifestError(
            f"{where}: format {body.get('format')!r} is not {expected!r}; "
            "a newer shardcat may have written it: upgrade shardcat",
            path=where,
        )
    return body


def encode_manifest(m: VersionManifest) -> bytes:
    body: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "version": m.version,
        "operation": m.operation,
        "message": m.message,
        "created_at": m.created_at,
        "records_added": m.records_added,
        "records_removed": m.records_removed,
        "bytes_added": m.bytes_added,
        "bytes_removed": m.bytes_removed,
        "total_records": m.total_records,
        "total_bytes": m.total_bytes,
        "root": m.root,
        "checkpoint": m.checkpoint,
        "added": [
            {
                "path": a.path,
                "file_id": a.file_id,
                "kind": a.kind,
                "record_count": a.record_count,
                "size_bytes": a.size_bytes,
                "shard_number": a.shard_number,
                # Named only for a group's shard: a base shard's entry is as it always was.
                **({} if a.group is None else {"group": a.group}),
            }
            for a in m.added
        ],
        "removed": [
            {
                "path": r.path,
                "file_id": r.file_id,
                "offsets": "all" if r.offsets is None else list(r.offsets),
            }
            for r in m.removed
        ],
    }
    if m.groups_added or m.groups_dropped:
        body["groups"] = {"added": list(m.groups_added), "dropped": list(m.groups_dropped)}
    if m.fields or m.field_kinds:
        # Only a version that set values says so: every other manifest is as it always was.
        body["fields"] = {
            "kinds": dict(m.field_kinds),
            "shards": [
                {"path": f.path, "file_id": f.file_id, "values": [list(v) for v in f.values]}
                for f in m.fields
            ],
        }
    return _seal(body)


def _field_values(
    body: Mapping[str, Any],
) -> tuple[tuple[tuple[str, str], ...], tuple[FieldValues, ...]]:
    """A manifest's ``fields``: the kinds, and each shard's values typed by their field's kind."""
    fields = body.get("fields") or {}
    kinds = {str(k): str(v) for k, v in fields.get("kinds", {}).items()}
    for name, kind in kinds.items():
        if kind not in ("number", "text"):
            raise ValueError(f"field {name!r} has kind {kind!r}, not number or text")

    def typed(name: str, value: Any) -> float | str | None:
        if value is None:
            return None
        if kinds[name] == "number":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"field {name!r} holds numbers, not {value!r}")
            return float(value)
        if not isinstance(value, str):
            raise ValueError(f"field {name!r} holds text, not {value!r}")
        return value

    shards = tuple(
        FieldValues(
            str(f["path"]),
            str(f["file_id"]),
            tuple((int(o), str(n), typed(str(n), v)) for o, n, v in f["values"]),
        )
        for f in fields.get("shards", ())
    )
    return tuple(sorted(kinds.items())), shards


def decode_manifest(data: bytes, where: str) -> VersionManifest:
    """Parse and check a manifest.

    Raises
    ------
    ManifestError
        Not JSON, a checksum that does not match, another format, a missing field.
    """
    b = _open(data, where, MANIFEST_FORMAT)
    try:
        field_kinds, fields = _field_values(b)
        return VersionManifest(
            version=int(b["version"]),
            operation=str(b["operation"]),
            message=b["message"],
            created_at=str(b["created_at"]),
            records_added=int(b["records_added"]),
            records_removed=int(b["records_removed"]),
            bytes_added=int(b["bytes_added"]),
            bytes_removed=int(b["bytes_removed"]),
            total_records=int(b["total_records"]),
            total_bytes=int(b["total_bytes"]),
            root=b.get("root"),
            checkpoint=bool(b.get("checkpoint", False)),
            added=tuple(
                AddedShard(
                    str(a["path"]),
                    str(a["file_id"]),
                    str(a["kind"]),
                    int(a["record_count"]),
                    int(a["size_bytes"]),
                    None if a["shard_number"] is None else int(a["shard_number"]),
                    None if a.get("group") is None else str(a["group"]),
                )
                for a in b["added"]
            ),
            removed=tuple(
                RemovedRecords(
                    str(r["path"]),
                    str(r["file_id"]),
                    None if r["offsets"] == "all" else tuple(int(o) for o in r["offsets"]),
                )
                for r in b["removed"]
            ),
            groups_added=tuple(str(g) for g in b.get("groups", {}).get("added", ())),
            groups_dropped=tuple(str(g) for g in b.get("groups", {}).get("dropped", ())),
            field_kinds=field_kinds,
            fields=fields,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ManifestError(
            f"{where}: a field is missing or of the wrong type ({e.__class__.__name__}: {e}); "
            "restore it from a copy",
            path=where,
        ) from None


def encode_refs(refs: Refs) -> bytes:
    body = {
        "format": REFS_FORMAT,
        "tags": dict(sorted(refs.tags.items())),
        "expired": sorted(refs.expired),
    }
    return _seal(body)


def decode_refs(data: bytes, where: str) -> Refs:
    """Parse and check a refs file (ManifestError as :func:`decode_manifest`)."""
    b = _open(data, where, REFS_FORMAT)
    try:
        return Refs(
            tags={str(k): int(v) for k, v in b["tags"].items()},
            expired=tuple(int(v) for v in b["expired"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ManifestError(f"{where}: a field is missing or wrong ({e})", path=where) from None


def relative_path(url: str, root: str) -> str:
    """``url`` relative to ``root`` when it lies under it, else unchanged."""
    prefix = root.rstrip("/") + "/"
    return url[len(prefix) :] if url.startswith(prefix) else url


def absolute_url(path: str, root: str) -> str:
    """The inverse of :func:`relative_path`."""
    if "://" in path or path.startswith("/"):
        return path
    return root.rstrip("/") + "/" + path
