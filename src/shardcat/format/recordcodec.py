"""Which record codec runs: the compiled one, or the pure-Python reference.

Both read and write the same bytes and raise the same errors: the compiled
codec (``format/ccodec/``, built with the package when a C compiler is present)
checks everything the reference (:mod:`.records`) checks and hands every
failure back to it, so the reference's error is the one raised.

``SHARDCAT_RECORD_CODEC`` chooses, when shardcat is imported:

``auto`` (default)
    The compiled codec if it was built, else the reference.
``compiled``
    The compiled codec; importing shardcat fails if it was not built.
``python``
    The reference.

The variable is not ``SHARDCAT_CODEC`` because "codec" already names an
entry's compression (:class:`~shardcat.format.Codec`). :func:`active` tells
which one runs; :func:`use` switches (tests and benchmarks run both), through
the registry of implementations (:mod:`.implementations`).

Callers look the functions up here at call time (``recordcodec.decode_record``),
not at import, so that a switch reaches them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .. import _pread, config
from . import checksums, implementations, records, runs, scatter, spec
from .entries import Record, _StoredEntry
from .implementations import Name
from .spec import Codec

if TYPE_CHECKING:
    pass

__all__ = [
    "ENV_VAR",
    "active",
    "available",
    "batch_table",
    "crc32c",
    "crc32c_spans",
    "decode_batch",
    "decode_indexed",
    "decode_record",
    "decode_records",
    "decode_run",
    "decode_spanned",
    "encode_record",
    "gather_copy",
    "iter_records",
    "read_packed",
    "scatter_copy",
    "scatter_read",
    "scatter_read_runs",
    "tar_record",
    "use",
]

ENV_VAR = config.env_var("record_codec")

_compiled: Any
_missing: ImportError | None = None
cpython_tricks = False
"""Whether the compiled codec runs with its CPython-internal tricks (``ccodec.h`` lists them)
or the plain path; chosen once, when it is set up (:func:`.implementations.cpython_tricks`)."""
try:
    _compiled = importlib.import_module(f"{__package__}._ccodec")
except ImportError as e:  # built without a compiler, or a source checkout not built
    _compiled = None
    _missing = e
else:
    from . import lazy  # LazyRecord needs the extension

    cpython_tricks = _compiled._setup(
        lazy.LazyRecord,
        lazy.make_layout,
        records.EncodedRecord,
        Codec,
        records.decode_record,
        records.decode_indexed,
        records.encode_record,
        _StoredEntry,
        records.decode_spanned,
        lazy._SpanEntry,
        implementations.cpython_tricks(),
    )

DecodeRun = Callable[..., tuple[list[tuple[memoryview, Record]], int]]
DecodeBatch = Callable[..., list[Record | None]]


def _compiled_decode_batch(
    blobs: list[memoryview],
    table: Any,
    keys: list[str],
    spans: list[bytes],
    paths: list[str],
    alignments: list[int],
    registered: Callable[[bytes, int], Any],
    text_cache: dict[Any, Any] | None = None,
) -> list[Record | None]:
    """records.decode_batch, compiled: one C call; the records it did not accept go to the reference."""
    cache = {} if text_cache is None else text_cache
    out, rejected = _compiled.decode_batch(blobs, table, keys, spans, paths, alignments, cache)
    if rejected:
        # The reference raises the first failure's error (or, never, accepts it).
        redo = records.decode_batch(
            blobs, table, keys, spans, paths, alignments, registered, cache, rejected
        )
        for t in rejected:
            row = int(table["row"][t])
            out[row] = redo[row]
    return out  # type: ignore[no-any-return]


def _compiled_batch_table(rows: list[Any], wanted: dict[str, Any]) -> records.BatchTable:
    """records.batch_table, compiled: one C pass; rows it does not expect go to the reference."""
    import numpy as np

    done = _compiled.batch_table(rows, wanted)
    if done is None:
        return records.batch_table(rows, wanted)
    table, *rest = done
    return records.BatchTable(np.frombuffer(table, dtype=spec.BATCH_ROW_DTYPE), *rest)


# The active functions (set by use() below).
encode_record: Callable[..., records.EncodedRecord]
decode_record: Callable[..., Record]
decode_indexed: Callable[..., Record]
decode_spanned: Callable[..., Record]
"""The point lookup's decoder (:func:`.records.decode_spanned`): positional arguments only."""
decode_run: DecodeRun
"""The whole, sound records of a stream buffer, with their views (:func:`.runs.decode_run`)."""
decode_records: Callable[..., tuple[list[Record], int]]
iter_records: Callable[..., Any]
"""``decode_records`` as an iterator of records with ``used``/``count`` (:func:`.runs.iter_records`)."""
decode_batch: DecodeBatch
"""Every record of a batch of indexed reads (:func:`.records.decode_batch`)."""
batch_table: Callable[[list[Any], dict[str, Any]], records.BatchTable]
"""A batch query's rows as the batch decoder's table (:func:`.records.batch_table`)."""
read_packed: Callable[..., Sequence[bytes | memoryview] | None]
"""A batch's records read from local files into packed buffers (:func:`shardcat._pread.read_packed`);
the compiled one, given a pool, returns memoryviews of the pool's buffers it read into."""
crc32c: Callable[..., int]
add_plain: Callable[..., int | None]
"""``ShardWriter.add``'s common case: the record's index, or None for its own path
(:func:`.records.add_plain`, which always answers None)."""
tar_record: Callable[..., Record | None]
"""A tar sample's record from a catalog row, or None where :func:`.tar.read.read_tar_record`
raises (:func:`.tar.read.tar_record`): the point lookup's tar finisher."""
scatter_read: Callable[..., bool]
"""A run of a local file read straight into pieces of a buffer (:func:`.scatter.scatter_read`)."""
scatter_read_runs: Callable[..., int]
"""Many runs, of several files, read into pieces of one buffer (:func:`.scatter.scatter_read_runs`)."""
gather_copy: Callable[..., None]
"""Runs of several buffers laid out in pieces of one buffer (:func:`.scatter.gather_copy`)."""
scatter_copy: Callable[..., None]
"""Bytes laid out in pieces of a buffer (:func:`.scatter.scatter_copy`)."""
crc32c_spans: Callable[..., bytes]
"""The CRC32C of many spans of one buffer (:func:`.scatter.crc32c_spans`)."""
COMPONENT = "record codec"


