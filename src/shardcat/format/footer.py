"""The footer: the end-of-file index (record rows, entry rows, keys, metadata).

Written after the last record in the same forward pass, so a shard is never
seeked back into; found from the trailer in the file's last 64 bytes.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ChecksumError, FormatError
from . import spec
from .checksums import crc32c
from .header import Trailer
from .spec import (
    HEADER_SIZE,
    MAX_DATA_START,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    TRAILER_SIZE,
    Codec,
    footer_layout,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["EntrySpec", "Footer", "nesting_exceeds"]


@dataclass(frozen=True, slots=True)
class EntrySpec:
    """An entry's name, content type and codec: shared by many records."""

    name: str
    content_type: str
    codec: Codec

    def to_json(self) -> list[Any]:
        return [self.name, self.content_type, self.codec.label]

    @classmethod
    def from_json(cls, value: Any) -> EntrySpec:
        """The spec stored as ``[name, content_type, codec]``; ValueError for anything else."""
        if not (
            isinstance(value, list) and len(value) == 3 and all(isinstance(v, str) for v in value)
        ):
            raise ValueError(
                f"an entry spec must be a [name, content_type, codec] array of three strings, "
                f"not {_short(value)}"
            )
        name, ctype, codec = value
        return cls(name, ctype, Codec.from_label(codec))


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether JSON-like ``value`` nests arrays and objects more than ``limit`` deep.

    Iterative, so any depth is safe to check (``json`` itself recurses); a
    container that holds itself counts as too deep.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _no_constant(name: str) -> Any:
    # The writer never writes NaN or Infinity (they are not JSON, and SQL JSON columns refuse them).
    raise ValueError(f"{name} is not a JSON value")


def parse_metadata(
    raw: bytes, *, path: str | None, offset: int
) -> tuple[dict[str, Any], list[EntrySpec]]:
    """The footer's metadata object and its entry specs; FormatError for anything unexpected."""
    try:
        metadata = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError as e:  # json recurses: a few thousand '[' exhaust the stack
        raise FormatError(
            f"footer metadata JSON is nested more than {MAX_METADATA_DEPTH} levels deep; "
            "the shard was altered or not written by shardcat",
            path=path,
            offset=offset,
        ) from e
    except ValueError as e:  # also UnicodeDecodeError and over-long integers
        raise FormatError(
            f"footer metadata is not valid JSON: {e}", path=path, offset=offset
        ) from e
    if not isinstance(metadata, dict):
        raise FormatError(
            f"footer metadata must be a JSON object, not a JSON {type(metadata).__name__}",
            path=path,
            offset=offset,
        )
    if nesting_exceeds(metadata, MAX_METADATA_DEPTH):
        raise FormatError(
            f"footer metadata JSON is nested more than {MAX_METADATA_DEPTH} levels deep; "
            "the shard was altered or not written by shardcat",
            path=path,
            offset=offset,
        )
    specs_json = metadata.get("entry_specs", [])
    if not isinstance(specs_json, list):
        raise FormatError(
            f"footer metadata 'entry_specs' must be an array, not {_short(specs_json)}",
            path=path,
            offset=offset,
        )
    try:
        specs = [EntrySpec.from_json(s) for s in specs_json]
    except ValueError as e:
        raise FormatError(f"footer metadata is not valid: {e}", path=path, offset=offset) from e
    return metadata, specs


