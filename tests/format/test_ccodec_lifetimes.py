"""The compiled codec reads only memory it holds: released views, changed buffers, changed lists.

Issue 30 found four ways `_ccodec` (format/ccodec/) read memory it did not own: a big
record's key read after the buffer's last reference was dropped by another
thread (``decode_one``), memoryviews read after the caller released them
(``iter_records`` then returned a record whose key was never in the buffer),
entries that re-read descriptors changed after decoding and sliced past the
buffer, and borrowed items of the caller's lists held across a CRC run
without the GIL (``decode_batch``). Reading the rest of the file for the
same faults found more: the scatter functions and ``read_packed`` read the
caller's arrays again without the GIL (and as unaligned int64s), and
``batch_table`` read rows that a key's ``__eq__`` could free. Each test here
reproduced one of them before the fix: the single-threaded ones directly,
the threaded ones in a child process (a crash, or under
``scripts/sanitize.sh`` an AddressSanitizer report, kills the child, not
pytest).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import xxhash

from shardcat.format import lazy, recordcodec, records, scatter
from shardcat.format.checksums import crc32c
from shardcat.format.records import PreparedEntry
from shardcat.format.spans import unpack_spans
from shardcat.format.spec import BATCH_ROW_DTYPE, Codec

if "compiled" not in recordcodec.available():
    pytest.skip("the compiled record codec is not built", allow_module_level=True)
from shardcat.format import _ccodec as ccodec


@pytest.fixture(autouse=True, params=["compiled"])
def record_codec(request: pytest.FixtureRequest) -> Any:
    """These tests call the compiled module itself: run them once (overrides conftest's)."""
    previous = recordcodec.use("compiled")
    yield request.param
    recordcodec.use(previous)


def encode(key: str, payload: bytes, alignment: int = 64) -> tuple[bytes, bytes]:
    """One record of one uncompressed entry ``bin``, and its narrow registered spans."""
    entry = PreparedEntry(b"bin", b"application/x-test", Codec.NONE, payload, crc32c(payload))
    raw = key.encode()
    enc = records.encode_record(raw, xxhash.xxh64_intdigest(raw), [entry], alignment)
    data = b"".join(bytes(p) for p in enc.parts)
    return data, struct.pack("<III", enc.offsets[0], len(payload), entry.crc)


def table(rows: list[tuple[int, int, int, int, int, int]]) -> np.ndarray:
    """Batch rows (blob, shard, row, at, length, offset)."""
    return np.array([(b, s, r, 0, a, n, o) for b, s, r, a, n, o in rows], dtype=BATCH_ROW_DTYPE)


# --- a released view: refused as the reference refuses it ------------------------

DATA, SPANS = encode("sample/0001", b"p" * 100)
# A record of the same size under another key: allocated right after the view's
# bytes are freed, it takes their place (the allocator reuses the block).
INTRUDER, _ = encode("intruder/01", b"q" * 100)
assert len(DATA) == len(INTRUDER) < 512


def fresh(data: bytes) -> bytes:
    """A copy of ``data`` of its own (``bytes(data)`` is ``data`` itself)."""
    return bytes(bytearray(data))


def released() -> tuple[memoryview, memoryview]:
    """A view of the record's bytes, released (the bytes freed), and the intruder now in its place."""
    view = memoryview(fresh(DATA))  # the view holds the bytes' only reference
    view.release()
    intruder = memoryview(fresh(INTRUDER))
    return view, intruder


def run_args(view: memoryview) -> tuple[Any, ...]:
    return (view, 0, len(DATA), 64, -1, 64, 0, None, {}, False, "p")


DECODERS: dict[str, Callable[[memoryview], Any]] = {
    "decode_record": lambda v: ccodec.decode_record(v, path="p", offset=64, alignment=64),
    "decode_indexed": lambda v: ccodec.decode_indexed(
        v, key="sample/0001", length=len(DATA), path="p", offset=64, alignment=64, text_cache={}
    ),
    "decode_spanned": lambda v: ccodec.decode_spanned(
        v, "sample/0001", len(DATA), "p", 64, 64, SPANS, unpack_spans, {}
    ),
    "decode_batch": lambda v: recordcodec.decode_batch(
        [v],
        table([(0, 0, 0, 0, len(DATA), 64)]),
        ["sample/0001"],
        [SPANS],
        ["p"],
        [64],
        unpack_spans,
        {},
    ),
}


@pytest.mark.parametrize("name", list(DECODERS))
def test_a_released_view_is_a_value_error_as_in_the_reference(name: str) -> None:
    view, intruder = released()
    with pytest.raises(ValueError, match="released memoryview"):
        records.decode_record(view, path="p", offset=64, alignment=64)
    with pytest.raises(ValueError, match="released memoryview"):
        DECODERS[name](view)
    assert bytes(intruder) == INTRUDER


@pytest.mark.parametrize("name", ["decode_run", "decode_records", "iter_records"])
def test_a_run_over_a_released_view_decodes_nothing(name: str) -> None:
    """The stream's batch decoders leave it to the caller's one-record path, which raises."""
    view, intruder = released()
    if name == "iter_records":
        it = ccodec.iter_records(*run_args(view))
        got, used = list(it), it.used
    else:
        got, used = getattr(ccodec, name)(*run_args(view))
    assert (got, used) == ([], 0)
    assert bytes(intruder) == INTRUDER


def test_a_view_released_between_two_records_of_a_run() -> None:
    two = DATA + DATA.replace(b"sample/0001", b"sample/0002")
    view = memoryview(fresh(two))
    it = ccodec.iter_records(view, 0, len(two), 64, -1, 64, 0, None, {}, False, "p")
    first = next(it)
    assert first.key == "sample/0001"
    view.release()  # the record holds the view object, not an export: this frees the bytes
    intruder = fresh(two.replace(b"sample/", b"intrude"))
    assert list(it) == [] and it.used == len(DATA)
    with pytest.raises(ValueError, match="released memoryview"):
        first["bin"]  # as lazy.LazyRecord._entry: the view is gone
    assert intruder[:4] == b"REC\0"


# --- entries of a record whose bytes changed after decoding ------------------------

PAYLOAD = b"x" * 100
SMALL, SMALL_SPANS = encode("sample/0001", PAYLOAD)
assert len(SMALL) == 256


def decoded(how: str, view: memoryview) -> Any:
    """The record in ``view`` as each entry point returns it (sealed entries or not)."""
    if how == "iter_records":
        return next(ccodec.iter_records(view, 0, len(view), 64, -1, 64, 0, None, {}, False, "p"))
    if how == "decode_spanned":
        return ccodec.decode_spanned(
            view, "sample/0001", len(view), "p", 64, 64, SMALL_SPANS, unpack_spans, {}
        )
    if how == "decode_indexed":
        return ccodec.decode_indexed(
            view,
            key="sample/0001",
            length=len(view),
            path="p",
            offset=64,
            alignment=64,
            text_cache={},
        )
    out, rejected = ccodec.decode_batch(
        [view],
        table([(0, 0, 0, 0, len(view), 64)]),
        ["sample/0001"],
        [SMALL_SPANS],
        ["p"],
        [64],
        {},
    )
    assert rejected == []
    return out[0]


HOWS = ["iter_records", "decode_spanned", "decode_indexed", "decode_batch"]


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize(
    ("p_off", "size"),
    [(1 << 20, 100), (128, 1 << 20), (200, 100), (2**64 - 1, 2**64 - 1), (0, 256)],
)
def test_a_changed_descriptor_is_read_within_the_buffer(how: str, p_off: int, size: int) -> None:
    """As lazy.LazyRecord._entry reads it: the slice the descriptor now names, clamped to the buffer."""
    buf = bytearray(SMALL)
    view = memoryview(buf).toreadonly()  # read-only, but its bytes can change
    rec = decoded(how, view)
    buf[32:48] = struct.pack("<QQ", p_off, size)  # the entry's descriptor, after decoding
    entry = rec["bin"]
    expected = bytes(buf[p_off : p_off + size])
    assert entry.view.nbytes == len(expected) <= len(buf)
    assert bytes(entry.view) == expected
    assert len(entry) == len(expected)
    assert entry.data == expected


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("access", ["len", "data", "view"])
def test_a_changed_descriptor_before_any_view(how: str, access: str) -> None:
    """A sealed entry made before the change reads its bytes after it (len and data make no view)."""
    buf = bytearray(SMALL)
    rec = decoded(how, memoryview(buf).toreadonly())
    entry = rec["bin"]
    buf[32:40] = struct.pack("<Q", 1 << 20)
    if access == "len":
        assert len(entry) in (0, len(PAYLOAD))  # sealed: now nothing; unsealed: the view made
    elif access == "data":
        assert entry.data in (b"", PAYLOAD)
    else:
        assert bytes(entry.view) in (b"", PAYLOAD)


@pytest.mark.parametrize("how", HOWS)
def test_record_slots_set_from_python_are_read_as_the_reference_reads_them(how: str) -> None:
    rec = decoded(how, memoryview(SMALL))
    rec._at = 1 << 40
    with pytest.raises(struct.error):
        rec["bin"]
    rec = decoded(how, memoryview(SMALL))
    rec._layout = "not a layout"
    with pytest.raises(AttributeError):
        rec["bin"]
    rec = decoded(how, memoryview(SMALL))
    rec._buf = memoryview(b"short")
    with pytest.raises(struct.error):
        rec["bin"]


def test_the_reference_entry_is_what_the_compiled_one_matches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The rule the tests above use (a clamped slice) is lazy.LazyRecord._entry's own."""
    buf = bytearray(SMALL)
    rec = decoded("iter_records", memoryview(buf).toreadonly())
    buf[32:48] = struct.pack("<QQ", 200, 100)
    monkeypatch.setattr(lazy, "_compiled_entry", lambda rec, name: None)
    assert bytes(rec._entry("bin").view) == bytes(buf[200:256])


# --- the scatter family and the batch table: what was checked is what is used ---------


def unaligned(values: list[int]) -> np.ndarray:
    """An int64 array one byte off an 8-byte boundary (loaded in C as a copy)."""
    raw = bytearray(1 + 8 * len(values))
    raw[1:] = np.asarray(values, dtype="<i8").tobytes()
    return np.frombuffer(raw, dtype=np.int64, offset=1, count=len(values))


def test_int64_arrays_need_no_alignment() -> None:
    """Before: UBSan's "load of misaligned address" in every function of the family."""
    src = bytes(range(256)) * 4
    positions, lengths = unaligned([0, 300, 700]), unaligned([100, 200, 50])
    assert positions.ctypes.data % 8 == 1
    assert ccodec.crc32c_spans(src, positions, lengths) == scatter.crc32c_spans(
        src, positions, lengths
    )
    ours, ref = np.zeros(1024, np.uint8), np.zeros(1024, np.uint8)
    ccodec.scatter_copy(src[:350], ours, positions, lengths)
    scatter.scatter_copy(src[:350], ref, positions, lengths)
    assert bytes(ours) == bytes(ref)
    runs = (unaligned([0, 0]), unaligned([10, 500]), unaligned([2, 1]))
    ours[:], ref[:] = 0, 0
    ccodec.gather_copy([src], *runs, ours, positions, lengths)
    scatter.gather_copy([src], *runs, ref, positions, lengths)
    assert bytes(ours) == bytes(ref)


def test_scatter_reads_need_no_alignment(tmp_path: Any) -> None:
    data = bytes(range(256)) * 4
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        positions, lengths = unaligned([0, 300, 700]), unaligned([100, 200, 50])
        ours, ref = np.zeros(1024, np.uint8), np.zeros(1024, np.uint8)
        assert ccodec.scatter_read(fd, 10, ours, positions, lengths)
        assert scatter.scatter_read(fd, 10, ref, positions, lengths)
        assert bytes(ours) == bytes(ref)
        runs = (unaligned([fd, fd]), unaligned([10, 500]), unaligned([2, 1]))
        ours[:], ref[:] = 0, 0
        assert ccodec.scatter_read_runs(*runs, ours, positions, lengths) == -1
        assert scatter.scatter_read_runs(*runs, ref, positions, lengths) == -1
        assert bytes(ours) == bytes(ref)
    finally:
        os.close(fd)


def test_a_wanted_key_that_empties_the_rows_while_they_are_read() -> None:
    """Before: the rows' tuples were read after __eq__ had freed them (a segfault)."""
    rows: list[Any] = []
    armed: list[bool] = []
    filler: list[Any] = []

    class Emptier:
        def __hash__(self) -> int:
            return hash("k/0")

        def __eq__(self, other: object) -> bool:
            if armed:
                rows.clear()  # frees the rows: only the list holds them
                # New objects of the same sizes, where the allocator puts them: the freed ones' place.
                filler.extend(
                    (f"z/{i}", ("file:///" + "z" * 20, -i, -i, b"!", f"z/{i}", 9, 1, 1))
                    for i in range(64)
                )
            return False

    wanted = {Emptier(): 0, "k/0": 0, "k/2": 0}
    rows[:] = [("file:///" + "u" * 20, 64 * i, 64, b"", f"k/{i}", 8, None, None) for i in range(4)]
    as_called = list(rows)
    ref = records.batch_table(as_called, {"k/0": 0, "k/2": 0})
    del as_called
    armed.append(True)
    done = ccodec.batch_table(rows, wanted)
    assert rows == []  # __eq__ ran
    packed, keys, spans, urls, alignments, others, seen = done
    assert (keys, spans, urls, alignments, others, seen) == (
        ref.keys,
        ref.spans,
        ref.urls,
        ref.alignments,
        ref.others,
        ref.seen,
    )
    assert bytes(packed) == ref.table.tobytes()


# --- threads: buffers and lists changed while another thread decodes ---------------

_CHILD_PRELUDE = """
import struct, sys, threading
import numpy as np, xxhash
import shardcat.format
from shardcat.format.spans import unpack_spans
from shardcat.format import _ccodec as c, records
from shardcat.format.checksums import crc32c
from shardcat.format.records import PreparedEntry
from shardcat.format.spec import BATCH_ROW_DTYPE, Codec

# Over GIL_FREE_CRC (the payload CRC runs without the GIL), and over glibc's largest
# mmap threshold (once freed, the bytes are unmapped: reading them faults).
BIG = 40 << 20
assert BIG >= c.GIL_FREE_CRC
payload = bytes(range(256)) * (BIG // 256)
entry = PreparedEntry(b"bin", b"application/x-test", Codec.NONE, payload, crc32c(payload))
enc = records.encode_record(b"sample", xxhash.xxh64_intdigest(b"sample"), [entry], 64)
DATA = b"".join(bytes(p) for p in enc.parts)
SPANS = struct.pack("<III", enc.offsets[0], len(payload), entry.crc)
TABLE = np.array([(0, 0, 0, 0, 0, len(DATA), 64)], dtype=BATCH_ROW_DTYPE)
del payload, entry, enc
CACHE = {}
c.decode_batch([memoryview(DATA)], TABLE, ["sample"], [SPANS], ["p"], [64], CACHE)  # the layout, cached
ATTEMPTS = int(sys.argv[1])


def race(change, decode):
    '''`decode()` in this thread while another runs `change()` as soon as this one lets go of the GIL.'''
    go = threading.Event()
    box = []
    def other():
        go.wait()
        try:
            box.append(change())
        except BaseException as e:
            box.append(e)
    t = threading.Thread(target=other)
    t.start()
    go.set()  # the other thread wakes, and waits for the GIL: decode's CRC lets it in
    try:
        out = decode()
    finally:
        t.join()
    return out, box[0]
"""

CHILDREN = {
    # Item 1: the blobs list emptied while a big record's CRC runs; before the fix the
    # view's last reference was dropped right after the CRC and the key read from freed
    # (unmapped) memory: SIGSEGV.
    "blobs_emptied": """
for _ in range(ATTEMPTS):
    blobs = [memoryview(bytes(bytearray(DATA)))]  # the list holds the buffer's only reference
    (out, rejected), _ = race(
        blobs.clear, lambda: c.decode_batch(blobs, TABLE, ["sample"], [SPANS], ["p"], [64], CACHE)
    )
    assert rejected == [] and out[0].key == "sample", (out, rejected)
    assert bytes(out[0]["bin"].view[:4]) == bytes(range(4))
""",
    # Item 4: the keys, spans and paths lists changed during the CRC; before the fix the
    # record kept a borrowed path that had been freed (its `_path` became another object).
    "lists_changed": """
for _ in range(ATTEMPTS):
    keys, spans = ["".join(["sam", "ple"])], [bytes(SPANS)]
    paths = ["".join(["file:///", "a" * 40])]  # only the list refers to these
    def change():
        keys[0], spans[0], paths[0] = "other", b"", None
        return ["".join(["file:///", "b" * 40]) for _ in range(64)]  # reuse the freed blocks
    (out, rejected), _ = race(
        change, lambda: c.decode_batch([memoryview(DATA)], TABLE, keys, spans, paths, [64], CACHE)
    )
    assert rejected == [] and out[0].key == "sample", (out, rejected)
    assert out[0]._path == "file:///" + "a" * 40, out[0]._path
""",
    # Item 2: the caller's view released while a big record's CRC runs: before the fix
    # the release freed (unmapped) the bytes the CRC was reading.
    "view_released": """
decoders = [
    lambda v: c.decode_record(v, path="p", offset=64, alignment=64),
    lambda v: c.decode_spanned(v, "sample", len(DATA), "p", 64, 64, SPANS, unpack_spans, {}),
    lambda v: c.decode_indexed(v, key="sample", length=len(DATA), path="p", offset=64, alignment=64, text_cache={}),
]
for k in range(ATTEMPTS):
    view = memoryview(bytes(bytearray(DATA)))  # the view holds the bytes' only reference
    try:
        rec, outcome = race(view.release, lambda: decoders[k % 3](view))
    except ValueError:  # released before the decoder took it: the reference's error
        continue
    # Released during the decode: refused (BufferError), the export is held; or after it.
    assert outcome is None or isinstance(outcome, BufferError), outcome
    assert rec.key == "sample"
""",
    # Item 3: descriptors changed by another thread while entries are made: before
    # the fix an entry's view reached 1 MiB past a 51,200-byte bytearray.
    "buffer_changed": """
payload = b"x" * 100
entry = PreparedEntry(b"bin", b"application/x-test", Codec.NONE, payload, crc32c(payload))
small = b"".join(bytes(p) for p in records.encode_record(b"k", 1, [entry], 64).parts)
sys.setswitchinterval(1e-6)  # the two threads take turns every few bytecodes
for _ in range(ATTEMPTS):
    buf = bytearray(small * 200)
    view = memoryview(buf).toreadonly()
    recs = list(c.iter_records(view, 0, len(buf), 64, -1, 64, 0, None, {}, False, "p"))
    assert len(recs) == 200
    def change():
        for k in range(200):  # first to last; the entries are made last to first
            buf[256 * k + 32 : 256 * k + 40] = struct.pack("<Q", 1 << 20)
    entries, _ = race(change, lambda: [rec["bin"] for rec in reversed(recs)])
    for e in entries:
        assert e.view.nbytes <= len(buf) and len(bytes(e.view)) == e.view.nbytes, e.view.nbytes
""",
    # Item 5: positions changed by another thread while crc32c_spans and gather_copy run
    # without the GIL; before the fix they were read again there, past the buffers.
    "pieces_changed": """
buf = bytes(bytearray(64 << 20))
starts = np.arange(0, 64 << 20, 16 << 10, dtype=np.int64)
lengths = np.full(len(starts), 16 << 10, dtype=np.int64)
expected = c.crc32c_spans(buf, starts, lengths)
ones = np.ones(len(starts), dtype=np.int64)
for k in range(ATTEMPTS):
    mine = starts.copy()
    def change():
        mine[:] = 1 << 40
    try:
        if k % 2:
            got, _ = race(change, lambda: c.crc32c_spans(buf, mine, lengths))
            assert got == expected
        else:
            dest = np.zeros(64 << 20, dtype=np.uint8)
            race(change, lambda: c.gather_copy([buf], np.zeros(len(starts), np.int64), starts, ones, dest, mine, lengths))
            assert not dest.any()
    except ValueError:  # changed before they were checked: refused
        pass
""",
    # Item 5: read_packed's table changed by another thread while it reads without the
    # GIL; before the fix each row's buffer number was read again there.
    "table_changed": """
import os, tempfile
data = os.urandom(16 << 20)
with tempfile.NamedTemporaryFile() as f:
    f.write(data)
    f.flush()
    fd = os.open(f.name, os.O_RDONLY)
    try:
        for _ in range(ATTEMPTS):
            table = np.zeros(4096, dtype=BATCH_ROW_DTYPE)
            table["length"] = 4096
            table["offset"] = np.arange(4096) * 4096
            def change():
                table["blob"] = 2**31
                table["at"] = 2**40
            out, _ = race(change, lambda: c.read_packed([fd], table, 0, 1 << 20))
            assert b"".join(bytes(g) for g in out) == data
    finally:
        os.close(fd)
""",
}


@pytest.mark.parametrize("name", list(CHILDREN))
def test_threads_change_what_another_thread_decodes(name: str) -> None:
    attempts = int(os.environ.get("SHARDCAT_FUZZ_EXAMPLES", "0") or 0) // 50 or 8
    code = _CHILD_PRELUDE + textwrap.dedent(CHILDREN[name]) + "\nprint('ok')\n"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(attempts)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr[-4000:]