def _tar_record(
    data: bytes,
    key: str,
    specs: tuple[tuple[str, str], ...],
    spans: bytes,
    offset: int,
    record: type[Record],
) -> Record | None:
    """The Python twin of the compiled ``tar_record``: :func:`.tar.read.tar_record`.

    Imported on first call: a lookup of a shard (no tar) loads no tar module.
    """
    from .tar.read import tar_record

    return tar_record(data, key, specs, spans, offset, record)


_PYTHON: dict[str, Any] = {
    "encode_record": records.encode_record,
    "decode_record": records.decode_record,
    "decode_indexed": records.decode_indexed,
    "decode_spanned": records.decode_spanned,
    "decode_run": runs.decode_run,
    "decode_records": runs.decode_records,
    "iter_records": runs.iter_records,
    "decode_batch": records.decode_batch,
    "batch_table": records.batch_table,
    "read_packed": _pread.read_packed,
    "crc32c": checksums.crc32c,
    "add_plain": records.add_plain,
    "tar_record": _tar_record,
    "scatter_read": scatter.scatter_read,
    "scatter_read_runs": scatter.scatter_read_runs,
    "scatter_copy": scatter.scatter_copy,
    "gather_copy": scatter.gather_copy,
    "crc32c_spans": scatter.crc32c_spans,
}
_COMPILED: dict[str, Any] = {}
if _compiled is not None:
    _COMPILED = {
        name: getattr(_compiled, name, _PYTHON[name])
        # Built where pread is (POSIX); elsewhere the reference, which reads no faster.
        for name in _PYTHON
    }
    _COMPILED["decode_batch"] = _compiled_decode_batch
    _COMPILED["batch_table"] = _compiled_batch_table

implementations.register(
    implementations.Component(
        COMPONENT,
        ENV_VAR,
        globals(),
        _PYTHON,
        _COMPILED,
        built=lambda: _compiled is not None,
        missing=lambda: _missing,
    )
)


def available() -> list[Name]:
    """The codecs this installation has: always ``"python"``, and ``"compiled"`` if it was built."""
    return implementations.available(COMPONENT)


def active() -> Name:
    """The codec in use: ``"compiled"`` or ``"python"``."""
    return implementations.active(COMPONENT)


def use(name: str) -> Name:
    """Switch to codec ``name`` (``"compiled"``, ``"python"`` or ``"auto"``); returns the previous one.

    Raises
    ------
    CodecUnavailableError
        ``"compiled"`` was asked for but the extension was not built.
    ValueError
        An unknown name.
    """
    return implementations.use(COMPONENT, name)


use(implementations.configured(COMPONENT))
