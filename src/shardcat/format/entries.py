"""Entries: the named parts of a record, and how Python values become bytes.

A sample is a key plus entries such as ``{"jpg": b"...", "json": {...},
"npy": np.ndarray}``. Each entry is stored with a content type and a codec,
so a reader decodes it without guessing from a file extension.
"""

from __future__ import annotations

import ast
import codecs
import functools
import io
import json
import mimetypes
import sys
import threading
import warnings
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import EntryNotFoundError, FormatError, InvalidKeyError, SampleDecodeError
from .codecs import decompress
from .spec import Codec

# numpy loads with the first .npy entry: a sample without arrays needs none of it.
if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "KEY",
    "NPY_TYPE",
    "RAW_ARRAY_TYPE",
    "Entry",
    "Record",
    "check_sample",
    "check_value",
    "decode_value",
    "decodes_to_bytes",
    "encode_value",
    "raw_array_type",
    "sample_key",
]

KEY = "__key__"
"""The name under which a sample dict carries its key: ``{"__key__": "img/1", "jpg": ...}``."""

NPY_TYPE = "application/x-npy"
JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
OCTET_TYPE = "application/octet-stream"
RAW_ARRAY_TYPE = "application/x-raw-array"
"""Numbers as a C-order array's bytes, no header: ``application/x-raw-array; dtype=<i8``
(a scalar: decoded to a Python number) or ``...; dtype=<f4; shape=3,4`` (a numpy array).
MDS and LitData store numeric columns so; an entry indexed in place is their bytes."""

# Names that mimetypes does not know, or knows differently on some systems.
_EXTRA_TYPES = {
    "npy": NPY_TYPE,
    "npz": "application/x-npz",
    "json": JSON_TYPE,
    "txt": TEXT_TYPE,
    "text": TEXT_TYPE,
    "cls": TEXT_TYPE,
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "png": "image/png",
    "webp": "image/webp",
    "msgpack": "application/msgpack",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "mp4": "video/mp4",
}


@functools.lru_cache(maxsize=4096)
def guess_content_type(name: str) -> str:
    """Content type of an entry from its name's extension (``"jpg"``, ``"left.jpg"``)."""
    ext = name.rsplit(".", 1)[-1].lower()
    known = _EXTRA_TYPES.get(ext)
    if known is not None:
        return known
    guessed, _ = _mimetypes().guess_type(f"x.{ext}", strict=True)
    return guessed or OCTET_TYPE


@functools.cache
def _mimetypes() -> mimetypes.MimeTypes:
    # Python's built-in table only: the host's /etc/mime.types must not change the
    # bytes we write. Made on first use: making one reads the host's files (~6 ms).
    return mimetypes.MimeTypes(filenames=())


