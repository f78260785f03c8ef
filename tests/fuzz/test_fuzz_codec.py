"""Differential fuzzing of the compiled record codec (``format/ccodec/``) against its Python reference.

Every entry point of the compiled module, and every method it installs on
the Python classes, is listed in :data:`FUZZERS` with the test that fuzzes it
(or in :data:`NOT_FUZZED` with why not); a new one that is in neither fails
:func:`test_every_entry_point_has_a_fuzzer`. Each fuzzer runs seeded cases
(``codec_inputs``: valid records, damaged ones, foreign bytes, odd buffer
types) through both sides and compares: the same result, or the compiled side
raises where the reference raises. It may refuse more than the reference
(then it hands the input to the reference, whose answer is the one returned,
or, for the batch decoders, stops early), never accept less.

Bounded for the test command (each fuzzer's own count); more with
``SHARDCAT_FUZZ_EXAMPLES=N`` (cases per fuzzer), another run with
``SHARDCAT_FUZZ_SEED``, and one case replayed with ``SHARDCAT_FUZZ_START``
(each failure message gives the command). Under ``bash scripts/sanitize.sh``
the compiled side runs with AddressSanitizer and UBSan. With
``SHARDCAT_FUZZ_REPORT=path``, each fuzzer appends its counts to ``path``
(one JSON line each).
"""

from __future__ import annotations

import collections
import json
import os
import struct
import types
from collections.abc import Callable, Iterator
from typing import Any

import crc32c as crc32c_package
import numpy as np
import pytest
import xxhash

from shardcat import _pread
from shardcat.format import Record, ShardWriter, entries, lazy, recordcodec, records, runs, scatter
from shardcat.format import sources as format_sources
from shardcat.format.footer import EntrySpec
from shardcat.format.spans import pack_record_spans, unpack_spans
from shardcat.format.spec import BATCH_ROW_DTYPE, Codec
from shardcat.format.tar import read as tar_read
from shardcat.format.tar import read_tar_record

from .codec_inputs import Case, cases, encoded, foreign, mutate, payload, sample, text, view_of
from .codec_inputs import entries as prepared_entries

if "compiled" not in recordcodec.available():
    pytest.skip("the compiled record codec is not built", allow_module_level=True)
from shardcat.format import _ccodec as ccodec

# --- what is fuzzed -------------------------------------------------------------

FUZZERS = {
    "crc32c": "test_crc32c",
    "crc32c_table": "test_crc32c",
    "decode_record": "test_decode_record",
    "decode_indexed": "test_decode_indexed",
    "decode_spanned": "test_decode_spanned",
    "decode_run": "test_runs",
    "decode_records": "test_runs",
    "iter_records": "test_runs",
    "decode_batch": "test_decode_batch",
    "batch_table": "test_batch_table",
    "encode_record": "test_encode_record",
    "add_plain": "test_add_plain",
    "tar_record": "test_tar_record",
    "unpack_spans": "test_unpack_spans",
    "crc32c_spans": "test_crc32c_spans",
    "scatter_copy": "test_scatter_copy",
    "gather_copy": "test_gather_copy",
    "scatter_read": "test_scatter_reads",
    "scatter_read_runs": "test_scatter_reads",
    "read_packed": "test_read_packed",
    "pread_linked": "test_pread_linked",
    # Lazy entries: every decoder's records are read through them (described()),
    # and test_changed_buffers reads them after their buffer changed.
    "entry": "test_changed_buffers",
    "record_getitem": "test_changed_buffers",
    "LazyRecord.__getitem__": "test_changed_buffers",
    "_StoredEntry.__len__": "test_changed_buffers",
    "_StoredEntry.view": "test_changed_buffers",
    "_StoredEntry.data": "test_changed_buffers",
}
"""Entry point (module function, or ``Class.method`` installed by ``_setup``) → its fuzzer."""

NOT_FUZZED = {
    "_setup": "hands the reference's types and functions over; no result to compare",
    "track": "puts a record back under the cyclic GC; no result (tests/format/test_lazy_gc.py)",
    "unseal": "puts an entry back under the cyclic GC; no result (tests/format/test_lazy_gc.py)",
}

_CLASSES = (lazy.LazyRecord, lazy._SpanEntry, entries._StoredEntry, entries.Entry, Record)


def entry_points() -> set[str]:
    """The compiled module's functions, and the C functions installed on the Python classes."""
    found = {
        name
        for name, value in vars(ccodec).items()
        if callable(value) and not isinstance(value, type) and not name.startswith("__")
    }
    for cls in _CLASSES:
        for name, value in vars(cls).items():
            fget = value.fget if isinstance(value, property) else None
            if isinstance(value, types.MethodDescriptorType) or isinstance(
                fget, types.BuiltinFunctionType
            ):
                found.add(f"{cls.__name__}.{name}")
    return found


def test_every_entry_point_has_a_fuzzer() -> None:
    points = entry_points()
    assert points == set(FUZZERS) | set(NOT_FUZZED), (
        f"entry points without a fuzzer: {sorted(points - set(FUZZERS) - set(NOT_FUZZED))}; "
        f"listed but gone: {sorted(set(FUZZERS) | set(NOT_FUZZED) - points)}"
    )
    assert not set(FUZZERS) & set(NOT_FUZZED)
    for test in FUZZERS.values():
        assert callable(globals().get(test)), test


# --- how results are compared ------------------------------------------------------

Tally = collections.Counter


