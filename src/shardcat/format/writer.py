"""ShardWriter: stream records into one shard in a single forward pass."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from array import array
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, BinaryIO

import numpy as np
import xxhash

from .._closing import CloseOrAbort
from .._version import __version__
from ..errors import DuplicateKeyError, InvalidKeyError, RecordTooLargeError, WriterClosedError
from . import recordcodec
from .codecs import compress, max_decompressed_bytes, should_compress
from .entries import Entry, Record, encode_value, guess_content_type, sample_key
from .footer import EntrySpec, Footer, nesting_exceeds
from .header import Header
from .info import ShardInfo
from .records import PreparedEntry
from .sink import ShardSink, as_sink
from .spec import (
    ALIGNMENTS,
    DEFAULT_ALIGNMENT,
    ENTRY_ROW_DTYPE,
    HEADER_SIZE,
    MAX_ENTRIES,
    MAX_ENTRY_SPECS,
    MAX_KEY_BYTES,
    MAX_METADATA_DEPTH,
    MAX_NAME_BYTES,
    RECORD_ROW_DTYPE,
    Codec,
    data_start,
)

__all__ = ["ShardWriter"]

_NONE = Codec.NONE

log = logging.getLogger(__name__)

# Below this, compression headers cost more than they save.
_MIN_COMPRESS = 64
# Records smaller than this are joined into one write call; larger ones are
# written part by part, since copying them costs more than the extra calls.
_JOIN_LIMIT = 64 << 10
# Joined records are gathered and handed to the file in blocks of about this
# size: one write call (and one data-CRC update) per block, not per record,
# which matters most for object-store uploads, whose write calls are Python.
_BLOCK_BYTES = 4 << 20
# checksums.key_hash without its Python frame: it is called once per record.
key_hash = xxhash.xxh64_intdigest
_RECORD_FIELDS = ("offset", "length", "key_hash", "key_length", "entry_count")
_ENTRY_FIELDS = ("offset", "size", "crc", "spec")


class ShardWriter(CloseOrAbort):
    """Write records to one shard, streaming, in one forward pass.

    Memory is bounded by the largest record, the 4 MiB of records gathered
    for the next write, and the index (40 bytes and the key per record, 32
    bytes per entry); nothing is ever seeked back to, so the target can be an
    object-store upload. Records reach the sink in 4 MiB writes: a reader of
    a file sees them once the block is written, and every one by ``close``
    (or ``abort``, which writes what it gathered and no footer where the sink
    keeps partial shards).

    Parameters
    ----------
    sink:
        Where the bytes go: a :class:`~shardcat.format.sink.ShardSink`
        (``shardcat.storage.open_writer`` builds one for a URL), or a writable
        binary stream, which is not closed unless ``close_file``.
    path:
        Name of the shard, used in error messages and in :class:`ShardInfo`.
    metadata:
        JSON-serialisable user metadata stored in the footer.
    compression:
        Default codec for entries: ``None``/``"none"``, ``"zstd"`` or ``"lz4"``.
        Already-compressed media (JPEG, PNG, ...) are stored as they are, and so
        is any entry larger than the decompression limit
        (``SHARDCAT_MAX_DECOMPRESSED_BYTES``, 1 GiB by default), even one that
        asks for a codec, so that readers can always decompress what is written.
    alignment:
        Records and payloads start on multiples of this (8 to 4096 bytes).
    shard_number:
        Position of the shard in its dataset, stored in the header.
    clock:
        Returns the time in nanoseconds (injectable for reproducible files).

    Examples
    --------
    >>> import io
    >>> buf = io.BytesIO()
    >>> with ShardWriter(buf) as w:
    ...     w.add("cat/0001", {"txt": "a cat", "json": {"label": 3}})
    >>> w.info.record_count
    1
    """

    def __init__(
        self,
        sink: ShardSink | BinaryIO,
        *,
        path: str = "<stream>",
        metadata: Mapping[str, Any] | None = None,
        compression: str | Codec | None = None,
        compression_level: int | None = None,
        alignment: int = DEFAULT_ALIGNMENT,
        shard_number: int | None = None,
        clock: Callable[[], int] = time.time_ns,
        file_id: bytes | None = None,
        close_file: bool = False,
    ) -> None:
        if alignment not in ALIGNMENTS:
            raise ValueError(f"alignment must be one of {ALIGNMENTS}, not {alignment}")
        self.path = path
        self._sink = as_sink(sink, close_file=close_file)
        self._codec = Codec.parse(compression)
        self._level = compression_level
        self._alignment = alignment
        self._user_metadata = _checked_metadata(path, dict(metadata or {}))
        self._header = Header.new(
            created_us=clock() // 1000,
            shard_number=shard_number,
            alignment=alignment,
            default_codec=self._codec,
            file_id=file_id,
        )
        if file_id is not None and len(file_id) != 16:
            raise ValueError(f"file_id must be 16 bytes (a UUID), not {len(file_id)}")
        # Readers refuse to decompress more than this: larger entries are stored as they are.
        self._max_compress = max_decompressed_bytes()
        header = self._header.encode()
        self._header = Header.decode(header, path=path)  # carries its CRC
        # Zero padding up to the alignment, so payload offsets are aligned in the file.
        pad = bytes(data_start(alignment) - HEADER_SIZE)
        self._sink.write(header + pad)
        self._pos = HEADER_SIZE + len(pad)
        self._data_crc = recordcodec.crc32c(pad)
        self._seen: set[bytes] = set()
        # Index rows as flat unsigned 64-bit arrays (no Python object kept per
        # row), turned into the footer's structured arrays at close.
        self._rows = array("Q")  # _RECORD_FIELDS per record
        self._entry_rows = array("Q")  # _ENTRY_FIELDS per entry
        self._count = 0
        self._keys: list[bytes] = []
        # Records not yet handed to the file, and their size (see _BLOCK_BYTES).
        self._block: list[bytes | bytearray | memoryview] = []
        self._block_bytes = 0
        # Per entry name whose bytes values are stored as they are (no
        # compression applies): (raw name, raw content type, spec id).
        self._plain: dict[str, tuple[bytes, bytes, int]] = {}
        self._names: dict[str, bytes] = {}
        self._types: dict[str, bytes] = {}
        self._guessed: dict[str, str] = {}
        self._specs: dict[tuple[bytes, bytes, Codec], int] = {}
        self._info: ShardInfo | None = None
        self._published: Future[ShardInfo] | None = None
        self._failed = False

    # --- state ---------------------------------------------------------------

    @property
    def sink(self) -> ShardSink:
        """Where the shard's bytes go."""
        return self._sink

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def bytes_written(self) -> int:
        """Bytes written so far (header and records; the footer comes at close)."""
        return self._pos

    @property
    def closed(self) -> bool:
        return self._info is not None or self._failed

    @property
    def info(self) -> ShardInfo:
        """The summary of the closed shard."""
        if self._info is None:
            raise WriterClosedError(
                f"{self.path}: the writer is not closed yet; call close() first"
            )
        return self._info

    # --- writing -------------------------------------------------------------

    def write(self, sample: Mapping[str, Any]) -> int:
        """Add a sample dict ``{"__key__": key, name: value, ...}``; see :meth:`add`."""
        return self.add(sample_key(sample, path=self.path), sample)

    def add(self, key: str, entries: Mapping[str, Any] | Record) -> int:
        """Append a record and return its index in the shard.

        ``entries`` maps entry names to bytes, str, JSON-able values, numpy
        arrays or :class:`Entry` objects; names starting with ``__`` are skipped.

        Raises
        ------
        InvalidKeyError
            The key or an entry name is empty, not text, or too long.
        DuplicateKeyError
            The key is already in this shard.
        WriterClosedError
            The writer was closed.
        """
        if self._info is not None or self._failed:
            raise WriterClosedError(f"{self.path}: cannot add {key!r}, the writer is closed")
        # The common record (bytes values under names seen before) in one compiled
        # call; None where this method's own path below has to run (always, in Python).
        index = recordcodec.add_plain(
            self, key, entries, key_hash, MAX_KEY_BYTES, MAX_ENTRIES, _BLOCK_BYTES
        )
        if index is not None:
            return index
        # The common key (ASCII text within the limit) without a call; the rest checked there.
        if type(key) is str and key.isascii() and 0 < len(key) <= MAX_KEY_BYTES:
            raw_key = key.encode("ascii")
        else:
            raw_key = _encode_key(key, self.path)
        if raw_key in self._seen:
            raise DuplicateKeyError(f"{self.path}: key {key!r} is already in this shard", [key])
        items = entries if type(entries) is dict else _items(entries)
        prepared: list[PreparedEntry] = []
        spec_ids: list[int] = []
        first_seen: list[tuple[str, int]] = []  # bytes entries that took the slow path
        plain = self._plain
        crc32c = recordcodec.crc32c
        for name, value in items.items():
            if type(value) is bytes:
                known = plain.get(name)
                if known is not None:  # the common case: one lookup, no Entry object
                    # tuple.__new__: a PreparedEntry without the Python frame of its __new__.
                    prepared.append(
                        _new_tuple(PreparedEntry, (known[0], known[1], _NONE, value, crc32c(value)))
                    )
                    spec_ids.append(known[2])
                    continue
            if not (isinstance(name, str) and name.startswith("__")):
                prepared.append(self._prepare(name, value, key))
                spec_ids.append(-1)  # given below, once every entry is prepared
                if type(value) is bytes:
                    first_seen.append((name, len(prepared) - 1))
        if len(prepared) > MAX_ENTRIES:
            raise RecordTooLargeError(
                f"{self.path}: record {key!r} has {len(prepared)} entries; the limit is {MAX_ENTRIES}"
            )
        if -1 in spec_ids:
            spec_ids = [s if s >= 0 else self._spec_id(p) for s, p in zip(spec_ids, prepared)]
            for name, i in first_seen:
                # Exact str names only: looking one up runs no Python code (add_plain relies on it).
                if type(name) is str and self._stores_plain(prepared[i]):
                    plain[name] = (prepared[i].name, prepared[i].content_type, spec_ids[i])

        # Everything that can reject the record happens before its first byte is written.
        h = key_hash(raw_key)
        rec = recordcodec.encode_record(raw_key, h, prepared, self._alignment)
        length = rec.length
        try:
            if length <= _JOIN_LIMIT:  # _emit's common case, inline: one frame less per record
                self._block += rec.parts
                self._block_bytes += length
                if self._block_bytes >= _BLOCK_BYTES:
                    self._write_block()
            else:
                self._emit(rec.parts, length)
        except BaseException:
            self._failed = True
            raise

        self._seen.add(raw_key)
        self._keys.append(raw_key)
        pos = self._pos
        self._rows.extend((pos, length, h, len(raw_key), len(prepared)))
        # Counts per entry kind and payload bytes come from these rows at close.
        add_entry = self._entry_rows.extend
        for off, p, sid in zip(rec.offsets, prepared, spec_ids):
            add_entry((off, len(p.payload), p.crc, sid))
        self._pos = pos + length
        self._count += 1
        return self._count - 1

    def _stores_plain(self, p: PreparedEntry) -> bool:
        """Whether every bytes value of ``p``'s entry name is stored as ``p`` was: as it is.

        True when no compression can apply to its content type (which a bytes
        value takes from the name alone), so later values skip :meth:`_prepare`.
        """
        if p.codec is not _NONE:
            return False
        return self._codec is _NONE or not should_compress(p.content_type.decode("ascii"))

    def _prepare(self, name: str, value: Any, key: str) -> PreparedEntry:
        raw_name = self._names.get(name)
        if raw_name is None:
            raw_name = self._names[name] = self._check_name(name, key)
        forced: Codec | None
        if type(value) is bytes:  # the common case, without an Entry object
            data: bytes | memoryview = value
            content_type = self._guessed.get(name) or self._guessed.setdefault(
                name, guess_content_type(name)
            )
            forced = None
        else:
            entry = value if isinstance(value, Entry) else encode_value(name, value)
            data, content_type, forced = entry.view, entry.content_type, entry.codec
        codec = forced
        if codec is None:
            use = self._codec is not Codec.NONE and len(data) >= _MIN_COMPRESS
            codec = self._codec if use and should_compress(content_type) else Codec.NONE
        payload = data
        if codec is not Codec.NONE:
            if len(data) > self._max_compress:
                # Even a requested codec: no reader would decompress this much.
                codec = Codec.NONE
            else:
                packed = compress(data, codec, self._level)
                if len(packed) < len(data) or forced is not None:
                    payload = packed
                else:
                    codec = Codec.NONE
        ctype = self._types.get(content_type)
        if ctype is None:
            if not content_type.isascii() or not 0 < len(content_type) <= MAX_NAME_BYTES:
                raise InvalidKeyError(
                    f"{self.path}: content type {content_type[:60]!r} of entry {name!r} must be "
                    f"1 to {MAX_NAME_BYTES} ASCII characters"
                )
            ctype = self._types[content_type] = content_type.encode("ascii")
        return PreparedEntry(raw_name, ctype, codec, payload, recordcodec.crc32c(payload))

    def _check_name(self, name: Any, key: str) -> bytes:
        if not isinstance(name, str) or not name:
            raise InvalidKeyError(
                f"{self.path}: record {key!r} has an entry name {name!r}; names are non-empty strings"
            )
        raw = (
            name.encode("utf-8") if name.isascii() else _encode_text(name, "entry name", self.path)
        )
        if len(raw) > MAX_NAME_BYTES:
            raise InvalidKeyError(
                f"{self.path}: entry name {name[:40]!r}… is longer than {MAX_NAME_BYTES} bytes"
            )
        return raw

    def _spec_id(self, p: PreparedEntry) -> int:
        spec = (p.name, p.content_type, p.codec)
        sid = self._specs.get(spec)
        if sid is None:
            if len(self._specs) >= MAX_ENTRY_SPECS:
                raise RecordTooLargeError(
                    f"{self.path}: more than {MAX_ENTRY_SPECS} distinct (name, type, codec) entry kinds in one shard"
                )
            sid = self._specs[spec] = len(self._specs)
        return sid

    def _emit(self, parts: list[bytes | bytearray | memoryview], length: int) -> None:
        if length <= _JOIN_LIMIT:
            self._block += parts
            self._block_bytes += length
            if self._block_bytes >= _BLOCK_BYTES:
                self._write_block()
            return
        self._write_block()
        crc32c = recordcodec.crc32c
        crc = self._data_crc
        write = self._sink.write
        for part in parts:
            write(part)
            crc = crc32c(part, crc)
        self._data_crc = crc

    def _write_block(self) -> None:
        """Hand the gathered records to the file in one write."""
        if not self._block:
            return
        blob = b"".join(self._block)  # immutable: the file may keep it
        self._block.clear()
        self._block_bytes = 0
        self._sink.write(blob)
        self._data_crc = recordcodec.crc32c(blob, self._data_crc)

    # --- closing -------------------------------------------------------------

    def _footer_metadata(self, specs: list[EntrySpec], entries: np.ndarray) -> dict[str, Any]:
        counts = np.bincount(entries["spec"].astype(np.int64), minlength=len(specs)).tolist()
        types: dict[str, int] = {}
        for spec, count in zip(specs, counts):
            types[spec.content_type] = types.get(spec.content_type, 0) + count
        return {
            "writer": f"shardcat {__version__}",
            "user": self._user_metadata,
            "entry_specs": [s.to_json() for s in specs],
            "content_types": types,
            "payload_bytes": int(entries["size"].sum(dtype=np.uint64)),
            "compression": self._codec.label,
        }

    def update_metadata(self, values: Mapping[str, Any]) -> None:
        """Add ``values`` to the user metadata the footer will carry (before :meth:`close`).

        For what is known only once the records are in (a rolling writer marks
        the last shard of its batch).

        Raises
        ------
        WriterClosedError
            If the shard is already closed.
        TypeError
            If the merged metadata is not JSON-serialisable.
        ValueError
            If it nests deeper than readers accept.
        """
        if self.closed:
            raise WriterClosedError(f"{self.path}: the shard is closed; its metadata is written")
        self._user_metadata = _checked_metadata(self.path, {**self._user_metadata, **values})

    def close(self) -> ShardInfo:
        """Write the footer and trailer, publish the shard and return its summary (idempotent).

        Raises
        ------
        WriterClosedError
            An earlier write failed (the shard was given up).
        Exception
            What the sink raised writing the footer or publishing the shard
            (nothing is published then), again on every later call.
        """
        return self._publish(in_background=False).result()

    def close_in_background(self) -> Future[ShardInfo]:
        """Finish the shard here; publish it on a thread where publishing is a wait for the store.

        The footer is written before this returns (its errors are raised
        here). Where the sink's publication is mostly a wait without the GIL
        (:attr:`ShardSink.publishes_in_background`: a local file's ``fsync``
        and link, an S3 PUT through obstore) it runs on a thread and the
        caller can encode the next shard meanwhile; elsewhere it happens
        before this returns. Either way the future's ``result()`` is the
        shard's summary once it is published, or raises the publication's
        error (nothing is published then). :meth:`close` waits for it.
        """
        return self._publish(in_background=True)

    def _publish(self, *, in_background: bool) -> Future[ShardInfo]:
        if self._published is not None:
            return self._published
        info = self._finish()
        sink = self._sink
        future = self._published = Future()

        def publish() -> None:
            try:
                sink.close()
            except BaseException as e:  # the caller's result() raises it
                future.set_exception(e)
            else:
                future.set_result(info)

        if not (in_background and sink.publishes_in_background):
            publish()
            return future
        # Not a daemon: a shard in flight is published before the interpreter exits.
        thread = threading.Thread(target=publish, name=f"shardcat-publish {self.path}")
        try:
            thread.start()
        except RuntimeError:  # no thread can start (the interpreter is exiting): publish here
            publish()
        return future

    def _finish(self) -> ShardInfo:
        """Write the rest of the records and the footer (the shard is given up if that fails)."""
        if self._info is not None:
            return self._info
        if self._failed:
            with contextlib.suppress(Exception):
                self._sink.abort()
            raise WriterClosedError(
                f"{self.path}: an earlier write failed; the shard is incomplete and must be rewritten"
            )
        try:
            self._write_block()
            n = self._count
            records = _table(self._rows, RECORD_ROW_DTYPE, _RECORD_FIELDS)
            entries = _table(self._entry_rows, ENTRY_ROW_DTYPE, _ENTRY_FIELDS)
            specs = [EntrySpec(n.decode("utf-8"), t.decode("ascii"), c) for n, t, c in self._specs]
            metadata = self._footer_metadata(specs, entries)
            keys_blob = b"".join(self._keys)
            tail = Footer.encode(
                records,
                entries,
                keys_blob,
                metadata,
                footer_offset=self._pos,
                data_crc=self._data_crc,
                header_crc=self._header.crc,
            )
            self._sink.write(tail)
            self._sink.flush()
        except BaseException:
            self._failed = True
            with contextlib.suppress(Exception):  # the error that led here is the one to see
                self._sink.abort()
            raise
        info = ShardInfo(
            path=self.path,
            header=self._header,
            size=self._pos + len(tail),
            data_crc=self._data_crc,
            footer_crc=int.from_bytes(tail[-24:-20], "little"),
            metadata=metadata,
            keys=[k.decode("utf-8") for k in self._keys],
            records=records,
            entries=entries,
            specs=specs,
        )
        self._info = info
        self._seen.clear()
        log.debug("closed %s: %d records, %d bytes", self.path, n, info.size)
        return info

    def abort(self) -> None:
        """Give up on the shard: no footer is written, so readers reject it.

        A sink that keeps partial shards (a plain file) still gets the records
        gathered so far: they stay salvageable (``iter_partial``), as if
        written one by one. Once closed (published, or being published by
        :meth:`close_in_background`), nothing changes.
        """
        if self._info is not None:
            return
        if not self._failed and self._sink.keeps_partial:
            with contextlib.suppress(Exception):  # the error that led here is the one to see
                self._write_block()
        self._failed = True
        self._block.clear()
        self._sink.abort()