class Entry:
    """One named entry of a record.

    ``Entry(data, content_type)`` describes an entry to write; readers return
    entries whose bytes are views of the shard's buffer (no copy until asked).

    Parameters
    ----------
    data:
        The entry's decoded bytes.
    content_type:
        A MIME type such as ``"image/jpeg"``; guessed from the entry name when
        written through a plain value.
    codec:
        Force a compression for this entry (``"none"``, ``"zstd"``, ``"lz4"``);
        ``None`` lets the writer decide.
    """

    __slots__ = ("_raw", "_stored", "codec", "content_type")

    def __init__(
        self,
        data: bytes | bytearray | memoryview,
        content_type: str = OCTET_TYPE,
        codec: str | Codec | None = None,
        *,
        _stored: memoryview | None = None,
    ) -> None:
        self.content_type = content_type
        self.codec: Codec | None = None if codec is None else Codec.parse(codec)
        self._raw: bytes | bytearray | memoryview | None = data
        self._stored = _stored

    @staticmethod
    def from_stored(
        stored: memoryview,
        content_type: str,
        codec: Codec,
        *,
        name: str | None = None,
        path: str | None = None,
        offset: int | None = None,
    ) -> Entry:
        """An entry read from a shard, from its bytes as written (maybe compressed).

        For readers: the shard reader and the catalog's lookups build every
        entry they return with it. Nothing is copied; a compressed entry is
        decompressed when its bytes are first asked for.

        Parameters
        ----------
        stored:
            The entry's payload as stored in the shard (after its CRC was checked).
        content_type:
            The entry's MIME type.
        codec:
            How ``stored`` is compressed.
        name, path, offset:
            The entry's name, the shard's path and the payload's offset,
            named in the errors of a failed decompression.

        Returns
        -------
        Entry
            An entry whose ``view`` is ``stored`` itself when uncompressed.
        """
        if codec is Codec.NONE:
            return _StoredEntry(stored, content_type, codec)
        return _CompressedEntry(stored, content_type, codec, name, path, offset)

    @property
    def view(self) -> memoryview:
        """The decoded bytes as a memoryview: zero-copy for uncompressed entries.

        Raises
        ------
        FormatError
            A compressed entry cannot be decompressed, or declares a size above
            the limit (:class:`~shardcat.errors.DecompressionLimitError`).
        """
        raw = self._raw
        if raw is None:
            raw = self._raw = self._decompressed()
        return raw if isinstance(raw, memoryview) else memoryview(raw)

    def _decompressed(self) -> bytes:
        # Only entries read from a shard lack raw bytes; they have both of these.
        return decompress(self._stored, self.codec)  # type: ignore[arg-type]

    def __reduce__(self) -> tuple[Any, ...]:
        # An entry read from a shard is a view of its read buffer, which does not pickle: sent
        # to another process (a Dask task's result), any entry carries its decoded bytes.
        return (Entry, (self.data, self.content_type, self.codec if type(self) is Entry else None))

    @property
    def data(self) -> bytes:
        """The decoded bytes."""
        raw = self._raw
        if isinstance(raw, bytes):
            return raw
        return bytes(self.view)

    def __bytes__(self) -> bytes:
        return self.data

    def __len__(self) -> int:
        return self.view.nbytes

    def decode(self, *, writable: bool = False) -> Any:
        """The entry as a Python value, chosen by content type.

        JSON → ``dict``/``list``…, text → ``str``, ``application/x-npy`` →
        ``np.ndarray``, anything else → ``bytes``.

        Parameters
        ----------
        writable:
            Only changes ``.npy`` entries. By default an array is a read-only
            view of the bytes read (zero-copy; ``torch.from_numpy`` warns about
            such arrays, and writing to one raises ``ValueError``). With
            ``writable=True`` it is a writable copy of its own.

        Raises
        ------
        SampleDecodeError
            The bytes are not what the content type says (see
            :func:`decode_value`); a ``ValueError``. A lone entry names no
            key: decode the whole record (``record.decode()``) for an error
            that names the key, entry and shard.
        """
        view = self.view
        try:
            return decode_value(view, self.content_type, writable=writable)
        except SampleDecodeError as e:
            raise self._located(e) from e.__cause__

    def _located(self, error: SampleDecodeError) -> SampleDecodeError:
        """``error`` with what this entry knows of where it is.

        An entry holds no key (it would cost every lookup a slot and a store):
        a compressed one knows its name and shard; ``Record.decode`` and the
        readers name the key.
        """
        name = getattr(self, "_name", None)  # a compressed entry knows its name and shard
        return error.locate(entry=name, path=getattr(self, "_path", None))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Entry):
            return NotImplemented
        return self.content_type == other.content_type and self.view == other.view

    def __repr__(self) -> str:
        codec = "" if self.codec in (None, Codec.NONE) else f", stored {self.codec.label}"
        return f"Entry({len(self)} bytes, {self.content_type!r}{codec})"


class _StoredEntry(Entry):
    """An entry read from a shard; a cheap constructor for the streaming hot path."""

    __slots__ = ()

    def __init__(self, stored: memoryview, content_type: str, codec: Codec) -> None:
        self.content_type = content_type
        self.codec = codec
        self._stored = stored
        self._raw = stored if codec is Codec.NONE else None

    def __len__(self) -> int:
        # Once per sample on streaming reads: the bytes' length without the view property.
        raw = self._raw
        if raw is None:
            return self.view.nbytes
        return raw.nbytes if isinstance(raw, memoryview) else len(raw)