@pytest.fixture
def tally(request: pytest.FixtureRequest) -> Iterator[Tally[str]]:
    """Counts of how the cases ended, appended to SHARDCAT_FUZZ_REPORT if set."""
    counts: Tally[str] = collections.Counter()
    yield counts
    report = os.environ.get("SHARDCAT_FUZZ_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(json.dumps({"fuzzer": request.node.name, **counts}) + "\n")


def outcome(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:
        return "error", (type(e), str(e))


def described(rec: Any, rng: Case) -> tuple[Any, ...]:
    """A record as plain data, its entries read in an order (and a way) ``rng`` picks.

    Reading a compiled record this way runs its lazy entries (``entry``,
    ``__getitem__``, the entries' ``__len__``, ``view`` and ``data``);
    compressed entries are compared by their stored bytes (they may be junk).
    """
    names = list(rec)
    order = list(names)
    rng.shuffle(order)
    got = []
    for name in order:
        e = rec[name]
        assert rec[name] is e
        item: list[Any] = [name, e.content_type, int(e.codec)]
        if e.codec is Codec.NONE:
            how = rng.choice(["len", "data", "view", "all"])
            if how in ("len", "all"):
                item.append(len(e))
            if how in ("data", "all"):
                item.append(e.data)
            if how in ("view", "all"):
                item.append(bytes(e.view))
        item.append(bytes(e._stored))
        got.append(item)
    missing = outcome(rec.__getitem__, "\0missing")
    return (
        rec.key,
        rec.index,
        rec.offset,
        rec.length,
        names,
        len(rec),
        got,
        "\0missing" in rec,
        missing[0],
        missing[1][0] if missing[0] == "error" else None,
        list(rec.entries),
    )


def same(ours: tuple[str, Any], ref: tuple[str, Any], case: Case) -> tuple[str, Any]:
    """The same record (read the same way) or the same error; the compared value."""
    if ours[0] == ref[0] == "ok":
        a = described(ours[1], Case(case.name, case.number))
        b = described(ref[1], Case(case.name, case.number))
        assert a == b, f"{case}: the records differ"
        return "ok", a
    assert ours == ref, f"{case}: compiled {ours!r:.500}, reference {ref!r:.500}"
    return ours


def plain(view: Any, *, readonly: bool = False) -> bool:
    """Whether ``view`` is what the compiled decoders take themselves: a contiguous byte
    memoryview, not released (and read-only, for the stream's)."""
    try:
        return (
            isinstance(view, memoryview)
            and view.c_contiguous
            and view.format == "B"
            and (view.readonly or not readonly)
        )
    except ValueError:  # released
        return False


# --- CRC32C ---------------------------------------------------------------------


def test_crc32c(tally: Tally[str]) -> None:
    for case in cases("crc32c", 6000, tally):
        data = payload(case) if case.random() < 0.8 else case.randbytes(case.randint(0, 5000))
        value = case.choice([0, case.randrange(1 << 32), (1 << 32) - 1, 1 << 32, -1])
        view = memoryview(data)[case.randint(0, min(7, len(data))) :]
        if case.random() < 0.1:
            view = memoryview(data + data)[::2]  # not contiguous: both refuse
        ref = outcome(crc32c_package.crc32c, view, value)
        for fn in (ccodec.crc32c, ccodec.crc32c_table):
            ours = outcome(fn, view, value)
            if ref[0] == "error":
                assert ours[0] == "error", case
            elif fn is ccodec.crc32c and not 0 <= value < 1 << 32:
                # The package reduces a value past 32 bits; the compiled one refuses it.
                assert ours[0] == "error" and ours[1][0] is ValueError, case
            elif 0 <= value < 1 << 32:
                assert ours == ref, case
        tally[ref[0]] += 1


# --- the record decoders ------------------------------------------------------------


def _names(case: Case, data: bytes) -> frozenset[str] | None:
    r = case.random()
    if r < 0.6:
        return None
    return frozenset(
        case.sample(["jpg", "json", "cls", "txt", "zz", text(case)], case.randint(0, 3))
    )


def test_decode_record(tally: Tally[str]) -> None:
    cache: dict[Any, Any] = {}  # one for both, as a stream shares it between them
    for case in cases("decode_record", 8000, tally):
        data, alignment, _, how = sample(case)
        view = view_of(case, data)
        kwargs = {
            "path": case.choice([None, "s.shard"]),
            "offset": case.choice([0, 4096]),
            "alignment": case.choice([alignment] * 8 + [8, 64, 3, 0]),
            "index": case.randint(-1, 5),
            "names": _names(case, data),
            "check_padding": case.random() < 0.3,
        }
        kwargs["text_cache"] = case.choice([cache, {}, None])
        ours = outcome(ccodec.decode_record, view, **kwargs)
        ref = outcome(records.decode_record, view, **kwargs)
        kind = same(ours, ref, case)[0]
        if how == "valid" and plain(view) and kwargs["alignment"] == alignment:
            assert kind == "ok", case
        tally[f"{how}-{kind}"] += 1


def _registered(case: Case, data: bytes) -> Any:
    n = int.from_bytes(data[30:32], "little") if len(data) >= 32 else 0
    rows = [
        struct.unpack_from("<QQI", data, 32 + 32 * i) for i in range(n) if 64 + 32 * i <= len(data)
    ]
    r = case.random()
    if r < 0.4:
        return None
    if r < 0.7:
        return lambda count: list(rows) if count == len(rows) else [][0]
    if r < 0.8:
        return lambda count: [(o, s, c ^ 1) for o, s, c in rows]
    if r < 0.9:
        return lambda count: tuple(rows)
    return lambda count: (_ for _ in ()).throw(ValueError("registered with another count"))


def test_decode_indexed(tally: Tally[str]) -> None:
    for case in cases("decode_indexed", 4000, tally):
        data, alignment, key, how = sample(case)
        view = view_of(case, data)
        kwargs = {
            "key": case.choice([key, key, key.encode(), key + "!", 7]),
            "length": case.choice([len(data)] * 6 + [len(data) + 8, max(len(data) - 1, 0)]),
            "path": case.choice([None, "s.shard"]),
            "offset": 64,
            "alignment": case.choice([alignment] * 8 + [16, 5]),
            "index": case.randint(-1, 3),
            "registered": _registered(case, data),
            "text_cache": case.choice([{}, {}, None]),
        }
        ours = outcome(ccodec.decode_indexed, view, **kwargs)
        ref = outcome(records.decode_indexed, view, **kwargs)
        tally[f"{how}-{same(ours, ref, case)[0]}"] += 1


def _packed(case: Case, rows: list[tuple[int, int, int]]) -> bytes:
    """``rows`` packed as the catalog packs them (compact where it can), or in a fixed packing."""
    r = case.random()
    if r < 0.6:
        try:
            return pack_record_spans(rows)
        except ValueError:
            return b""
    wide = r < 0.75 or any(o + s >= 1 << 32 for o, s, _ in rows)
    try:
        return b"".join(struct.pack("<QQI" if wide else "<III", *row) for row in rows)
    except struct.error:
        return b""


def _spans(case: Case, data: bytes, damage: bool = True) -> bytes:
    """The record's registered spans as the catalog packs them; with ``damage`` sometimes not."""
    n = int.from_bytes(data[30:32], "little") if len(data) >= 32 else 0
    rows = [
        struct.unpack_from("<QQI", data, 32 + 32 * i) for i in range(n) if 64 + 32 * i <= len(data)
    ]
    packed = _packed(case, rows)
    r = case.random() if damage else 1.0
    if r < 0.1 and packed:
        packed = packed[:-1] + bytes([packed[-1] ^ 1])
    elif r < 0.15:
        packed += b"\0" * 12
    elif r < 0.18:
        packed += b"\0"
    return packed


def test_decode_spanned(tally: Tally[str]) -> None:
    for case in cases("decode_spanned", 4000, tally):
        data, alignment, key, how = sample(case)
        view = view_of(case, data)
        spans = _spans(case, data)
        args: list[Any] = [
            view,
            case.choice([key, key, key.encode(), key + "?"]),
            case.choice([len(data)] * 8 + [len(data) + 1]),
            case.choice([None, "file:///s.shard"]),
            case.randint(0, 1 << 20),
            case.choice([alignment] * 8 + [12]),
            case.choice([spans] * 8 + [bytearray(spans)]),
            case.choice([unpack_spans] * 8 + [None]),
            case.choice([{}, {}, None]),
        ]
        if case.random() < 0.05:
            args = args[:8] if case.random() < 0.5 else [*args, 0]
        ours = outcome(ccodec.decode_spanned, *args)
        ref = outcome(records.decode_spanned, *args)
        tally[f"{how}-{same(ours, ref, case)[0]}"] += 1


# --- the stream's batch decoders --------------------------------------------------


def _stream(case: Case) -> tuple[bytes, int, list[int], str]:
    """Records of one alignment back to back (one maybe damaged, junk maybe after): the
    bytes, the alignment, where each record starts, and what was done."""
    alignment = case.choice([8, 16, 64, 256])
    parts, starts, at = [], [], 0
    for _ in range(case.randint(0, 8)):
        data = encoded(case, alignment)[0]
        parts.append(data)
        starts.append(at)
        at += len(data)
    how = "valid"
    if parts and case.random() < 0.5:
        k = case.randrange(len(parts))
        parts[k] = mutate(case, parts[k], case.choice(parts))
        how = "damaged"
    if case.random() < 0.3:
        parts.append(foreign(case))
        how += "+tail"
    return b"".join(parts), alignment, starts, how


def reference_run(
    view: memoryview,
    at: int,
    stop: int,
    pos: int,
    end: int,
    alignment: int,
    index: int,
    names: Any,
    cache: Any,
    check_padding: bool,
    path: Any,
) -> tuple[list[Record], int]:
    """What the stream's one-record path (stream._batches, with no batch decoder) decodes
    of view[at:stop]: the records up to the first it cannot take whole, and the bytes used."""
    out: list[Record] = []
    start = at
    while (end < 0 or pos < end) and stop - at >= 32:
        length = int.from_bytes(view[at + 8 : at + 16], "little")
        if (
            length < 32
            or length % alignment
            or (end >= 0 and length > end - pos)
            or stop - at < length
        ):
            break
        try:
            rec = records.decode_record(
                view[at : at + length],
                path=path,
                offset=pos,
                alignment=alignment,
                index=index,
                names=names,
                text_cache={},
                check_padding=check_padding,
            )
        except Exception:
            break
        out.append(rec)
        at, pos, index = at + length, pos + length, index + 1
    return out, at - start


def test_runs(tally: Tally[str]) -> None:
    for case in cases("runs", 3000, tally):
        data, alignment, starts, how = _stream(case)
        view = memoryview(data) if case.random() < 0.9 else view_of(case, data)
        at = min(case.choice(starts), len(data)) if starts and case.random() < 0.2 else 0
        stop = len(data) if case.random() < 0.8 else case.randint(at, len(data))
        pos = case.choice([64, 4096, 0])
        end = case.choice([-1, -1, pos + stop - at, pos + case.randint(0, len(data) + 64)])
        index = case.choice([0, 7, (1 << 63) - 2])
        args = (
            view,
            at,
            stop,
            pos,
            end,
            alignment,
            index,
            _names(case, data),
            {},
            case.random() < 0.3,
            "p",
        )
        try:
            expected, expected_used = reference_run(*args)
        except ValueError:  # a view the reference cannot slice as bytes: nothing to compare
            expected, expected_used = [], 0
        results = {
            "decode_records": ccodec.decode_records(*args),
            "decode_run": ccodec.decode_run(*args),
        }
        it = ccodec.iter_records(*args)
        taken = [next(it, None) for _ in range(case.randint(0, 3))]
        taken = [r for r in taken if r is not None]
        results["iter_records"] = (taken + list(it), it.used)
        assert it.count == len(results["iter_records"][0]), case
        # The Python twins: at least the compiled runs' records wherever those read the view
        # (a plain read-only one; the compiled side may refuse more), never more than the
        # reference (checked below with the rest).
        twin_it = runs.iter_records(*args)
        twins = {
            "python decode_records": runs.decode_records(*args),
            "python decode_run": runs.decode_run(*args),
            "python iter_records": (list(twin_it), twin_it.used),
        }
        assert twin_it.count == len(twins["python iter_records"][0]), case
        if plain(view, readonly=True):
            for name in ("decode_records", "decode_run", "iter_records"):
                ours, twin = results[name], twins[f"python {name}"]
                assert twin[1] >= ours[1] and len(twin[0]) >= len(ours[0]), f"{case}: {name}"
        results.update(twins)
        for name, (got, used) in results.items():
            if name.endswith("decode_run"):
                for rview, rec in got:
                    assert bytes(rview) == bytes(view[rec.offset - pos + at :][: rec.length]), case
                got = [rec for _, rec in got]
            # Never more than the reference, and the same records as far as it went.
            assert len(got) <= len(expected), f"{case}: {name} decoded more than the reference"
            assert used == sum(r.length for r in expected[: len(got)]), case
            for a, b in zip(got, expected):
                assert described(a, Case(case.name, case.number)) == described(
                    b, Case(case.name, case.number)
                ), f"{case}: {name}"
            if how == "valid" and plain(view, readonly=True) and index < (1 << 63) - 2:
                assert (len(got), used) == (len(expected), expected_used), f"{case}: {name} stopped"
        tally[f"{how}-records"] += len(expected)


# --- batches of indexed reads ---------------------------------------------------------


def _batch(
    case: Case,
) -> tuple[list[Any], np.ndarray, list[Any], list[Any], list[Any], list[Any], str]:
    n = case.randint(1, 8)
    paths = [f"file:///s{i}.shard" for i in range(case.randint(1, 3))]
    alignments = [case.choice([8, 64, 256]) for _ in paths]
    keys, spans, rows, blobs, how = (
        [],
        [],
        [],
        [bytearray(case.randbytes(case.randint(0, 9)))],
        "valid",
    )
    for row in range(n):
        shard = case.randrange(len(paths))
        data, _, key = encoded(case, alignments[shard])
        span = _spans(case, data, damage=False)
        if case.random() < 0.1:
            span, how = b"\1", "damaged"
        if case.random() < 0.25:
            data = mutate(case, data)
            how = "damaged"
        if case.random() < 0.1:
            key += "~"
            how = "damaged"
        if case.random() < 0.3:
            blobs.append(bytearray(case.randbytes(case.randint(0, 9))))
        rows.append((len(blobs) - 1, shard, row, 0, len(blobs[-1]), len(data), 4096 * row))
        blobs[-1] += data
        keys.append(key)
        spans.append(span)
    case.shuffle(rows)
    if case.random() < 0.05:
        rows.append((len(blobs), 0, 0, 0, 0, 0, 0))  # a blob that does not exist
        how = "outside"
    table = np.array(rows, dtype=BATCH_ROW_DTYPE)
    views = [memoryview(bytes(b)) if case.random() < 0.95 else memoryview(b) for b in blobs]
    if case.random() < 0.05:
        alignments[0] = case.choice([3, "64", None])
    return views, table, keys, spans, paths, alignments, how


def _unpack(value: bytes, count: int) -> Any:
    return unpack_spans(value, count)


def test_decode_batch(tally: Tally[str]) -> None:
    for case in cases("decode_batch", 3000, tally):
        blobs, table, keys, spans, paths, alignments, how = _batch(case)
        raw = outcome(ccodec.decode_batch, blobs, table, keys, spans, paths, alignments, {})
        if raw[0] == "ok":
            out, rejected = raw[1]
            for t in range(len(table)):
                row = int(table["row"][t])
                if t in rejected:
                    assert out[row] is None, case
                    continue
                # Accepted alone: the reference accepts the same record.
                blob, at, length = (
                    int(table["blob"][t]),
                    int(table["at"][t]),
                    int(table["length"][t]),
                )
                shard = int(table["shard"][t])
                ref = outcome(
                    records.decode_indexed,
                    memoryview(blobs[blob])[at : at + length],
                    key=keys[row],
                    length=length,
                    path=paths[shard],
                    offset=int(table["offset"][t]),
                    alignment=alignments[shard],
                    registered=lambda n, s=spans[row]: _unpack(s, n),
                    text_cache={},
                )
                same(("ok", out[row]), ref, case)
            if how == "valid" and all(isinstance(a, int) and a > 3 for a in alignments):
                assert rejected == [] or any(not b.readonly for b in blobs), case
            tally["rows-accepted-by-compiled"] += len(table) - len(rejected)
            tally["rows-handed-to-reference"] += len(rejected)
        # The codec's decode_batch (the compiled one, the reference for what it rejects)
        # against the reference alone: the same records, or the same first error.
        ours = outcome(
            recordcodec._compiled_decode_batch,
            blobs,
            table,
            keys,
            spans,
            paths,
            alignments,
            _unpack,
            {},
        )
        ref = outcome(
            records.decode_batch, blobs, table, keys, spans, paths, alignments, _unpack, {}
        )
        if ours[0] == ref[0] == "ok":
            assert len(ours[1]) == len(ref[1]), case
            for a, b in zip(ours[1], ref[1]):
                assert (a is None) == (b is None), case
                if a is not None:
                    same(("ok", a), ("ok", b), case)
        elif how == "outside":  # the compiled one says ValueError, the reference IndexError
            assert ours[0] == ref[0] == "error", (case, ours, ref)
        else:
            assert ours[0] == ref[0] == "error" and ours[1][0] is ref[1][0], (case, ours, ref)
        tally[f"{how}-{ref[0]}"] += 1


def test_batch_table(tally: Tally[str]) -> None:
    for case in cases("batch_table", 6000, tally):
        urls = [f"file:///{text(case, 1, 6, ascii_only=True)}" for _ in range(3)]
        keys = [text(case, 1, 6) for _ in range(6)]
        rows: list[Any] = []
        for _ in range(case.randint(0, 12)):
            row = [
                case.choice(urls),
                case.choice([case.randint(0, 1 << 40), 64]),
                case.randint(32, 5000),
                case.randbytes(12 * case.randint(0, 3)),
                case.choice(keys),
                case.choice([8, 64]),
                case.choice([None, None, None, "tar"]),
                case.choice([None, b"sig"]),
            ]
            r = case.random()
            if r < 0.03:
                row[1] = -1
            elif r < 0.06:
                row[1] = 1 << 64
            elif r < 0.09:
                row[3] = bytearray(row[3])
            elif r < 0.12:
                row[4] = 7
            elif r < 0.14:
                row = row[:7]
            elif r < 0.16:
                row.append("extra")
            rows.append(tuple(row) if case.random() < 0.98 else row)
        wanted = {k: None for k in case.sample(keys, case.randint(0, len(keys)))}
        ours = outcome(recordcodec._compiled_batch_table, rows, wanted)
        ref = outcome(records.batch_table, rows, wanted)
        if ours[0] == ref[0] == "ok":
            a, b = ours[1], ref[1]
            assert a.table.tobytes() == b.table.tobytes(), case
            assert a[1:] == b[1:], case
        else:
            assert ours[0] == ref[0] == "error" and ours[1][0] is ref[1][0], (case, ours, ref)
        tally[ref[0]] += 1


# --- encoding and the writer's fast path -------------------------------------------------


def test_encode_record(tally: Tally[str]) -> None:
    from shardcat.format.records import PreparedEntry

    for case in cases("encode_record", 6000, tally):
        raw = text(case, 0, 20).encode()
        es: list[Any] = prepared_entries(case)
        r = case.random()
        if r < 0.04 and es:
            e = es[0]
            es[0] = PreparedEntry(
                e.name, e.content_type, e.codec, e.payload, case.choice([-1, 1 << 32])
            )
        elif r < 0.08 and es:
            es[0] = es[0]._replace(codec=case.choice([-1, 256]))
        elif r < 0.1 and es:
            es[0] = es[0]._replace(payload=memoryview(bytes(8)).cast("I"))
        elif r < 0.12:
            raw = b"k" * 70_000
        elif r < 0.14 and es:
            es[0] = es[0]._replace(name=b"n" * 70_000)
        elif r < 0.16:
            es.append(("not", "an", "entry"))
        key_hash = case.choice([xxhash.xxh64_intdigest(raw)] * 9 + [-1, 1 << 64])
        alignment = case.choice([8, 64, 4096, 8, 64, 3, 8192])
        seq = es if case.random() < 0.8 else tuple(es)
        ours = outcome(ccodec.encode_record, raw, key_hash, seq, alignment)
        ref = outcome(records.encode_record, raw, key_hash, seq, alignment)
        if ours[0] == ref[0] == "ok":
            a, b = ours[1], ref[1]
            assert b"".join(bytes(p) for p in a.parts) == b"".join(bytes(p) for p in b.parts), case
            assert (a.length, a.head_length, a.offsets) == (b.length, b.head_length, b.offsets), (
                case
            )
        else:
            assert ours == ref, (case, ours, ref)
        tally[ref[0]] += 1


def _samples(case: Case) -> list[Any]:
    out: list[Any] = []
    names = ["jpg", "cls", "json", text(case, 1, 4, ascii_only=True)]
    for i in range(case.randint(1, 30)):
        key: Any = case.choice(
            [f"k{i:04d}", f"k{i:04d}", text(case, 0, 8), f"k{max(i - 1, 0):04d}"]
        )
        sample: dict[Any, Any] = {}
        for name in case.sample(names, case.randint(0, len(names))):
            sample[name] = case.randbytes(case.choice([0, 10, 300, 5000]))
        r = case.random()
        if r < 0.05:
            sample["txt"] = "text"
        elif r < 0.08:
            sample["__meta__"] = b"skipped"
        elif r < 0.1:
            sample[7] = b"name not text"
        elif r < 0.12:
            key = 12
        elif r < 0.13:
            sample["big"] = bytes(70_000)
        out.append((key, sample))
    return out


def _write(samples: list[Any], codec: str, alignment: int, compression: Any) -> tuple[Any, ...]:
    import io

    previous = recordcodec.use(codec)
    buf = io.BytesIO()
    results: list[Any] = []
    try:
        with ShardWriter(
            buf, clock=lambda: 1, file_id=bytes(16), alignment=alignment, compression=compression
        ) as w:
            for key, sample in samples:
                r = outcome(w.add, key, sample)
                results.append((r[0], r[1] if r[0] == "ok" else r[1][0]))
    except Exception as e:
        results.append(("close", type(e)))
    finally:
        recordcodec.use(previous)
    return results, buf.getvalue()


def test_add_plain(tally: Tally[str]) -> None:
    """The writer with the compiled fast path writes the reference's bytes, add by add."""
    for case in cases("add_plain", 1200, tally):
        samples = _samples(case)
        alignment = case.choice([8, 64, 512])
        compression = case.choice([None, None, "zstd"])
        ours = _write(samples, "compiled", alignment, compression)
        ref = _write(samples, "python", alignment, compression)
        assert ours == ref, case
        tally["adds"] += len(samples)
        tally["adds-refused"] += sum(r[0] != "ok" for r in ref[0])


# --- tar samples -----------------------------------------------------------------------


def test_tar_record(tally: Tally[str]) -> None:
    tar_record = ccodec.tar_record
    for case in cases("tar_record", 6000, tally):
        data = case.randbytes(case.randint(0, 3000))
        layout, spans = [], []
        for _ in range(case.randint(0, 4)):
            at = case.randint(0, len(data) + 5)
            size = case.randint(0, max(len(data) - at, 0) + case.choice([0, 0, 0, 3]))
            crc = crc32c_package.crc32c(data[at : at + size])
            if case.random() < 0.1:
                crc ^= 1
            layout.append(EntrySpec(case.choice(["jpg", "cls", text(case)]), "x/y", Codec.NONE))
            spans.append((at, size, crc))
        packed = _packed(case, spans)
        if case.random() < 0.05:
            packed += b"\0"
        specs = tuple((s.name, s.content_type) for s in layout)
        key, offset = text(case), case.randint(0, 1 << 40)
        ours = tar_record(data, key, specs, packed, offset, Record)
        ref = outcome(read_tar_record, data, key, layout, spans, path="t.tar", offset=offset)
        # The Python twin answers exactly as the reference: the record, or None where it raises.
        twin = tar_read.tar_record(data, key, specs, packed, offset, Record)
        readable = _unpacked(packed, len(spans)) == spans
        if readable:
            assert (twin is not None) == (ref[0] == "ok"), case
        if twin is not None:
            same(("ok", twin), ref, case)
        if ours is not None:  # accepted: the reference accepts the same record
            same(("ok", ours), ref, case)
        elif ref[0] == "ok" and readable:
            pytest.fail(f"{case}: the compiled tar_record refused a sound sample")
        tally[f"{ref[0]}-{'compiled' if ours is not None else 'reference'}"] += 1


def _unpacked(value: bytes, count: int) -> list[tuple[int, int, int]] | None:
    """format/spans.py's reading of a value: None where it raises."""
    try:
        return unpack_spans(value, count)
    except ValueError:
        return None


def _varint_bytes(case: Case) -> bytes:
    """A varint, sometimes one the packing forbids: overlong, past 64 bits, unterminated."""
    value = case.randint(0, (1 << case.choice([7, 14, 21, 35, 63, 64])) - 1)
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    r = case.random()
    if r < 0.1:
        out[-1] |= 0x80
        out.append(0)  # overlong: a trailing zero group
    elif r < 0.15:
        out = bytearray(b"\xff" * 9 + bytes([case.randint(1, 127)]))  # 10 bytes, past 64 bits
    elif r < 0.2:
        out[-1] |= 0x80  # unterminated
    return bytes(out)


def test_unpack_spans(tally: Tally[str]) -> None:
    for case in cases("unpack_spans", 20000, tally):
        count = case.randint(0, 5)
        r = case.random()
        if r < 0.4:  # sound spans, in any packing
            rows, end = [], 0
            for _ in range(count):
                offset = end + case.choice([0, 0, 0, case.randint(0, 1 << case.randint(1, 63))])
                size = case.randint(0, 1 << case.randint(0, 40))
                rows.append((offset, size, case.randint(0, (1 << 32) - 1)))
                end = offset + size
            value = _packed(case, rows)
            if case.random() < 0.3 and value:
                value = mutate(case, value)
        elif r < 0.7:  # compact-shaped: varints and CRCs, some of them broken
            value = b"".join(
                _varint_bytes(case)
                + _varint_bytes(case)
                + case.randbytes(case.choice([4, 4, 4, 3]))
                for _ in range(count)
            )
            if case.random() < 0.2:
                value += case.choice([b"\0", b"\1", b"\0\0"])
        else:
            value = case.randbytes(case.randint(0, 24 * count + 3))
        ref = _unpacked(value, count)
        ours = ccodec.unpack_spans(value, count)
        assert ours == ref, (case, value.hex(), count, ours, ref)
        tally["ok" if ref is not None else "refused"] += 1


# --- the scatter family --------------------------------------------------------------


def _int64s(case: Case, values: list[int]) -> np.ndarray:
    """An int64 array; sometimes one byte off alignment (the compiled side copies it)."""
    if case.random() < 0.7:
        return np.asarray(values, dtype=np.int64)
    raw = bytearray(1 + 8 * len(values))
    raw[1:] = np.asarray(values, dtype="<i8").tobytes()
    return np.frombuffer(raw, dtype=np.int64, offset=1, count=len(values))


def _pieces(case: Case, size: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    positions, lengths = [], []
    for _ in range(count):
        n = case.randint(0, max(size // 4, 1))
        p = case.randint(0, max(size - n, 0))
        if case.random() < 0.05:
            p, n = case.choice([(-1, n), (size, 1), (p, -1), (1 << 62, 8)])
        positions.append(p)
        lengths.append(n)
    pos, lens = _int64s(case, positions), _int64s(case, lengths)
    if case.random() < 0.03:
        lens = lens[:-1] if len(lens) else _int64s(case, [1])
    return pos, lens


def _same_effect(ours: tuple[str, Any], ref: tuple[str, Any], case: Case) -> None:
    if ref[0] == "error":
        assert ours[0] == "error" and issubclass(ours[1][0], (ValueError, TypeError, OSError)), (
            case,
            ours,
            ref,
        )
    else:
        assert ours == ref, (case, ours, ref)


def test_crc32c_spans(tally: Tally[str]) -> None:
    for case in cases("crc32c_spans", 6000, tally):
        data = case.randbytes(case.randint(0, 4000))
        buf: Any = case.choice([data, memoryview(data), np.frombuffer(data, np.uint8)])
        starts, lengths = _pieces(case, len(data), case.randint(0, 12))
        ours = outcome(ccodec.crc32c_spans, buf, starts, lengths)
        ref = outcome(scatter.crc32c_spans, buf, starts, lengths)
        _same_effect(ours, ref, case)
        tally[ref[0]] += 1


def test_scatter_copy(tally: Tally[str]) -> None:
    for case in cases("scatter_copy", 6000, tally):
        size = case.randint(0, 3000)
        positions, lengths = _pieces(case, size, case.randint(0, 10))
        want = int(lengths.sum()) if len(lengths) else 0
        src = case.randbytes(max(want + case.choice([0, 0, 0, 1, -1]), 0))
        ours_dest, ref_dest = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
        ours = outcome(ccodec.scatter_copy, src, ours_dest, positions, lengths)
        ref = outcome(scatter.scatter_copy, src, ref_dest, positions, lengths)
        _same_effect(ours, ref, case)
        if ref[0] == "ok":
            assert ours_dest.tobytes() == ref_dest.tobytes(), case
        tally[ref[0]] += 1


def test_gather_copy(tally: Tally[str]) -> None:
    for case in cases("gather_copy", 6000, tally):
        sources = [case.randbytes(case.randint(0, 2000)) for _ in range(case.randint(1, 3))]
        size = case.randint(0, 3000)
        runs = case.randint(0, 5)
        counts = [case.randint(0, 3) for _ in range(runs)]
        positions, lengths = _pieces(case, size, sum(counts))
        which = [
            case.randint(-1 if case.random() < 0.03 else 0, len(sources) - 1) for _ in range(runs)
        ]
        offsets = [case.randint(0, 500) for _ in range(runs)]
        if case.random() < 0.05 and runs:
            counts[0] += 1
        args = [
            case.choice([sources, tuple(sources)]),
            *(_int64s(case, v) for v in (which, offsets, counts)),
        ]
        ours_dest, ref_dest = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
        ours = outcome(ccodec.gather_copy, *args, ours_dest, positions, lengths)
        ref = outcome(scatter.gather_copy, *args, ref_dest, positions, lengths)
        _same_effect(ours, ref, case)
        if ref[0] == "ok":
            assert ours_dest.tobytes() == ref_dest.tobytes(), case
        tally[ref[0]] += 1


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[int], list[bytes]]]:
    """Three files of random bytes (one empty), open for reading."""
    import random

    root = tmp_path_factory.mktemp("fuzz-files")
    rng = random.Random(30)
    contents = [rng.randbytes(1 << 16), rng.randbytes(3000), b""]
    fds = []
    for i, data in enumerate(contents):
        (root / f"f{i}").write_bytes(data)
        fds.append(os.open(root / f"f{i}", os.O_RDONLY))
    yield fds, contents
    for fd in fds:
        os.close(fd)


def test_scatter_reads(tally: Tally[str], files: tuple[list[int], list[bytes]]) -> None:
    fds, contents = files
    for case in cases("scatter_reads", 6000, tally):
        size = case.randint(0, 4000)
        if case.random() < 0.5:
            f = case.randrange(len(fds))
            positions, lengths = _pieces(case, size, case.randint(0, 8))
            offset = case.choice([0, case.randint(0, len(contents[f]) + 100), -1])
            call = (fds[f], offset)
            fns: tuple[Any, Any] = (ccodec.scatter_read, scatter.scatter_read)
        else:
            runs = case.randint(0, 4)
            counts = [case.randint(0, 3) for _ in range(runs)]
            positions, lengths = _pieces(case, size, sum(counts))
            which = [case.randrange(len(fds)) for _ in range(runs)]
            offsets = [case.randint(0, len(contents[w]) + 50) for w in which]
            call = tuple(_int64s(case, v) for v in ([fds[w] for w in which], offsets, counts))
            fns = (ccodec.scatter_read_runs, scatter.scatter_read_runs)
        ours_dest, ref_dest = np.zeros(size, np.uint8), np.zeros(size, np.uint8)
        ours = outcome(fns[0], *call, ours_dest, positions, lengths)
        ref = outcome(fns[1], *call, ref_dest, positions, lengths)
        _same_effect(ours, ref, case)
        if ref[0] == "ok" and (ref[1] is True or (type(ref[1]) is int and ref[1] == -1)):
            # Read whole: the same bytes (a run cut short leaves its pieces as each read them).
            assert ours_dest.tobytes() == ref_dest.tobytes(), case
        tally[f"{ref[0]}-{ref[1] if ref[0] == 'ok' else ''}"] += 1


def test_read_packed(tally: Tally[str], files: tuple[list[int], list[bytes]]) -> None:
    fds, contents = files
    for case in cases("read_packed", 6000, tally):
        rows = []
        for _ in range(case.randint(0, 12)):
            shard = case.randrange(len(fds) + (1 if case.random() < 0.03 else 0))
            size = len(contents[shard]) if shard < len(fds) else 100
            offset = case.randint(0, size + (50 if case.random() < 0.1 else 0))
            length = case.randint(
                0, max(min(size - offset, 2000), 0) + (20 if case.random() < 0.05 else 0)
            )
            rows.append((shard, offset, length))
        if case.random() < 0.95:
            rows.sort()
        table = np.zeros(len(rows), dtype=BATCH_ROW_DTYPE)
        for t, (shard, offset, length) in enumerate(rows):
            table[t]["shard"], table[t]["offset"], table[t]["length"], table[t]["row"] = (
                shard,
                offset,
                length,
                t,
            )
        max_gap = case.choice([0, 64, 4096, 1 << 20, -1])
        group_bytes = case.choice([1, 100, 4096, 1 << 20, 0])
        pool: Any = case.choice([None, None, [], "no"])
        ours_table, ref_table = table.copy(), table.copy()
        ours = outcome(ccodec.read_packed, list(fds), ours_table, max_gap, group_bytes, pool, 4)
        ref = outcome(_pread.read_packed, list(fds), ref_table, max_gap, group_bytes, pool, 4)
        if ref[0] == "error":
            assert ours[0] == "error" and ours[1][0] is ref[1][0], (case, ours, ref)
        elif ref[1] is None:
            assert ours == ("ok", None), case
        else:
            assert ours[0] == "ok" and [bytes(b) for b in ours[1]] == [bytes(b) for b in ref[1]], (
                case
            )
            assert ours_table.tobytes() == ref_table.tobytes(), case
        tally[f"{ref[0]}-{'none' if ref[0] == 'ok' and ref[1] is None else ''}"] += 1


def test_pread_linked(tally: Tally[str], tmp_path: Any) -> None:
    gone = tmp_path / "gone"
    gone.write_bytes(b"x" * 100)
    gone_fd = os.open(gone, os.O_RDONLY)
    os.unlink(gone)
    closed_fd = os.open(__file__, os.O_RDONLY)
    os.close(closed_fd)
    try:
        here = os.open(__file__, os.O_RDONLY)
        try:
            for case in cases("pread_linked", 2000, tally):
                fd = case.choice([here, here, here, gone_fd, closed_fd])
                n = case.choice([0, 1, case.randint(0, 5000), -1])
                offset = case.choice([0, case.randint(0, 5000), 1 << 40, -1])
                ours = outcome(ccodec.pread_linked, fd, n, offset)
                ref = outcome(format_sources._pread_linked, fd, n, offset)
                if ref[0] == "error":
                    assert ours[0] == "error" and issubclass(ours[1][0], (ValueError, OSError)), (
                        case
                    )
                elif n < 0 or offset < 0:  # refused before the file is looked at
                    assert ours == ref or (ours[0] == "error" and ours[1][0] is ValueError), case
                else:
                    assert ours == ref, case
                tally[ref[0]] += 1
        finally:
            os.close(here)
    finally:
        os.close(gone_fd)


# --- lazy entries of a buffer that changed or was released -----------------------------


def _records_of(case: Case, view: memoryview, data: bytes, key: str, alignment: int) -> list[Any]:
    """The record in ``view`` from one of the decoders (sealed entries or not)."""
    how = case.choice(
        ["iter_records", "decode_spanned", "decode_indexed", "decode_batch", "decode_record"]
    )
    if how == "iter_records":
        return list(
            ccodec.iter_records(view, 0, len(view), 64, -1, alignment, 0, None, {}, False, "p")
        )
    if how == "decode_spanned":
        got = outcome(
            ccodec.decode_spanned,
            *(
                view,
                key,
                len(view),
                "p",
                64,
                alignment,
                _spans(case, data, damage=False),
                unpack_spans,
                {},
            ),
        )
    elif how == "decode_indexed":
        got = outcome(
            ccodec.decode_indexed,
            *(view,),
            **{"key": key, "length": len(view), "path": "p", "offset": 64, "alignment": alignment},
            text_cache={},
        )
    elif how == "decode_record":
        got = outcome(ccodec.decode_record, view, path="p", offset=64, alignment=alignment)
    else:
        table = np.array([(0, 0, 0, 0, 0, len(view), 64)], dtype=BATCH_ROW_DTYPE)
        out, rejected = ccodec.decode_batch(
            [view], table, [key], [_spans(case, data, damage=False)], ["p"], [alignment], {}
        )
        got = ("ok", None if rejected else out[0])
    # Only the compiled codec's records (a rejected one is the reference's plain Record).
    return [got[1]] if got[0] == "ok" and type(got[1]) is lazy.LazyRecord else []


def _reference_entry(rec: Any, name: str) -> bytes:
    """lazy.LazyRecord._entry's bytes for ``name``: its descriptor read now, the slice clamped."""
    i = rec._layout.where[name]
    p_off, size = struct.unpack_from("<QQ", rec._buf, rec._at + 32 + 32 * i)
    return bytes(rec._buf[rec._at + p_off : rec._at + p_off + size])


def _read(entry: Any, way: str) -> Any:
    if way == "len":
        return len(entry)
    return entry.data if way == "data" else bytes(entry.view)


def test_changed_buffers(tally: Tally[str]) -> None:
    for case in cases("changed_buffers", 6000, tally):
        data, alignment, key = encoded(case)
        buf = bytearray(data)
        view = memoryview(buf).toreadonly()
        recs = _records_of(case, view, data, key, alignment)
        if not recs:
            tally["not-decoded"] += 1
            continue
        rec = recs[0]
        names = [
            n for n in rec._layout.order if rec._layout.specs[rec._layout.where[n]][2] is Codec.NONE
        ]
        before = {n: rec[n] for n in names if case.random() < 0.3}  # entries made before the change
        n = int.from_bytes(buf[30:32], "little")
        for _ in range(case.randint(1, 4)):  # the bytes change, descriptors most often
            if n and case.random() < 0.8:
                at = 32 + 32 * case.randrange(n) + case.choice([0, 8])
                value = case.choice(
                    [0, len(buf), 1 << 20, (1 << 64) - 1, case.randrange(len(buf) + 1)]
                )
                buf[at : at + 8] = value.to_bytes(8, "little")
            elif buf:
                buf[case.randrange(len(buf))] = case.randrange(256)
        released = False
        if case.random() < 0.2:
            try:
                view.release()
                released = True
            except BufferError:  # sealed entries hold the buffer: it stays
                pass
        for name in names:
            if released and name not in before:
                expected: Any = ValueError
            else:
                expected = None if name in before else _reference_entry(rec, name)
            way = case.choice(["len", "data", "view"])
            try:
                got: Any = _read(rec[name], way)
            except ValueError:
                got = ValueError
            if expected is ValueError:
                assert got is ValueError, case
            elif expected is None:  # made before: in the buffer, whatever it reads
                assert got is ValueError or (len(got) if way != "len" else got) <= len(buf), case
            else:
                assert got == ({"len": len(expected)}.get(way, expected)), (case, name, way)
        tally[f"released-{released}"] += 1
