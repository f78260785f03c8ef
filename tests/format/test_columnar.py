"""The shared MDS/LitData file layout, LitData's leaf names and the raw-array content type."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardcat.errors import SampleDecodeError
from shardcat.format.columnar import (
    Column,
    ColumnarError,
    ColumnarTruncatedError,
    ColumnFile,
    ColumnLayout,
    scan_columns,
)
from shardcat.format.entries import decode_value, decodes_to_bytes, raw_array_type
from shardcat.format.litdata import leaf_names
from shardcat.format.mds import column_for


def _file(samples: list[bytes], config: bytes = b"") -> bytes:
    """A file as MDSWriter lays one out: count, absolute offsets, config, samples."""
    n = len(samples)
    start = 4 + 4 * (n + 1) + len(config)
    offsets = np.cumsum([start] + [len(s) for s in samples]).astype("<u4")
    return np.uint32(n).tobytes() + offsets.tobytes() + config + b"".join(samples)


def _sample(key: int, text: bytes) -> bytes:
    # columns: id (int, fixed 8), text (str, variable): one size in the header
    return np.uint32(len(text)).tobytes() + np.int64(key).tobytes() + text


LAYOUT = ColumnLayout(
    "mds", (column_for("id", "int", 8), column_for("text", "str", None)), key_column=0
)


def test_a_file_scans_into_records_keyed_by_an_integer_column():
    data = _file([_sample(41, b"hello"), _sample(7, b"")], config=b'{"x": 1}')
    info = scan_columns(data, ColumnFile("/d/shard.00000.mds", 2, 10), LAYOUT, shard_number=3)
    assert info.keys == ["41", "7"] and (info.kind, info.first_index) == ("mds", 10)
    assert [s.name for s in info.specs] == ["text"]  # the key column is no entry
    row = info.entries[0]
    start = int(info.records["offset"][0])
    assert bytes(data[start + int(row["offset"]) :][: int(row["size"])]) == b"hello"
    assert int(info.records["length"][1]) == 12 and int(info.entries[1]["size"]) == 0


def test_damage_is_named_by_sample_and_truncation_is_typed():
    good = _file([_sample(1, b"ab"), _sample(2, b"cd")])
    file = ColumnFile("/d/s.mds", 2, 100)
    bad = bytearray(good)
    bad[-14:-10] = np.uint32(3).tobytes()  # sample 101's text size: one byte too many
    with pytest.raises(ColumnarError, match="sample 101 is damaged") as e:
        scan_columns(bytes(bad), file, LAYOUT)
    assert e.value.path == "/d/s.mds"
    with pytest.raises(ColumnarTruncatedError, match="last sample ends"):
        scan_columns(good[:-1], file, LAYOUT)
    with pytest.raises(ColumnarTruncatedError, match=r"index\.json says"):
        scan_columns(good[:-1], ColumnFile("/d/s.mds", 2, 100, size=len(good)), LAYOUT)
    with pytest.raises(ColumnarError, match=r"holds 2 samples, index\.json says 3"):
        scan_columns(good, ColumnFile("/d/s.mds", 3, 0), LAYOUT)


def test_litdata_leaves_are_named_by_their_path_in_the_tree():
    leaf = {"type": None, "context": None, "children_spec": []}
    tree = {
        "type": "builtins.dict",
        "context": json.dumps(["image", "meta", "pair"]),
        "children_spec": [
            leaf,
            {"type": "builtins.dict", "context": json.dumps(["a"]), "children_spec": [leaf]},
            {"type": "builtins.tuple", "context": "null", "children_spec": [leaf, leaf]},
        ],
    }
    assert leaf_names(json.dumps([1, tree]), 4, "i") == ["image", "meta.a", "pair.0", "pair.1"]
    assert leaf_names(json.dumps([1, leaf]), 1, "i") == ["item"]
    with pytest.raises(ColumnarError, match="data_format 3"):
        leaf_names(json.dumps([1, tree]), 3, "i")


def test_raw_arrays_decode_to_numbers():
    assert decode_value(memoryview(np.int64(-5).tobytes()), raw_array_type("<i8")) == -5
    assert decode_value(memoryview(b"\x01"), raw_array_type("bool")) is True
    vec = np.arange(6, dtype="<f4").reshape(2, 3)
    got = decode_value(memoryview(vec.tobytes()), raw_array_type("float32", (2, 3)))
    assert got.dtype == np.dtype("<f4") and got.tolist() == vec.tolist()
    assert not decodes_to_bytes(raw_array_type("<u2"))
    with pytest.raises(SampleDecodeError, match="not one"):
        decode_value(memoryview(b"\0" * 16), raw_array_type("<i8"))
    with pytest.raises(SampleDecodeError):
        decode_value(memoryview(b"\0" * 3), raw_array_type("<i8"))


def test_mds_columns_map_to_content_types():
    assert column_for("x", "jpeg:90", None).content_type == "image/jpeg"
    assert column_for("x", "uint16", 2) == Column(
        "x", "uint16", 2, "application/x-raw-array; dtype=<u2", "<u2"
    )
    assert column_for("x", "float64", 8).key_dtype is None  # floats are no keys
    assert column_for("x", "pkl", None).content_type == "application/x-mds; encoding=pkl"
    dynamic = column_for("x", "ndarray", None)
    assert dynamic.content_type == "application/x-mds; encoding=ndarray"