class _CompressedEntry(_StoredEntry):
    """A compressed entry read from a shard, decompressed on first use; knows where it came from."""

    __slots__ = ("_name", "_offset", "_path")

    def __init__(
        self,
        stored: memoryview,
        content_type: str,
        codec: Codec,
        name: str | None,
        path: str | None,
        offset: int | None,
    ) -> None:
        self.content_type = content_type
        self.codec = codec
        self._stored = stored
        self._raw = None
        self._name = name
        self._path = path
        self._offset = offset

    def _decompressed(self) -> bytes:
        return decompress(
            self._stored,  # type: ignore[arg-type]
            self.codec,  # type: ignore[arg-type]
            name=self._name,
            path=self._path,
            offset=self._offset,
        )


def encode_value(name: str, value: Any) -> Entry:
    """Turn a sample value into an :class:`Entry`.

    bytes-like → as is (content type from the name); ``str`` → UTF-8 text;
    ``dict``/``list``/numbers/bools/``None`` → JSON; ``np.ndarray`` → ``.npy``.
    """
    if isinstance(value, Entry):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return Entry(value, guess_content_type(name))
    if isinstance(value, str):
        ctype = guess_content_type(name)
        if ctype == OCTET_TYPE or not ctype.startswith(("text/", "application/json")):
            ctype = TEXT_TYPE
        return Entry(value.encode("utf-8"), ctype)
    numpy = sys.modules.get("numpy")  # not loaded: the value cannot be one of its arrays
    if numpy is not None:
        if isinstance(value, numpy.ndarray):
            return Entry(_npy_bytes(value), NPY_TYPE)
        if isinstance(value, numpy.generic):
            return Entry(_npy_bytes(numpy.asarray(value)), NPY_TYPE)
    if value is None or isinstance(value, (dict, list, tuple, int, float, bool)):
        return Entry(
            json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode(), JSON_TYPE
        )
    raise TypeError(
        f"entry {name!r}: cannot store a {type(value).__name__}; pass bytes, str, "
        "a JSON-serialisable value, a numpy array or shardcat.Entry(bytes, content_type)"
    )


def _npy_bytes(array: np.ndarray) -> bytes:
    if array.dtype.hasobject:
        raise TypeError("numpy arrays of Python objects cannot be stored; convert them first")
    import numpy as np

    buf = io.BytesIO()
    with warnings.catch_warnings():
        # Field names beyond Latin-1 need .npy 3.0; numpy warns that old numpy cannot read it.
        warnings.simplefilter("ignore", UserWarning)
        np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def decode_value(view: memoryview, content_type: str, *, writable: bool = False) -> Any:
    """An entry's bytes as a Python value, chosen by its content type.

    A ``.npy`` array is a read-only view of ``view``, or with ``writable`` a
    writable copy.

    Raises
    ------
    SampleDecodeError
        The bytes are not what the content type says: invalid JSON or text,
        or a JSON value or ``.npy`` array that cannot be decoded safely (a
        ``FormatError``, a ``ValueError``; the decoder's own error,
        ``json.JSONDecodeError`` or ``UnicodeDecodeError``, is its cause).
        It knows no key or shard: callers that do add them.
    """
    base = content_type.split(";", 1)[0].strip()
    try:
        if base == NPY_TYPE:
            array = _npy_view(view)
            # A copy, never setflags(write=True): the view shares the shard's read buffer.
            return array.copy(order="K") if writable else array
        if base == JSON_TYPE or base.endswith("+json"):
            try:
                return json.loads(bytes(view))
            except RecursionError as e:  # json recurses once per level of nesting
                raise FormatError(
                    "JSON entry is nested too deeply to decode; read its bytes instead"
                ) from e
        if base.startswith("text/"):
            return str(view, _charset(content_type))
        if base == RAW_ARRAY_TYPE:
            return _raw_array(view, content_type, writable)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, FormatError
        raise SampleDecodeError(_reason(e, len(view)), content_type=content_type) from e
    return bytes(view)


