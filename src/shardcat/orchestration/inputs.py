"""What a write job's inputs were: a fingerprint recorded when the job begins, compared on resume.

A resumed job keeps the partitions an earlier run finished and writes the
rest from the data it is given now. If that data is not what the earlier
run had (the same keys with other values, files changed on disk), the
commit would mix two inputs without a word. So a resumable job records in
its ``properties`` (``inputs``) a fingerprint of what it was given, and a
resume whose inputs differ is refused (:class:`~shardcat.errors.JobInputsChangedError`)
unless the caller says it knows (``allow_changed_inputs``).

The fingerprint, by kind of input:

- a Dask bag or dataframe: Dask's token of the collection (its data,
  functions and partitioning: ``dask.base.tokenize``) and its partition count;
- a pandas dataframe: Dask's token of its contents;
- a list or a tuple of samples: a hash of them as pickled (streamed, about
  ten times faster than Dask's token of so many small objects);
- packed files (:func:`shardcat.from_files`, ``shardcat write SRC``): one
  digest per planned partition of every file's path, size and modification
  stamp (mtime, and the ETag or MD5 where the store lists one), with the
  file count and bytes;
- any other iterable (a generator): none, it can be read once only. A
  resume of such a job cannot check and is refused unless allowed.

Stored in the job's ``properties`` JSON, so no schema change was needed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._units import format_bytes
from .files import FileListing, SampleFiles

__all__ = ["INPUTS_PROPERTY", "InputsFingerprint", "differences", "fingerprint"]

INPUTS_PROPERTY = "inputs"
"""The key of a write job's ``properties`` holding its :class:`InputsFingerprint`."""

_SHOWN_PARTS = 3


@dataclass(frozen=True, slots=True)
class InputsFingerprint:
    """What a write job was given, as far as it can be told again.

    Attributes
    ----------
    kind:
        ``"dask"``, ``"pandas"``, ``"list"``, ``"files"`` or ``"iterable"``.
    token:
        A digest of the whole input; None where it cannot be told (``why``).
    partitions:
        How many partitions it was cut into, where known before running.
    parts:
        Packed files: one digest per partition (what names the one that changed).
    files, bytes:
        Packed files: how many, and their size.
    why:
        Why there is no token.
    """

    kind: str
    token: str | None
    partitions: int | None = None
    parts: tuple[str, ...] = field(default=(), repr=False)
    files: int | None = None
    bytes: int | None = None
    why: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The fingerprint as the job's properties store it."""
        doc: dict[str, Any] = {"kind": self.kind, "token": self.token}
        for name in ("partitions", "files", "bytes", "why"):
            if (value := getattr(self, name)) is not None:
                doc[name] = value
        if self.parts:
            doc["parts"] = list(self.parts)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> InputsFingerprint | None:
        """A stored fingerprint; None for a job that recorded none (or something else)."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str):
            return None
        return cls(
            kind=doc["kind"],
            token=doc.get("token") if isinstance(doc.get("token"), str) else None,
            partitions=_int(doc.get("partitions")),
            parts=tuple(str(p) for p in doc.get("parts") or ()),
            files=_int(doc.get("files")),
            bytes=_int(doc.get("bytes")),
            why=doc.get("why") if isinstance(doc.get("why"), str) else None,
        )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def fingerprint(
    data: Any, source: Any, *, parts: Sequence[Sequence[SampleFiles]] = ()
) -> InputsFingerprint:
    """The fingerprint of a write's inputs: ``data`` as given, ``source`` as prepared for running.

    ``parts``: packed files (``source`` a :class:`FileListing`) as the write
    cuts them into partitions. Reads no data: a Dask collection's token is
    its name, a list's is a hash of its items (the client holds them
    anyway), files are listed already.
    """
    if isinstance(source, FileListing):
        return _files(source, parts)
    kind = _kind(data)
    if kind == "iterable":
        return InputsFingerprint(
            "iterable",
            None,
            why=f"a {type(data).__name__} can be read once only; pass a list or a Dask bag",
        )
    token, why = _pickled(data) if kind == "list" else _token(data)
    partitions = getattr(data, "npartitions", None)
    return InputsFingerprint(
        kind, token, partitions=partitions if isinstance(partitions, int) else None, why=why
    )


def _kind(data: Any) -> str:
    if hasattr(data, "__dask_graph__"):
        return "dask"
    if type(data).__module__.startswith("pandas"):
        return "pandas"
    if isinstance(data, (list, tuple, range)):
        return "list"
    return "iterable"


def _token(data: Any) -> tuple[str | None, str | None]:
    """Dask's deterministic token of ``data``, or why there is none."""
    import dask
    from dask.base import tokenize

    try:
        # Deterministic or nothing: a token Dask makes up (a random one for an object it
        # cannot hash) would refuse every resume, or, worse, match by chance never.
        with dask.config.set({"tokenize.ensure-deterministic": True}):
            return tokenize(data), None
    except Exception as e:  # RuntimeError from dask, or any error an object raises
        return None, f"Dask cannot fingerprint it deterministically ({str(e)[:200]})"


