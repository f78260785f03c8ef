"""The compiled tar module's entry points used as they were not meant to be: no memory harm.

``_ctar.Grouper`` made by ``__new__`` alone, given empty names, and fed by
two threads at once; ``_ctar.advise`` given other buffers, ranges and
advices. What used to corrupt the heap (and abort, or not) runs in a child
process, so a regression fails the test instead of the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

ctar: Any = pytest.importorskip("shardcat.format.tar._ctar")


@pytest.fixture(autouse=True, params=["compiled"])
def tar_walker(request: pytest.FixtureRequest) -> str:
    """These tests call ``_ctar`` itself: run them once (overrides conftest's)."""
    return str(request.param)


@pytest.fixture(autouse=True, params=["compiled"])
def record_codec(request: pytest.FixtureRequest) -> str:
    """Nor do they read a record: once (overrides tests/format/conftest.py's)."""
    return str(request.param)


def _child(code: str) -> Any:
    """Run ``code`` in a fresh interpreter; what it printed last, as JSON."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, f"the child ended with {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


GROUP = """
import json
from shardcat.format.tar import _ctar

def run(g):
    out = [g.add(f"k{i}", ext, 1024 * i, 1024 * i + 512, 100 + i, i) for i in range(300)
           for ext in ("jpg", "cls")]
    out.append(g.finish())
    records, entries, keys = g.take()
    return [repr(out), records.hex(), entries.hex(), keys, g.names()]

print(json.dumps([run(_ctar.Grouper.__new__(_ctar.Grouper)), run(_ctar.Grouper())]))
"""


def test_a_grouper_made_without_init_groups_as_one_made_with_it():
    """Once: its arrays had item size 0, and the first row went past a 0-byte allocation."""
    bare, made = _child(GROUP)
    assert bare == made
    assert len(made[3]) == 300


def test_empty_names_are_no_memory_error_and_leave_no_phantom_name():
    """Once: growing a fresh array by 0 items answered NULL, read as out of memory after the
    name count was bumped (a MemoryError, and an empty name left in ``names()``)."""
    g = ctar.Grouper()
    assert g.add("k", "", 0, 512, 0, 0) is None
    assert g.add("k", "jpg", 512, 1024, 1, 1) is None
    assert g.names() == ["", "jpg"]
    h = ctar.Grouper()
    assert h.add("", "jpg", 0, 512, 1, 1) is None  # an empty key: nothing to copy
    assert h.finish() is None
    records, entries, keys = h.take()
    assert (keys, h.names(), len(records), len(entries)) == ([""], ["jpg"], 32, 24)


THREADS = """
import io, json, sys, tarfile, threading
from shardcat.format.tar import _ctar

def tar(prefix, n):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(n):
            for ext in ("jpg", "cls"):
                info = tarfile.TarInfo(f"{prefix}/{i:06d}.{ext}")
                info.size = 1
                t.addfile(info, io.BytesIO(b"x"))
    return buf.getvalue()

blocks = []
for prefix in ("a", "b"):
    data = tar(prefix, 20000)
    blocks.append(_ctar.walk_block(data, 0, len(data), 0, -1, None)[4])
alone = []
for block in blocks:
    g = _ctar.Grouper()
    g.feed(block, 0)
    g.finish()
    alone.append(g.take())
for _ in range(5):
    g = _ctar.Grouper()
    start = threading.Barrier(3)
    fed, taken = [], []

    def feed(block):
        start.wait()
        fed.append(g.feed(block, 0))

    def take():
        start.wait()
        for _ in range(50):
            taken.append(g.take())

    threads = [threading.Thread(target=feed, args=(b,)) for b in blocks]
    threads.append(threading.Thread(target=take))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fed == [(40000, None), (40000, None)], fed
    g.finish()
    taken.append(g.take())
    keys = [k for _, _, ks in taken for k in ks]
    assert sorted(keys) == sorted(alone[0][2] + alone[1][2]), len(keys)
    assert sum(len(e) for _, e, _ in taken) == 80000 * _ctar.ENTRY_ROW_SIZE
print(json.dumps("ok"))
"""


def test_two_threads_feeding_one_grouper_while_a_third_takes_corrupt_nothing():
    """Once: feed() changed the grouper without the GIL and without a lock (heap corruption)."""
    assert _child(THREADS) == "ok"


ADVISE = """
import json, mmap, os, sys, tempfile
from shardcat.format.tar import _ctar

DONTNEED, POPULATE = getattr(_ctar, "MADV_DONTNEED", 4), getattr(_ctar, "MADV_POPULATE_READ", 22)
refused = []
heap = bytearray(b"x" * (4 << 20))
path = tempfile.mktemp()
with open(path, "wb") as f:
    f.write(b"y" * 100000)
fd = os.open(path, os.O_RDONLY)
m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
anonymous = mmap.mmap(-1, 1 << 20)
anonymous[:] = b"z" * (1 << 20)
cases = {
    "heap": (heap, 0, len(heap), DONTNEED),
    "writable mapping": (anonymous, 0, 1 << 20, DONTNEED),
    "past the end": (m, 0, 100001, DONTNEED),
    "negative": (m, -4096, 4096, DONTNEED),
    "other advice": (m, 0, 4096, 9),  # MADV_REMOVE
}
for name, args in cases.items():
    try:
        _ctar.advise(*args)
    except (TypeError, ValueError):
        refused.append(name)
done = [_ctar.advise(m, 0, 100000, POPULATE) in (0, 22),
        _ctar.advise(m, 4096, 8192, DONTNEED) == 0]
intact = [heap.count(b"x") == len(heap), anonymous[:] == b"z" * (1 << 20), m[:] == b"y" * 100000]
print(json.dumps([sorted(refused), done, intact]))
"""


def test_advise_takes_only_a_read_only_mapping_a_range_inside_it_and_its_two_advices():
    """Once: any buffer and any advice (MADV_DONTNEED zeroed a bytearray's heap pages)."""
    refused, done, intact = _child(ADVISE)
    assert refused == ["heap", "negative", "other advice", "past the end", "writable mapping"]
    assert done == [True, True]
    assert intact == [True, True, True]