def _reason(error: ValueError, size: int) -> str:
    """What is wrong with an entry's ``size`` bytes, in one line."""
    if isinstance(error, json.JSONDecodeError):
        if size == 0:
            return "it is empty (0 bytes), not a JSON value"
        return f"its {size:,} bytes are not valid JSON ({error})"
    if isinstance(error, UnicodeDecodeError):
        return f"its {size:,} bytes are not valid {error.encoding} text ({error.reason} at byte {error.start})"
    detail = error.detail if isinstance(error, FormatError) else str(error)
    return f"its {size:,} bytes: {detail}"


def check_value(name: str, value: Any) -> str | None:
    """Why an entry about to be written would not decode, or None: the write-time check.

    Only entries that declare a content type the decoders parse are
    checked (a bytes value's type comes from its name: ``json`` by a JSON
    parse, ``npy`` by its header, text by its charset); anything else is
    stored as given, and values shardcat encodes itself decode by construction.
    """
    if type(value) is bytes:  # the common case: a file's bytes, typed by the entry's name
        ctype = _checked_type(name)
        if ctype is None:
            return None
        if ctype == JSON_TYPE:
            try:  # json.loads of the bytes themselves: no view, no copy
                json.loads(value)
                return None
            except (ValueError, RecursionError):
                pass  # the reason, as a reader would give it, below
        view = memoryview(value)
    elif isinstance(value, Entry):
        ctype = value.content_type
        if decodes_to_bytes(ctype):
            return None
        view = value.view
    elif isinstance(value, (bytearray, memoryview)):
        checked = _checked_type(name)
        if checked is None:
            return None
        ctype, view = checked, memoryview(value)
    else:
        return None
    try:
        decode_value(view, ctype)
    except SampleDecodeError as e:
        return e.reason
    return None


def check_sample(
    sample: Mapping[str, Any], dataset: str | None = None, key: str | None = None
) -> None:
    """Refuse a sample about to be written whose entries would not decode (:func:`check_value`).

    ``key``: the sample's key, if ``sample`` has no ``__key__`` (entries only).
    Cheap where nothing is parsed: a dict lookup per bytes entry, cached by name.

    Raises
    ------
    InvalidKeyError
        The sample has no ``__key__`` (and no ``key`` was given): checked
        first, as the writer would, so a sample's first fault is the one named.
    SampleDecodeError
        Naming the dataset, the sample's key and the first such entry.
    """
    if key is None:
        key = sample_key(sample)
    for name, value in sample.items():
        if type(value) is bytes:
            if _checked_type(name) is None:
                continue
        elif not isinstance(value, (bytearray, memoryview, Entry)):
            continue
        reason = check_value(name, value)
        if reason is not None:
            ctype = value.content_type if isinstance(value, Entry) else _checked_type(name)
            raise SampleDecodeError(
                reason,
                content_type=ctype or "",
                dataset=dataset,
                key=key,
                entry=name,
                writing=True,
            )


@functools.lru_cache(maxsize=4096)
def _checked_type(name: str) -> str | None:
    """The content type a bytes value under ``name`` is written with, if it is one decoders parse."""
    ctype = guess_content_type(name)
    return None if decodes_to_bytes(ctype) else ctype


@functools.lru_cache(maxsize=256)
def decodes_to_bytes(content_type: str) -> bool:
    """Whether :func:`decode_value` returns an entry of this content type as its bytes, unchanged."""
    base = content_type.split(";", 1)[0].strip()
    return not (
        base in (NPY_TYPE, JSON_TYPE, RAW_ARRAY_TYPE)
        or base.endswith("+json")
        or base.startswith("text/")
    )


def raw_array_type(dtype: str, shape: tuple[int, ...] | None = None) -> str:
    """The content type of :data:`RAW_ARRAY_TYPE` values of ``dtype`` (a scalar if no ``shape``)."""
    import numpy as np

    text = f"{RAW_ARRAY_TYPE}; dtype={np.dtype(dtype).str}"
    return text if shape is None else f"{text}; shape={','.join(map(str, shape))}"