_new_tuple = tuple.__new__


def _items(entries: Mapping[str, Any] | Record) -> Mapping[str, Any]:
    return entries.entries if isinstance(entries, Record) else entries


def _table(flat: array[int], dtype: np.dtype[Any], fields: tuple[str, ...]) -> np.ndarray:
    """A structured array of ``dtype`` from rows stored flat, ``len(fields)`` values a row."""
    columns = np.frombuffer(flat, dtype=np.uint64).reshape(-1, len(fields))
    table = np.zeros(len(columns), dtype=dtype)
    for i, field in enumerate(fields):
        table[field] = columns[:, i]
    return table


def _encode_text(text: str, what: str, path: str) -> bytes:
    try:
        return text.encode("utf-8", "strict")
    except UnicodeEncodeError as e:
        raise InvalidKeyError(
            f"{path}: {what} {text!r} is not valid Unicode text ({e.reason})"
        ) from None


def _encode_key(key: Any, path: str) -> bytes:
    if not isinstance(key, str):
        raise InvalidKeyError(f"{path}: keys are strings, got {type(key).__name__} {key!r}")
    if not key:
        raise InvalidKeyError(f"{path}: empty key; every record needs a non-empty key")
    raw = key.encode("utf-8") if key.isascii() else _encode_text(key, "key", path)
    if len(raw) > MAX_KEY_BYTES:
        raise InvalidKeyError(
            f"{path}: key {key[:40]!r}… is {len(raw)} bytes; the limit is {MAX_KEY_BYTES}"
        )
    return raw


def _checked_metadata(path: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` as a reader will see it (tuples become lists, keys strings), or an error now."""
    if nesting_exceeds(metadata, MAX_METADATA_DEPTH - 1):
        # Checked before json.dumps, which would recurse to the end of the stack.
        raise ValueError(
            f"{path}: shard metadata nests more than {MAX_METADATA_DEPTH - 1} levels of "
            "objects and arrays (or contains itself); readers refuse deeper metadata"
        )
    try:  # fail now, not at close after writing everything
        text = json.dumps(metadata, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{path}: shard metadata must be JSON-serialisable: {e}") from e
    result: dict[str, Any] = json.loads(text)
    return result
