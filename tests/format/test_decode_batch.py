"""The batch decoder of indexed reads (``recordcodec.decode_batch``) under both record codecs.

A batch is a few read buffers, a table of where each record lies in them
(``spec.BATCH_ROW_DTYPE``) and, per record, the key and the entries the index
registered. Both codecs must return the same records, and for damaged input
raise the reference's error; the compiled one must decide sound records by
itself, without calling the reference.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcat.errors import ChecksumError, FormatError, TruncatedError
from shardcat.format import recordcodec, records
from shardcat.format.checksums import crc32c
from shardcat.format.records import PreparedEntry
from shardcat.format.spec import BATCH_ROW_DTYPE, Codec

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def narrow(offsets: list[int], sizes: list[int], crcs: list[int]) -> bytes:
    """A catalog's packed spans (format/spans.py, the narrow form)."""
    return b"".join(struct.pack("<III", *t) for t in zip(offsets, sizes, crcs))


def wide(value: bytes) -> bytes:
    return b"".join(struct.pack("<QQI", *t) for t in struct.iter_unpack("<III", value))


def unpack(value: bytes, count: int) -> list[tuple[int, int, int]]:
    if len(value) == 12 * count:
        return list(struct.iter_unpack("<III", value))
    if len(value) == 20 * count:
        return list(struct.iter_unpack("<QQI", value))
    raise ValueError(f"spans of {len(value)} bytes do not describe {count} entries")


def encode(key: str, payloads: list[bytes], alignment: int) -> tuple[bytes, bytes]:
    """A record's bytes and its registered (narrow) spans."""
    entries = [
        PreparedEntry(f"e{i}".encode(), b"application/octet-stream", Codec.NONE, p, crc32c(p))
        for i, p in enumerate(payloads)
    ]
    kb = key.encode()
    enc = records.encode_record(kb, xxhash.xxh64_intdigest(kb), entries, alignment)
    data = b"".join(bytes(p) for p in enc.parts)
    return data, narrow(enc.offsets, [len(p) for p in payloads], [e.crc for e in entries])


class Batch:
    """Records laid out in two files, each file read as a few blobs; rows in read order."""

    def __init__(self, sizes: list[list[int]], alignment: int = 64, per_blob: int = 3) -> None:
        self.keys: list[str] = []
        self.spans: list[bytes] = []
        self.records: list[bytes] = []
        self.paths = ["file://a.shard", "file://b.shard"]
        self.alignments = [alignment, alignment]
        rows = []
        blobs: list[bytearray] = []
        for i, entry_sizes in enumerate(sizes):
            key = f"k/{i:05d}"
            data, spans = encode(key, [bytes([i % 251]) * s for s in entry_sizes], alignment)
            self.keys.append(key)
            self.spans.append(spans)
            self.records.append(data)
            if i % per_blob == 0:
                blobs.append(bytearray(b"pre"))  # records need not start a blob
            at = len(blobs[-1])
            blobs[-1] += data
            rows.append((len(blobs) - 1, i % 2, i, 0, at, len(data), 4096 * i))
        # Table rows in another order than keys: the result is by row, not by position.
        rows.reverse()
        self.table = np.array(rows, dtype=BATCH_ROW_DTYPE)
        self.blobs = [memoryview(bytes(b)) for b in blobs]

    def decode(self, blobs: list[memoryview] | None = None, **changes: Any) -> list[Any]:
        args = {
            "keys": self.keys,
            "spans": self.spans,
            "paths": self.paths,
            "alignments": self.alignments,
        } | changes
        return recordcodec.decode_batch(
            self.blobs if blobs is None else blobs,
            self.table,
            args["keys"],
            args["spans"],
            args["paths"],
            args["alignments"],
            unpack,
            {},
        )


entry_sizes = st.lists(
    st.lists(st.integers(0, 300), min_size=0, max_size=3), min_size=1, max_size=8
)


@SETTINGS
@given(entry_sizes, st.sampled_from([8, 64, 512]))
def test_every_record_comes_back_by_row(sizes: list[list[int]], alignment: int) -> None:
    batch = Batch(sizes, alignment)
    out = batch.decode()
    assert [r.key for r in out] == batch.keys
    for i, rec in enumerate(out):
        assert rec.offset == 4096 * i and rec.length == len(batch.records[i])
        assert [bytes(rec[n].data) for n in rec] == [bytes([i % 251]) * s for s in sizes[i]]


def test_wide_spans_are_registered_spans_too() -> None:
    batch = Batch([[10, 20], [5]])
    out = batch.decode(spans=[wide(s) for s in batch.spans])
    assert [r.key for r in out] == batch.keys


def test_the_compiled_codec_decides_sound_records_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    if recordcodec.active() != "compiled":
        pytest.skip("a compiled-codec property")
    called: list[int] = []
    reference = records.decode_indexed

    def counted(*args: Any, **kwargs: Any) -> Any:
        called.append(1)
        return reference(*args, **kwargs)

    monkeypatch.setattr(records, "decode_indexed", counted)
    batch = Batch([[100, 3]] * 20)
    assert len(batch.decode()) == 20
    assert called == []


# --- damage: both codecs raise the reference's error -------------------------


def _error(batch: Batch, **kwargs: Any) -> tuple[type[BaseException], str]:
    with pytest.raises(FormatError) as info:
        batch.decode(**kwargs)
    return type(info.value), str(info.value)


@pytest.mark.parametrize(
    ("damage", "error"),
    [
        ("key", FormatError),
        ("spans", ChecksumError),
        ("count", ChecksumError),
        ("payload", ChecksumError),
        ("truncated", TruncatedError),
    ],
)
def test_damage_raises_the_references_error(damage: str, error: type[BaseException]) -> None:
    batch = Batch([[100, 3], [7], [40, 40]])
    kwargs: dict[str, Any] = {}
    blobs = list(batch.blobs)
    if damage == "key":
        kwargs["keys"] = [*batch.keys[:1], "k/other", *batch.keys[2:]]
    elif damage == "spans":
        s = bytearray(batch.spans[1])
        s[-1] ^= 1  # the registered CRC differs from the record's
        kwargs["spans"] = [batch.spans[0], bytes(s), batch.spans[2]]
    elif damage == "count":
        kwargs["spans"] = [batch.spans[0], batch.spans[1] * 2, batch.spans[2]]
    elif damage == "payload":
        b = bytearray(blobs[0])
        row = batch.table[batch.table["row"] == 2][0]
        b[row["at"] + row["length"] - 64] ^= 0x40  # its last payload (40 bytes, aligned to 64)
        blobs[0] = memoryview(bytes(b))
    else:
        blobs[0] = blobs[0][:-1]
    kwargs["blobs"] = blobs
    compiled = recordcodec.active() == "compiled"
    got = _error(batch, **kwargs)
    assert issubclass(got[0], error)
    # The other codec raises the very same error.
    recordcodec.use("python" if compiled else "auto")
    try:
        if recordcodec.active() != ("python" if compiled else "compiled"):
            pytest.skip("only one codec is built")
        assert _error(batch, **kwargs) == got
    finally:
        recordcodec.use("compiled" if compiled else "python")


def test_a_table_that_points_outside_the_batch_is_a_value_error() -> None:
    batch = Batch([[1]])
    batch.table["row"] = 5
    with pytest.raises((ValueError, IndexError)):
        batch.decode()