@dataclass(slots=True)
class Footer:
    """The decoded index of a shard.

    ``records`` and ``entries`` are numpy structured arrays
    (:data:`~shardcat.format.spec.RECORD_ROW_DTYPE`,
    :data:`~shardcat.format.spec.ENTRY_ROW_DTYPE`); ``keys_blob`` holds the keys'
    UTF-8 bytes back to back.
    """

    records: np.ndarray
    entries: np.ndarray
    keys_blob: bytes
    metadata: dict[str, Any]
    specs: list[EntrySpec]
    trailer: Trailer
    path: str | None = None
    _key_starts: np.ndarray | None = field(default=None, repr=False)
    _entry_starts: np.ndarray | None = field(default=None, repr=False)
    _hash_order: np.ndarray | None = field(default=None, repr=False)

    @property
    def key_starts(self) -> np.ndarray:
        """Start of each key in ``keys_blob`` (one more than there are records)."""
        import numpy as np

        if self._key_starts is None:
            starts = np.zeros(len(self.records) + 1, dtype=np.int64)
            np.cumsum(self.records["key_length"], out=starts[1:])
            self._key_starts = starts
        return self._key_starts

    @property
    def entry_starts(self) -> np.ndarray:
        """First entry row of each record (one more than there are records)."""
        import numpy as np

        if self._entry_starts is None:
            starts = np.zeros(len(self.records) + 1, dtype=np.int64)
            np.cumsum(self.records["entry_count"], out=starts[1:])
            self._entry_starts = starts
        return self._entry_starts

    def key_bytes(self, i: int) -> bytes:
        s = self.key_starts
        return self.keys_blob[int(s[i]) : int(s[i + 1])]

    def keys(self) -> list[str]:
        s = self.key_starts.tolist()
        blob = self.keys_blob
        try:
            return [blob[a:b].decode("utf-8") for a, b in itertools.pairwise(s)]
        except UnicodeDecodeError as e:
            raise FormatError(
                f"a key in the footer index is not valid UTF-8: {e}", path=self.path
            ) from e

    def key(self, i: int) -> str:
        try:
            return self.key_bytes(i).decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(
                f"key {i} in the footer index is not valid UTF-8: {e}", path=self.path
            ) from e

    def find(self, key: bytes, key_hash: int) -> int:
        """Index of the record with this exact key, or -1."""
        import numpy as np

        if self._hash_order is None:
            self._hash_order = np.argsort(self.records["key_hash"], kind="stable")
        order = self._hash_order
        hashes = self.records["key_hash"]
        h = np.uint64(key_hash)
        lo = int(np.searchsorted(hashes, h, side="left", sorter=order))
        n = len(order)
        # Equal hashes are adjacent in hash order; compare the stored key bytes.
        while lo < n and hashes[order[lo]] == h:
            i = int(order[lo])
            if self.key_bytes(i) == key:
                return i
            lo += 1
        return -1

    # --- encoding -----------------------------------------------------------

    @staticmethod
    def encode(
        records: np.ndarray,
        entries: np.ndarray,
        keys_blob: bytes,
        metadata: dict[str, Any],
        *,
        footer_offset: int,
        data_crc: int,
        header_crc: int,
    ) -> bytes:
        """Footer plus trailer bytes, ready to append after the last record."""
        meta = json.dumps(
            metadata, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
        ).encode()
        if len(meta) > MAX_METADATA_BYTES:
            raise FormatError(
                f"shard metadata is {len(meta)} bytes as JSON; the limit is {MAX_METADATA_BYTES}"
            )
        *_, pad_at, total = footer_layout(len(records), len(entries), len(keys_blob), len(meta))
        body = b"".join(
            [
                records.astype(spec.RECORD_ROW_DTYPE, copy=False).tobytes(),
                entries.astype(spec.ENTRY_ROW_DTYPE, copy=False).tobytes(),
                keys_blob,
                meta,
                bytes(total - pad_at),
            ]
        )
        trailer = Trailer(
            footer_offset=footer_offset,
            record_count=len(records),
            entry_count=len(entries),
            keys_length=len(keys_blob),
            metadata_length=len(meta),
            data_crc=data_crc,
            footer_crc=crc32c(body),
            header_crc=header_crc,
        )
        return body + trailer.encode()

    # --- decoding -----------------------------------------------------------

    @staticmethod
    def size_from(trailer: Trailer) -> int:
        """Bytes from ``footer_offset`` to the end of the file."""
        *_, total = footer_layout(
            trailer.record_count, trailer.entry_count, trailer.keys_length, trailer.metadata_length
        )
        return total + TRAILER_SIZE

    @classmethod
    def decode(cls, body: bytes | memoryview, trailer: Trailer, *, path: str | None) -> Footer:
        """Decode the footer from ``body``: the bytes from ``footer_offset`` up to the trailer."""
        import numpy as np

        t = trailer
        entries_at, keys_at, meta_at, pad_at, total = footer_layout(
            t.record_count, t.entry_count, t.keys_length, t.metadata_length
        )
        if len(body) != total:
            raise FormatError(
                f"footer is {len(body)} bytes, the trailer promises {total}",
                path=path,
                offset=t.footer_offset,
            )
        actual = crc32c(body)
        if actual != t.footer_crc:
            raise ChecksumError(
                f"footer CRC32C mismatch (stored {t.footer_crc:#010x}, computed {actual:#010x}); "
                "the index was corrupted: rebuild it with `shardcat` from the records or restore the shard",
                path=path,
                offset=t.footer_offset,
            )
        records = np.frombuffer(body, dtype=spec.RECORD_ROW_DTYPE, count=t.record_count, offset=0)
        entries = np.frombuffer(
            body, dtype=spec.ENTRY_ROW_DTYPE, count=t.entry_count, offset=entries_at
        )
        keys_blob = bytes(body[keys_at:meta_at])
        if bytes(body[pad_at:total]) != bytes(total - pad_at):
            raise FormatError(
                "non-zero padding at the end of the footer",
                path=path,
                offset=t.footer_offset + pad_at,
            )
        metadata, specs = parse_metadata(
            bytes(body[meta_at:pad_at]), path=path, offset=t.footer_offset + meta_at
        )
        footer = cls(records, entries, keys_blob, metadata, specs, t, path)
        footer._check(path)
        return footer

    def _check(self, path: str | None) -> None:
        """Structural checks that need no record bytes."""
        import numpy as np

        t = self.trailer
        recs = self.records
        if int(self.key_starts[-1]) != t.keys_length:
            raise FormatError(
                f"record rows name {int(self.key_starts[-1])} key bytes, the blob has {t.keys_length}",
                path=path,
            )
        if int(self.entry_starts[-1]) != t.entry_count:
            raise FormatError(
                f"record rows name {int(self.entry_starts[-1])} entries, the footer has {t.entry_count}",
                path=path,
            )
        if len(recs):
            offsets = recs["offset"].astype(np.int64)
            ends = offsets + recs["length"].astype(np.int64)
            # Records tile the data region: each starts where the previous ended.
            if (
                not HEADER_SIZE <= offsets[0] <= MAX_DATA_START
                or ends[-1] != t.footer_offset
                or np.any(offsets[1:] != ends[:-1])
            ):
                raise FormatError(
                    "record rows do not tile the data region", path=path, offset=t.footer_offset
                )
        elif not HEADER_SIZE <= t.footer_offset <= MAX_DATA_START:
            raise FormatError(
                "a shard without records must have its footer right after the header", path=path
            )
        if len(self.entries):
            # Every payload lies inside its record (checked without overflow).
            lengths = np.repeat(recs["length"], recs["entry_count"].astype(np.int64))
            offs, sizes = self.entries["offset"], self.entries["size"]
            if np.any(offs > lengths) or np.any(sizes > lengths - np.minimum(offs, lengths)):
                raise FormatError(
                    "an entry row points outside its record", path=path, offset=t.footer_offset
                )
        if len(self.entries) and int(self.entries["spec"].max()) >= len(self.specs):
            raise FormatError(
                "an entry row names an unknown entry spec", path=path, offset=t.footer_offset
            )
