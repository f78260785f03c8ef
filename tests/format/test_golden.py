"""Golden shards pin the bytes of each format version.

Every golden file of a supported version must read back to the same samples,
and the writer must reproduce the current version's files byte for byte.
If a change to the writer breaks the second test on purpose, bump the format
version, regenerate with tests/data/golden/make_golden.py and keep the old
files in their own folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from shardcat.format import FORMAT_VERSION, ShardReader

GOLDEN = Path(__file__).parents[1] / "data" / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
assert _spec is not None and _spec.loader is not None
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)


@pytest.mark.parametrize("name", sorted(make_golden.CASES))
def test_writer_reproduces_the_golden_bytes_of_the_current_version(name):
    alignment, compression = make_golden.CASES[name]
    assert FORMAT_VERSION == (1, 0)
    expected = (GOLDEN / "v1" / name).read_bytes()
    assert make_golden.write(alignment, compression) == expected


@pytest.mark.parametrize(
    "path", sorted(GOLDEN.glob("v*/*.shard")), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_every_golden_file_reads_back_and_verifies(path):
    with ShardReader(path) as r:
        assert r.verify().records == len(make_golden.golden_samples())
        assert r.metadata == {"dataset": "golden", "note": "format v1 golden file"}
        assert r.header.shard_number == 7
        assert r.header.file_id == make_golden.FILE_ID
        for key, entries in make_golden.golden_samples():
            rec = r.get(key)
            assert sorted(rec.entries) == sorted(entries)
            for name, value in entries.items():
                got = rec[name].decode()
                if isinstance(value, np.ndarray):
                    np.testing.assert_array_equal(got, value)
                elif isinstance(value, (dict, str)):
                    assert got == value
                elif isinstance(value, bytes):
                    assert rec[name].data == value
                else:  # an Entry
                    assert rec[name].data == value.data
                    assert rec[name].content_type == value.content_type
