"""The compiled codec's CPython-internal tricks sit behind one switch, with the plain path as the reference.

``format/ccodec/ccodec.h`` lists the tricks (records outside the cyclic GC,
a free list, accessors installed on the Python classes, objects made by
writing their slots in place). The test command runs with them on; here a
child interpreter set up with ``SHARDCAT_CPYTHON_TRICKS=0`` reads the same
records (a whole read, a stream, a batch ``take``, a tar sample) and must
print the same thing, with every trick off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig

import pytest

from shardcat.format import recordcodec

pytestmark = pytest.mark.skipif(
    "compiled" not in recordcodec.available(), reason="the compiled record codec is not built"
)

_CHILD = r"""
import gc, io, json, struct, sys
import crc32c
from shardcat.format import ShardReader, ShardWriter, lazy, recordcodec
from shardcat.format import _ccodec
from shardcat.format.entries import Record, _StoredEntry

buf = io.BytesIO()
with ShardWriter(buf, clock=lambda: 1, file_id=bytes(16)) as w:
    for i in range(300):
        w.write({"__key__": f"k/{i:04d}", "bin": bytes([i % 251]) * (i * 7 % 900), "txt": f"t{i}"})
data = buf.getvalue()

def plain(rec):
    return [rec.key, rec.index, rec.offset, rec.length,
            {n: [e.content_type, e.data.hex(), len(e), bytes(e.view).hex()] for n, e in rec.items()}]

with ShardReader(data) as r:
    whole = [plain(rec) for rec in r.read_range(0, 300)]
    batch = r.take(list(range(0, 300, 3)))
    tracked = sorted({gc.is_tracked(rec) for rec in batch})
    taken = [plain(rec) for rec in batch]
    streamed = [plain(rec) for rec in r.iter_records()]
sample = b"abcdefgh" * 10
spans = struct.pack("<III", 0, 40, crc32c.crc32c(sample[:40])) + struct.pack("<III", 40, 40, crc32c.crc32c(sample[40:]))
tar = recordcodec.tar_record(sample, "s", (("a", "x/a"), ("b", "x/b")), spans, 7, Record)
print(json.dumps({
    "tricks": recordcodec.cpython_tricks,
    "installed": "__getitem__" in lazy.LazyRecord.__dict__
        and lazy.LazyRecord.__dict__["__getitem__"] is not _ccodec.record_getitem,
    "entry_accessors": type(_StoredEntry.__dict__.get("__len__")).__name__,
    "tracked": tracked,
    "records": [whole, taken, streamed, plain(tar)],
}))
"""


def _run(tricks: str) -> dict[str, object]:
    env = {**os.environ, "SHARDCAT_CPYTHON_TRICKS": tricks, "SHARDCAT_RECORD_CODEC": "compiled"}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_the_plain_path_reads_the_same_records_with_every_trick_off() -> None:
    on, off = _run("1"), _run("0")
    assert on["records"] == off["records"]
    assert off["tricks"] is False and off["installed"] is False and off["tracked"] == [True]
    assert off["entry_accessors"] == "function"  # _StoredEntry keeps its Python __len__
    if recordcodec._compiled.CPYTHON_TRICKS_BUILT:  # a tested CPython with the GIL
        assert on["tricks"] is True and on["installed"] is True
        assert on["entry_accessors"] == "method_descriptor"
        assert on["tracked"] == [False]  # a batch's records leave the collector


def test_this_interpreter_runs_with_the_tricks_where_they_are_built() -> None:
    built = bool(recordcodec._compiled.CPYTHON_TRICKS_BUILT)
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert built == ((3, 10) <= sys.version_info[:2] <= (3, 13) and not free_threaded)
    assert recordcodec.cpython_tricks == (
        built and os.environ.get("SHARDCAT_CPYTHON_TRICKS", "1").strip() != "0"
    )
