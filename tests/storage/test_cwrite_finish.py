"""``_cwrite.finish`` from several threads at once (issue 30): each returns, with the write's outcome.

Joining one POSIX thread twice is undefined; before the fix the second
``finish`` of a handle never returned (3 of 3 runs of the script below hung
until killed). It runs in a process of its own, bounded in time, so that a
hang fails the test instead of stopping the run.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardcat.storage import atomic

pytestmark = pytest.mark.skipif(atomic._cwrite is None, reason="needs the compiled write-behind")

SCRIPT = textwrap.dedent(
    """
    import errno, os, sys, threading
    from shardcat.storage import _cwrite

    path, full = sys.argv[1], sys.argv[2]
    data = bytes(range(256)) * (32 << 10)  # 8 MiB

    def finish_from(handle, n):
        out = [None] * n
        def one(i):
            try:
                out[i] = _cwrite.finish(handle)
            except OSError as e:
                out[i] = e.errno
        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
            if t.is_alive():
                print("a finish() never returned", flush=True)
                os._exit(2)
        return out

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for _ in range(20):
        handle = _cwrite.start(fd, data, 0, 0)
        assert finish_from(handle, 4) == [None] * 4
        assert _cwrite.finish(handle) is None  # and again, alone
    assert os.fstat(fd).st_size == 20 * len(data)
    os.close(fd)
    if os.path.exists(full):  # a failed write: every finisher is told
        fd = os.open(full, os.O_WRONLY)
        handle = _cwrite.start(fd, data, 0, 0)
        assert finish_from(handle, 4) == [errno.ENOSPC] * 4
        os.close(fd)
    print("ok", flush=True)
    """
)


def test_two_finishers_both_return(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "out.bin"), "/dev/full"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        proc.returncode,
        proc.stdout,
        proc.stderr,
    )