@functools.lru_cache(maxsize=256)
def _raw_params(content_type: str) -> tuple[np.dtype[Any], tuple[int, ...] | None]:
    import numpy as np

    params = dict(p.strip().partition("=")[::2] for p in content_type.split(";")[1:])
    try:
        dtype = np.dtype(params["dtype"].strip())
        if dtype.hasobject:
            raise ValueError("object arrays are not raw numbers")
        shape = params.get("shape")
        dims = None if shape is None else tuple(int(d) for d in shape.split(",") if d.strip())
    except (KeyError, TypeError) as e:
        raise ValueError(f"content type {content_type!r} names no valid dtype") from e
    return dtype, dims


def _raw_array(view: memoryview, content_type: str, writable: bool) -> Any:
    import numpy as np

    dtype, shape = _raw_params(content_type)
    array = np.frombuffer(view, dtype)  # a size that is no multiple of the dtype: ValueError
    if shape is None:
        if len(array) != 1:
            raise ValueError(f"{len(view)} bytes are not one {dtype} value")
        return array[0].item()
    array = array.reshape(shape)
    return array.copy() if writable else array


@functools.lru_cache(maxsize=256)
def _charset(content_type: str) -> str:
    """The ``charset=`` parameter of a content type, if Python knows it; else UTF-8."""
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "charset":
            try:
                return codecs.lookup(value.strip().strip('"')).name
            except LookupError:
                break
    return "utf-8"


_NPY_HEADER_LOCK = threading.Lock()


@functools.lru_cache(maxsize=256)
def _npy_header(text: str) -> tuple[np.dtype[Any], tuple[int, ...], bool]:
    """A .npy header's dtype, shape and order; a dataset's arrays repeat a few headers.

    One thread at a time: CPython 3.11 keeps the AST converter's recursion
    depth per interpreter, not per thread (gh-106905), so two threads in
    ``literal_eval`` at once can fail with a SystemError.
    """
    import numpy as np

    with _NPY_HEADER_LOCK:
        header = ast.literal_eval(text)
    dtype = np.lib.format.descr_to_dtype(header["descr"])
    shape = tuple(int(dim) for dim in header["shape"])
    return dtype, shape, bool(header["fortran_order"])


def _npy_view(view: memoryview) -> np.ndarray:
    """A read-only array viewing the .npy bytes (np.load would need a file and copy).

    .npy 1.0 and 2.0 headers are Latin-1, 3.0 headers UTF-8 (field names
    beyond Latin-1); all are a Python dict literal after a length prefix.
    Anything unexpected in it is a FormatError (a ValueError): the header is
    data, and an array never views more bytes than the payload has.
    """
    data = bytes(view[:12])
    if data[:6] != b"\x93NUMPY" or len(data) < 10:
        raise FormatError("not a .npy array: bad magic")
    major = data[6]
    if major == 1:
        size, start = int.from_bytes(data[8:10], "little"), 10
    elif major in (2, 3):
        size, start = int.from_bytes(data[8:12], "little"), 12
    else:
        raise FormatError(f"unsupported .npy version {major}.{data[7]}")
    if start + size > len(view):
        raise FormatError(f".npy header of {size} bytes overruns the {len(view)}-byte entry")
    try:
        text = str(view[start : start + size], "utf-8" if major == 3 else "latin-1")
        dtype, shape, fortran = _npy_header(text)
    except (SyntaxError, ValueError, TypeError, KeyError, MemoryError, RecursionError) as e:
        raise FormatError(f"not a .npy array: its header is not valid ({e!r:.200})") from e
    count = 1
    for dim in shape:
        if dim < 0:
            raise FormatError(f"not a .npy array: negative dimension in shape {shape}")
        count *= dim
    available = len(view) - start - size
    if count * dtype.itemsize > available:
        raise FormatError(
            f".npy array of shape {shape} and dtype {dtype} needs {count * dtype.itemsize} "
            f"bytes, the entry holds {available}"
        )
    import numpy as np

    try:
        array = np.frombuffer(view, dtype=dtype, count=count, offset=start + size)
        return array.reshape(shape, order="F" if fortran else "C")
    except (ValueError, TypeError) as e:
        raise FormatError(f"not a .npy array: {e}") from e


