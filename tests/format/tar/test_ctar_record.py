"""``tar_record``, compiled (``format/ccodec/tar_record.c``) and its Python twin
(``format/tar/read.py``), against ``read_tar_record``, the reference.

Each must build the same record (names, bytes, content types, offset, length)
and return None wherever the reference raises, so the point lookup hands
those samples to the Python path and its typed errors.
"""

from __future__ import annotations

import gc
import importlib
import struct
import sys
from typing import Any

import pytest

from shardcat.errors import ChecksumError, TruncatedError
from shardcat.format import Record, entries, recordcodec
from shardcat.format.tar import read, read_tar_record, scan_tar
from shardcat.testing.tars import write_wds_tar


@pytest.fixture(params=["compiled", "python"])
def tar_record(request: pytest.FixtureRequest) -> Any:
    """The compiled ``tar_record`` (where it was built) and its Python twin."""
    if request.param == "python":
        return read.tar_record
    if "compiled" not in recordcodec.available():
        pytest.skip("the compiled record codec is not built")
    return importlib.import_module("shardcat.format._ccodec").tar_record


NARROW, WIDE = struct.Struct("<III"), struct.Struct("<QQI")


def _samples(tmp_path: Any) -> list[tuple[bytes, str, list[Any], list[tuple[int, int, int]], int]]:
    path = write_wds_tar(tmp_path / "a.tar", n=24)
    info = scan_tar(path)
    raw = path.read_bytes()
    out = []
    for i in range(info.record_count):
        offset, length = int(info.offsets[i]), int(info.lengths[i])
        out.append(
            (raw[offset : offset + length], info.keys[i], info.layout(i), info.spans(i), offset)
        )
    return out


def _specs(layout: list[Any]) -> tuple[tuple[str, str], ...]:
    return tuple((spec.name, spec.content_type) for spec in layout)


def _packed(spans: list[tuple[int, int, int]], packing: struct.Struct) -> bytes:
    return b"".join(packing.pack(*span) for span in spans)


def _described(record: Record) -> tuple[Any, ...]:
    entries = [
        (n, type(e).__name__, e.content_type, e.codec, bytes(e.data), type(e.view).__name__)
        for n, e in record.entries.items()
    ]
    return record.key, record.index, record.offset, record.length, entries


@pytest.mark.parametrize("packing", [NARROW, WIDE], ids=["narrow", "wide"])
def test_the_same_record_as_the_reference(tar_record, tmp_path, packing):
    for data, key, layout, spans, offset in _samples(tmp_path):
        got = tar_record(data, key, _specs(layout), _packed(spans, packing), offset, Record)
        expected = read_tar_record(data, key, layout, spans, path="a.tar", offset=offset)
        assert type(got) is Record
        assert _described(got) == _described(expected)
        assert got == expected
        assert all(e.view.obj is data for e in got.entries.values())  # views of the read bytes


def test_another_record_class_is_called(tar_record, tmp_path):
    # Record itself is made with its slots written in place; any other class
    # is called with Record's arguments, as the Python function does.
    class Tagged(Record):
        __slots__ = ("tag",)

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.tag = args

    data, key, layout, spans, offset = _samples(tmp_path)[0]
    got = tar_record(data, key, _specs(layout), _packed(spans, NARROW), offset, Tagged)
    plain = tar_record(data, key, _specs(layout), _packed(spans, NARROW), offset, Record)
    assert type(got) is Tagged and type(plain) is Record
    assert got.tag[0] == key and got.tag[2:] == (-1, offset, len(data))
    assert _described(got) == _described(plain)


def test_none_wherever_the_reference_raises(tar_record, tmp_path):
    data, key, layout, spans, offset = _samples(tmp_path)[4]
    specs, packed = _specs(layout), _packed(spans, NARROW)
    at, size, _ = spans[-1]
    flipped = bytearray(data)
    flipped[at + size - 1] ^= 0x10
    assert tar_record(bytes(flipped), key, specs, packed, offset, Record) is None
    with pytest.raises(ChecksumError, match="CRC32C"):
        read_tar_record(bytes(flipped), key, layout, spans, offset=offset)
    short = data[: at + size - 1]
    assert tar_record(short, key, specs, packed, offset, Record) is None
    with pytest.raises(TruncatedError):
        read_tar_record(short, key, layout, spans, offset=offset)
    # Spans that do not describe the layout's entries, or a span past the end.
    assert tar_record(data, key, specs, packed[:-1], offset, Record) is None
    assert tar_record(data, key, specs[:-1], packed, offset, Record) is None
    far = _packed([*spans[:-1], (len(data), 1, 0)], NARROW)
    assert tar_record(data, key, specs, far, offset, Record) is None
    huge = _packed([*spans[:-1], (1, 2**64 - 1, 0)], WIDE)
    assert tar_record(data, key, specs, huge, offset, Record) is None
    # Not the expected types: None too, never a crash.
    assert tar_record(bytearray(data), key, specs, packed, offset, Record) is None
    assert tar_record(data, key, list(specs), packed, offset, Record) is None
    with pytest.raises(TypeError):
        tar_record(data, key, specs, packed, offset)


def test_no_reference_leaks(tar_record, tmp_path):
    samples = _samples(tmp_path)
    args = [(d, k, _specs(lay), _packed(s, NARROW), o) for d, k, lay, s, o in samples]
    bad = bytearray(args[0][0])
    bad[0] ^= 0xFF
    for _ in range(50):  # warm every cache
        for a in args:
            tar_record(*a, Record)
    gc.collect()
    # Statically allocated objects (a small int offset such as 0) are shared with every
    # thread of the process (an in-process moto server's, under xdist): their counts move.
    mine = [x for a in args for x in a if sys.getrefcount(x) < 1 << 29]
    before = [sys.getrefcount(x) for x in mine]
    # A leaked record or entry would stay tracked. Only theirs are counted: a Dask cluster
    # another test left in this worker process makes and drops objects on its own threads.
    made = (Record, entries._StoredEntry)
    objects = sum(type(x) in made for x in gc.get_objects())
    for _ in range(200):
        for a in args:
            tar_record(*a, Record)
        tar_record(bytes(bad), *args[0][1:], Record)
    gc.collect()
    assert [sys.getrefcount(x) for x in mine] == before
    # 200 x 24 records and their entries made: none may stay.
    assert sum(type(x) in made for x in gc.get_objects()) == objects