class _Digest:
    """A file-like sink that hashes what is written to it."""

    def __init__(self) -> None:
        import xxhash

        self.h = xxhash.xxh3_128()

    def write(self, data: Any) -> int:
        self.h.update(data)
        return len(data)


def _pickled(data: Any) -> tuple[str | None, str | None]:
    """A hash of ``data`` as pickled, or why there is none.

    Equal samples built alike pickle alike; a set (its order varies between
    processes) or an object shared in one run and copied in the other makes
    equal data look different: a refusal, which ``allow_changed_inputs`` overrides.
    """
    import pickle

    sink = _Digest()
    try:
        pickle.Pickler(sink, protocol=5).dump(data)
    except Exception as e:  # an object that cannot be pickled: no fingerprint
        return None, f"its samples cannot be pickled to fingerprint them ({str(e)[:200]})"
    return sink.h.hexdigest(), None


def _files(listing: FileListing, parts: Sequence[Sequence[SampleFiles]]) -> InputsFingerprint:
    digests = [_part_digest(part, listing.stamps) for part in parts]
    whole = hashlib.sha256("\n".join(digests).encode()).hexdigest()[:32]
    return InputsFingerprint(
        "files",
        whole,
        partitions=len(digests),
        parts=tuple(digests),
        files=listing.files,
        bytes=listing.bytes,
    )


def _part_digest(samples: Sequence[SampleFiles], stamps: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for sample in samples:
        h.update(sample.key.encode("utf-8", "surrogatepass"))
        for entry, path in sample.files:
            h.update(f"\0{entry}\0{path}\0{stamps.get(path, '')}".encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()[:16]


def differences(
    recorded: InputsFingerprint | None,
    now: InputsFingerprint,
    *,
    parts: Sequence[Sequence[SampleFiles]] = (),
) -> str | None:
    """What differs between the inputs a job recorded and those given now; None if nothing.

    A job that recorded no fingerprint, or inputs that have none, cannot be
    compared: that is said too (the caller refuses, unless allowed).
    ``parts`` (packed files, as partitioned now) name the keys of the
    partitions that changed.
    """
    if recorded is None:
        return (
            "the job recorded no fingerprint of its inputs (it began before shardcat kept "
            "one), so they cannot be compared"
        )
    if recorded.token is None or now.token is None:
        why = now.why if now.token is None else recorded.why
        return f"its inputs cannot be compared: {why}"
    if recorded.kind != now.kind:
        return f"the job was given {_kinds(recorded.kind)}, this run {_kinds(now.kind)}"
    if recorded.token == now.token:
        return None
    if recorded.kind == "files":
        return _files_differ(recorded, now, parts)
    what = {
        "dask": "the Dask collection differs (its data, the functions that make it, or how it "
        "is partitioned)",
        "pandas": "the dataframe's contents differ",
        "list": "the samples differ",
    }.get(recorded.kind, "the inputs differ")
    counts = ""
    if recorded.partitions is not None and now.partitions is not None:
        counts = f"; {now.partitions} partitions now, {recorded.partitions} then"
    return f"{what}: token {now.token[:12]} now, {recorded.token[:12]} then{counts}"


def _kinds(kind: str) -> str:
    return {
        "dask": "a Dask collection",
        "pandas": "a pandas dataframe",
        "list": "a list of samples",
        "files": "files to pack",
        "iterable": "an iterable",
    }.get(kind, kind)


def _files_differ(
    recorded: InputsFingerprint,
    now: InputsFingerprint,
    parts: Sequence[Sequence[SampleFiles]],
) -> str:
    counts = (
        f"{now.files:,} files of {format_bytes(now.bytes or 0)} now, {recorded.files:,} of "
        f"{format_bytes(recorded.bytes or 0)} then"
        if now.files is not None and recorded.files is not None
        else ""
    )
    changed = [i for i, (a, b) in enumerate(zip(recorded.parts, now.parts)) if a != b]
    if len(recorded.parts) != len(now.parts):
        changed.append(min(len(recorded.parts), len(now.parts)))
    where = ""
    if changed and parts:
        shown = []
        for i in changed[:_SHOWN_PARTS]:
            part = parts[i] if i < len(parts) else []
            span = f"keys {part[0].key!r} .. {part[-1].key!r}" if part else "no files now"
            shown.append(f"partition {i} ({span})")
        more = f" and {len(changed) - _SHOWN_PARTS} more" if len(changed) > _SHOWN_PARTS else ""
        where = f"; changed: {', '.join(shown)}{more}"
    elif changed:
        where = f"; changed: partitions {', '.join(map(str, changed[:_SHOWN_PARTS]))}"
    return f"files were added, removed, resized or modified since the job began ({counts}{where})"
