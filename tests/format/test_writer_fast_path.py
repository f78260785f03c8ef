"""ShardWriter.add's compiled common case (``_ccodec.add_plain``) agrees with its Python path.

With the compiled codec, ``add`` hands a record to ``add_plain`` first: an
ASCII key and bytes values under entry names the writer has seen are encoded
and booked in one call; anything else comes back as None and runs the
Python path. These tests run random sequences of adds through both codecs
and compare everything observable: each call's index or error, the shard's
bytes, and the summary. They also check that the compiled call changes
nothing when it declines, and that a failed block write leaves the writer as
the Python path leaves it.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat import config
from shardcat.errors import WriterClosedError
from shardcat.format import ShardReader, ShardWriter, recordcodec, writer
from shardcat.format.spec import ALIGNMENTS, MAX_ENTRIES, MAX_KEY_BYTES

if "compiled" not in recordcodec.available() and config.get("record_codec") == "python":
    pytest.skip("the compiled record codec is not built", allow_module_level=True)

from shardcat.format import _ccodec as ccodec

FIXED = {"clock": lambda: 1_700_000_000_000_000_000, "file_id": bytes(range(16))}


@pytest.fixture(autouse=True, params=["compiled"])
def record_codec(request):
    """These tests switch codecs themselves: run them once (overrides conftest's)."""
    return request.param


def write(ops: list[tuple[Any, Any]], **kw: Any) -> tuple[list[Any], bytes, Any]:
    """Each add's index or (error type, message), the shard's bytes, and its summary."""
    buf = io.BytesIO()
    w = ShardWriter(buf, **FIXED, **kw)
    results: list[Any] = []
    for key, entries in ops:
        try:
            results.append(w.add(key, entries))
        except Exception as e:
            results.append((type(e).__name__, str(e)))
    info = w.close()
    summary = (info.keys, info.specs, info.records.tobytes(), info.entries.tobytes())
    return results, buf.getvalue(), summary


def run(codec: str, ops: list[tuple[Any, Any]], **kw: Any) -> tuple[list[Any], bytes, Any]:
    """:func:`write` with the codec ``codec``."""
    previous = recordcodec.use(codec)
    try:
        return write(ops, **kw)
    finally:
        recordcodec.use(previous)


names = st.sampled_from(["bin", "json", "a.jpg", "txt", "__key__", "__url__", "b" * 300])
values = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=70_000, max_size=70_001).map(bytes),  # past the join limit
    st.text(max_size=8),
    st.integers(),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.builds(lambda n: np.arange(n, dtype=np.int16), st.integers(0, 4)),
    st.binary(max_size=8).map(bytearray),
)
keys = st.one_of(
    st.sampled_from(["k0", "k1", "k2", "img/0001"]),  # repeats: duplicate keys
    st.text(max_size=6),  # empty and non-ASCII keys
    st.just("x" * (MAX_KEY_BYTES + 1)),
    st.binary(max_size=4),  # not text
)
ops = st.lists(
    st.tuples(
        keys,
        st.one_of(
            st.dictionaries(names, values, max_size=4),
            # the common shape, so the compiled path runs often
            st.fixed_dictionaries({"bin": st.binary(max_size=200), "json": st.binary(max_size=20)}),
        ),
    ),
    max_size=25,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, st.sampled_from(ALIGNMENTS[:3]), st.sampled_from([None, "zstd"]))
def test_both_codecs_write_the_same_shard_and_raise_the_same_errors(ops, alignment, compression):
    ours = run("compiled", ops, alignment=alignment, compression=compression)
    ref = run("python", ops, alignment=alignment, compression=compression)
    assert ours[0] == ref[0]
    assert ours[1] == ref[1]
    assert ours[2] == ref[2]


def fresh_writer(**kw: Any) -> tuple[ShardWriter, io.BytesIO]:
    buf = io.BytesIO()
    w = ShardWriter(buf, **FIXED, **kw)
    w.add("first", {"bin": b"seen", "json": b"{}"})  # the names are known from here on
    return w, buf


def state(w: ShardWriter) -> tuple[Any, ...]:
    return (
        w.record_count,
        w.bytes_written,
        list(w._rows),
        list(w._entry_rows),
        list(w._keys),
        set(w._seen),
        list(w._block),
        w._block_bytes,
        w._failed,
    )


def call(w: ShardWriter, key: Any, entries: Any, key_hash: Any = writer.key_hash) -> Any:
    return ccodec.add_plain(w, key, entries, key_hash, MAX_KEY_BYTES, MAX_ENTRIES, 4 << 20)


