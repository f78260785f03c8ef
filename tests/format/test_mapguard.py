"""Guarded mappings (format/mapguard.py, _cmapguard.c): a file cut under one reads zeros and says so.

What could kill the process runs in a child, whose return code says how it ended.
"""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from shardcat.errors import TruncatedError
from shardcat.format import mapguard

pytestmark = pytest.mark.skipif(not mapguard.available(), reason="no compiled guard here")


@pytest.fixture(autouse=True, params=["compiled"])
def record_codec(request: pytest.FixtureRequest) -> str:
    """No record is read here: once (overrides tests/format/conftest.py's)."""
    return str(request.param)


def _child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


CUT = """
import faulthandler, json, os, sys
if sys.argv[2] == "faulthandler":
    faulthandler.enable()  # a SIGBUS handler installed before the guard's
from shardcat.errors import TruncatedError
from shardcat.format.mapguard import map_guarded
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(b"y" * (1 << 20))
fd = os.open(path, os.O_RDONLY)
g = map_guarded(fd, path)
before = g.lost(len(g))
os.truncate(path, 10000)  # the page holding byte 10000 stays; the rest is gone
data = g.map[:]  # touches every page: those past the end fault
try:
    g.check(len(g))
    error = None
except TruncatedError as e:
    error = [e.offset, e.path == path]
print(json.dumps({
    "before": before, "lost": g.lost(len(g)), "lost_below": g.lost(9000),
    "kept": data[:10000] == b"y" * 10000, "zeros": data[10000:] == bytes(len(data) - 10000),
    "error": error,
}))
g.close()
"""


@pytest.mark.parametrize("faulthandler", ["alone", "faulthandler"])
def test_a_file_cut_under_a_guarded_mapping_reads_zeros_and_is_reported(tmp_path, faulthandler):
    proc = _child(CUT, str(tmp_path / "f"), faulthandler)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got == {
        "before": None,
        "lost": 10000,
        "lost_below": None,
        "kept": True,
        "zeros": True,
        "error": [10000, True],
    }


UNGUARDED = """
import mmap, os, sys
from shardcat.format.mapguard import map_guarded
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(b"y" * (1 << 16))
fd = os.open(path, os.O_RDONLY)
g = map_guarded(fd, path)  # the handler is in place
m = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)  # not guarded
os.truncate(path, 100)
assert g.map[:].count(0) > 60000
print("guarded read", flush=True)
m[:]  # a fault outside every guarded mapping: the default action, as without the guard
print("not reached", flush=True)
"""


def test_a_fault_outside_every_guarded_mapping_still_ends_the_process(tmp_path):
    proc = _child(UNGUARDED, str(tmp_path / "f"))
    assert proc.stdout.split() == ["guarded", "read"]
    # Chained to the handler before the guard's: the default action, or AddressSanitizer's
    # own (it reports the fault and aborts) when the sanitizers run (scripts/sanitize.sh).
    sanitized = os.environ.get("SHARDCAT_SANITIZED") == "1"
    assert proc.returncode == (-signal.SIGABRT if sanitized else -signal.SIGBUS), proc.stderr


def test_only_read_only_mappings_are_guarded(tmp_path):
    from shardcat.format import _cmapguard  # type: ignore[attr-defined]

    with pytest.raises(TypeError):
        _cmapguard.guard(bytearray(4096))
    writable = mmap.mmap(-1, 4096)
    with pytest.raises(ValueError, match="ACCESS_READ"):
        _cmapguard.guard(writable)
    writable.close()


def test_a_guarded_mapping_cannot_be_unmapped_until_its_guard_goes(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"z" * 5000)
    fd = os.open(path, os.O_RDONLY)
    try:
        g = mapguard.map_guarded(fd, str(path))
        assert g is not None and len(g) == 5000 and g.size() == 5000
        with pytest.raises(BufferError):
            g.map.close()  # the guard holds it: its pages stay registered while mapped
        g.check(5000)
        g.close()
        assert g.map.closed
        g.close()  # twice is fine
        empty = tmp_path / "empty"
        empty.write_bytes(b"")
        efd = os.open(empty, os.O_RDONLY)
        assert mapguard.map_guarded(efd, str(empty)) is None  # nothing to map: read
        os.close(efd)
    finally:
        os.close(fd)


def test_past_the_guards_there_are_the_files_are_read_not_mapped(tmp_path):
    from shardcat.format import _cmapguard  # type: ignore[attr-defined]

    path = tmp_path / "f"
    path.write_bytes(b"z" * 100)
    fd = os.open(path, os.O_RDONLY)
    held: list[Any] = []
    try:
        while True:
            g = mapguard.map_guarded(fd, str(path))
            if g is None:
                break
            held.append(g)
            assert len(held) <= _cmapguard.SLOTS
        assert len(held) >= 1  # other tests' guards may hold a few slots
    finally:
        for g in held:
            g.close()
        os.close(fd)
    again = mapguard.map_guarded(os.open(path, os.O_RDONLY), str(path))
    assert again is not None  # the slots were freed
    again.close()


def test_a_shorter_file_is_reported_without_any_fault(tmp_path):
    """A cut inside the last mapped page reads zeros without a fault: the size says it."""
    path = tmp_path / "f"
    path.write_bytes(b"z" * 3000)
    fd = os.open(path, os.O_RDONLY)
    g = mapguard.map_guarded(fd, str(path))
    assert g is not None
    try:
        os.truncate(path, 1000)
        assert g.map[999:1001] == b"z\x00"
        assert g.lost(3000) == 1000 and g.lost(1000) is None
        with pytest.raises(TruncatedError) as e:
            g.check(3000)
        assert e.value.offset == 1000
    finally:
        g.close()
        os.close(fd)