class Record(Mapping[str, Entry]):
    """A record read back from a shard: its key and its entries, in write order.

    A read-only :class:`~collections.abc.Mapping` from entry name to
    :class:`Entry`: ``record["jpg"]``, ``"jpg" in record``, ``list(record)``
    (the entry names, in write order), ``record.items()``,
    ``record.get("txt")`` and ``dict(record)`` (names → entries) all work.
    The key is not an entry: it is ``record.key``. A name the record has no
    entry for raises :class:`~shardcat.errors.EntryNotFoundError`, a
    ``KeyError`` whose message lists the entries it has. :meth:`decode` gives
    the sample as plain values, ``{"__key__": key, name: value, ...}``.

    Two records are equal when their keys and entries are; a record never
    equals a plain dict (it has a key, a dict has none).
    """

    __slots__ = ("entries", "index", "key", "length", "offset")

    def __init__(
        self,
        key: str,
        entries: dict[str, Entry],
        index: int = -1,
        offset: int = -1,
        length: int = 0,
    ) -> None:
        self.key = key
        self.entries = entries
        self.index = index
        self.offset = offset
        self.length = length

    def __getitem__(self, name: str) -> Entry:
        try:
            return self.entries[name]
        except KeyError:
            raise self._no_entry(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        # Not Mapping.get: a missing optional entry is common (rec.get("cls")),
        # and its KeyError would build the message of __getitem__'s.
        return self[name] if name in self else default  # noqa: SIM401 (this is get)

    def _no_entry(self, name: object) -> EntryNotFoundError:
        """The error for a name this record has no entry for (the compiled codec's too)."""
        return EntryNotFoundError(name, key=self.key, names=tuple(self))

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def _names(self) -> tuple[str, ...]:
        """The entry names in order, as a tuple (records of one layout may share it)."""
        return tuple(self.entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def decode(self, *, writable: bool = False) -> dict[str, Any]:
        """The sample as a dict: ``{"__key__": key, name: decoded value, ...}``.

        ``writable=True`` makes ``.npy`` arrays writable copies (see :meth:`Entry.decode`).
        """
        out: dict[str, Any] = {KEY: self.key}
        try:
            for name, entry in self.entries.items():
                out[name] = entry.decode(writable=writable)
        except SampleDecodeError as e:
            raise self._decode_error(e, name) from e.__cause__
        return out

    def _decode_error(self, error: SampleDecodeError, name: str) -> SampleDecodeError:
        """``error`` of entry ``name``, naming this record's key (and shard, where it knows it)."""
        return error.locate(key=self.key, entry=name, path=getattr(self, "_path", None))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return self.key == other.key and self.entries == other.entries

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {e.content_type} {len(e)} B" for n, e in self.entries.items())
        return f"Record({self.key!r}, {{{parts}}})"


def sample_key(sample: Mapping[str, Any], *, path: str | None = None) -> Any:
    """The key of a sample dict ``{"__key__": key, name: value, ...}`` (checked when added).

    A :class:`Record` read back from a shard is a sample too: its key is ``record.key``.

    The one check of the ``__key__`` rule, for every writer and task.

    Raises
    ------
    InvalidKeyError
        If the sample has no ``__key__``; the message lists its first names,
        after ``path`` (the shard being written) when given.
    """
    if isinstance(sample, Record):  # a record read back: its key is an attribute, not an entry
        return sample.key
    if KEY not in sample:
        where = f"{path}: " if path else ""
        raise InvalidKeyError(
            f"{where}sample has no '__key__'; its names are {sorted(map(str, sample))[:8]}"
        )
    return sample[KEY]


def as_entries(entries: Mapping[str, Any]) -> dict[str, Entry]:
    """Encode every value of a sample mapping (skipping ``__key__``-style names)."""
    return {
        name: encode_value(name, value)
        for name, value in entries.items()
        if not name.startswith("__")
    }