def test_every_record_after_the_first_takes_the_compiled_call(monkeypatch):
    taken: list[int] = []

    def counted(*args: Any) -> Any:
        index = ccodec.add_plain(*args)
        if index is not None:
            taken.append(index)
        return index

    monkeypatch.setattr(recordcodec, "add_plain", counted)
    ops = [
        (f"img/{i:05d}", {"bin": bytes(i % 300), "json": b"{}", "__key__": "x"})
        for i in range(1000)
    ]
    results, data, _ = write(ops)
    assert results == list(range(1000))
    assert taken == list(range(1, 1000))  # the first record makes the names known
    assert data == run("python", ops)[1]


def test_the_common_record_takes_the_compiled_call():
    w, _ = fresh_writer()
    before = state(w)
    assert call(w, "second", {"bin": b"x" * 100, "json": b"[]", "__key__": "second"}) == 1
    assert w.record_count == 2 and w._keys[-1] == b"second"
    assert state(w) != before


class BytesSub(bytes):
    pass


class StrSub(str):
    pass


@pytest.mark.parametrize(
    ("key", "entries"),
    [
        ("first", {"bin": b"x"}),  # a repeated key: add() raises DuplicateKeyError
        ("", {"bin": b"x"}),
        ("ké", {"bin": b"x"}),
        ("x" * (MAX_KEY_BYTES + 1), {"bin": b"x"}),
        (StrSub("k"), {"bin": b"x"}),
        (b"k", {"bin": b"x"}),
        ("k", {"new": b"x"}),  # a name not seen yet
        ("k", {"bin": "text"}),
        ("k", {"bin": BytesSub(b"x")}),
        ("k", {StrSub("bin"): b"x"}),
        ("k", {1: b"x"}),
        ("k", {"bin": b"x" * (70 << 10)}),  # past the join limit
        ("k", {f"__{i}": b"x" for i in range(3)} | {"_x": 1}),
    ],
)
def test_anything_else_is_declined_and_changes_nothing(key, entries):
    w, _ = fresh_writer()
    before = state(w)
    assert call(w, key, entries) is None
    assert state(w) == before


def test_too_many_entries_are_declined():
    w, _ = fresh_writer()
    w._plain.update(
        {f"e{i}": (f"e{i}".encode(), b"application/octet-stream", 0) for i in range(80)}
    )
    before = state(w)
    assert call(w, "k", {f"e{i}": b"" for i in range(MAX_ENTRIES + 1)}) is None
    assert call(w, "k", {f"e{i}": b"" for i in range(65)}) is None
    assert state(w) == before


@pytest.mark.parametrize("bad_hash", [lambda k: -1, lambda k: 2**64, lambda k: "h"])
def test_a_hash_that_is_not_a_u64_is_declined(bad_hash):
    w, _ = fresh_writer()
    before = state(w)
    assert call(w, "k", {"bin": b"x"}, key_hash=bad_hash) is None
    assert state(w) == before


def test_a_hash_function_that_raises_propagates_and_changes_nothing():
    w, _ = fresh_writer()
    before = state(w)

    def boom(key: bytes) -> int:
        raise KeyError("no hash")

    with pytest.raises(KeyError, match="no hash"):
        call(w, "k", {"bin": b"x"}, key_hash=boom)
    assert state(w) == before


class FailingFile(io.BytesIO):
    """Refuses the write of the first 4 MiB block."""

    def write(self, b: Any) -> int:
        if len(b) > 1 << 20:
            raise OSError(28, "No space left on device")
        return super().write(b)


@pytest.mark.parametrize("codec", ["compiled", "python"])
def test_a_failed_block_write_fails_the_writer_as_the_python_path_does(codec):
    previous = recordcodec.use(codec)
    try:
        w = ShardWriter(FailingFile(), **FIXED)
        payload = bytes(60 << 10)  # joined records: the compiled call books them
        added = 0

        def fill() -> None:
            nonlocal added
            for i in range(200):
                w.add(f"k{i}", {"bin": payload})
                added += 1

        with pytest.raises(OSError, match="No space left"):
            fill()
        assert w._failed and w.closed
        assert w.record_count == added  # the record whose block failed is not booked
        assert len(w._rows) == 5 * added and len(w._keys) == added
        with pytest.raises(WriterClosedError):
            w.add("later", {"bin": payload})
    finally:
        recordcodec.use(previous)


def test_a_hash_function_that_empties_the_entries_cannot_pull_bytes_from_under_the_record():
    """The values are held across the Python calls: the record keeps the bytes it was given."""
    w, buf = fresh_writer()
    entries = {"bin": bytes(range(200)) * 50, "json": b'{"a": 1}'}
    expected = dict(entries)

    def clearing_hash(key: bytes) -> int:
        entries.clear()  # drops the dict's references to both values
        return writer.key_hash(key)

    assert call(w, "k", entries, key_hash=clearing_hash) == 1
    w.close()
    rec = ShardReader(io.BytesIO(buf.getvalue())).get("k")
    assert {n: e.data for n, e in rec.items()} == expected
